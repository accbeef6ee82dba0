"""The cluster's identity and the backends it has had, kept in the controller's
--data-dir.

Every backend holds a slice of every cluster, so a controller that met only some of
them would answer from part of the database and acknowledge writes the others miss.
The names of the backends it has admitted are kept (`members.json`, beside the
decision log), and a start that does not meet every one of them is refused, naming
those missing. So is the cluster's id, which each backend also keeps from its first
bus (`backend/owner.py`): a backend of another cluster is refused, whatever its
directory holds, and a controller whose --data-dir was lost takes the id its backends
agree on, and the names of the cluster's backends that they keep from their bus hello.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from mbds.errors import BackendUnavailable, shorten

FILE = "members.json"


class Members:
    """The cluster's id and the names of the backends admitted so far; None as the path
    keeps nothing (a controller without a --data-dir of its own, in tests)."""

    def __init__(self, directory: Path | None) -> None:
        self.path = None if directory is None else directory / FILE
        self.names: set[str] = set()
        # Those seen holding this cluster's id: their data dirs have served it.
        self.served: set[str] = set()
        self.cluster = ""                 # until `identify`
        if self.path is not None and self.path.exists():
            try:
                kept = json.loads(self.path.read_text())
                if isinstance(kept, list):          # names alone: kept before cluster ids
                    kept = {"cluster": "", "backends": kept}
                if not isinstance(kept, dict):
                    raise ValueError("not a cluster id and a list of backend names")
                names, cluster = kept.get("backends"), kept.get("cluster")
                served = kept.get("served", [])
                if not (isinstance(names, list) and isinstance(served, list)
                        and all(isinstance(n, str) for n in names + served)
                        and isinstance(cluster, str)):
                    raise ValueError("not a cluster id and a list of backend names")
            except ValueError as e:
                raise BackendUnavailable(f"{self.path}: {shorten(str(e))}") from None
            self.names, self.served, self.cluster = set(names), set(served), cluster

    def identify(self, held: dict[str, str], named: Iterable[str] = ()) -> None:
        """Settle the cluster's id from what each backend met holds (name -> id, "" for
        one that has none yet): the id kept here, else the one the backends agree on,
        else a new one (`keep` puts it on disk, before any backend is told it). Refuses
        backends of another cluster, naming them and the ids. `named`: the backends the
        cluster has had, as those met keep them, among those to meet (this controller's
        own list may have been lost with its --data-dir)."""
        ids = sorted({c for c in held.values() if c})
        if not self.cluster and len(ids) > 1:
            groups = "; ".join(shorten(", ".join(sorted(n for n, c in held.items() if c == i)))
                               + f" to {shorten(i, 40)}" for i in ids[:4])
            raise BackendUnavailable(
                f"the backends belong to different clusters ({groups}"
                f"{'; …' if len(ids) > 4 else ''}): a backend's records are its own "
                "cluster's, and it joins no other")
        cluster = self.cluster or (ids[0] if ids else uuid.uuid4().hex)
        for name, theirs in sorted(held.items()):
            self.check(name, theirs, cluster)
        self.cluster = cluster
        self.names.update(named)

    def check(self, name: str, cluster: str, ours: str = "") -> None:
        """Refuse backend `name` if it belongs to another cluster than `ours` (this one's)."""
        ours = ours or self.cluster
        if cluster and cluster != ours:
            where = f" (kept in {self.path})" if self.path is not None else ""
            raise BackendUnavailable(
                f"backend {shorten(name)} belongs to cluster {shorten(cluster, 40)}, not to "
                f"this controller's cluster {ours}{where}: a backend's records are "
                "its own cluster's, and it joins no other")

    def check_kept(self, name: str, address: str, cluster: str) -> None:
        """Refuse backend `name` if it holds no cluster id though it has served this
        cluster: its data dir is empty or was replaced, and the records it held are not
        there (admitted, it would answer without them, for good)."""
        if cluster or name not in self.served:
            return
        raise BackendUnavailable(
            f"backend {shorten(name)} ({address}) holds no data of this cluster, though it "
            f"has served it: its data dir is empty or was replaced, and its part of every "
            f"cluster is not there. Start it on its own data dir; to go on without the "
            f"records it held, remove {shorten(name)} from \"served\" in {self.path}")

    def serving(self, name: str) -> None:
        """Backend `name` holds this cluster's id: remember it (durably, the first time)."""
        if name not in self.served:
            self.served.add(name)
            self.keep()

    def check_all(self, met: list[str]) -> None:
        """Refuse a start that met only some of the backends the cluster has had."""
        missing = sorted(self.names - set(met))
        if missing:
            raise BackendUnavailable(
                f"backend{'s' if len(missing) > 1 else ''} {shorten(', '.join(missing))} of "
                f"this cluster {'are' if len(missing) > 1 else 'is'} not among those met "
                f"({shorten(', '.join(sorted(met)))}): each holds part of every cluster, so "
                f"the controller does not serve without {'them' if len(missing) > 1 else 'it'}"
                f" (the cluster's backends are listed in {self.path}); start "
                f"{'them' if len(missing) > 1 else 'it'} too (with compose: `up` with the "
                "same `--scale backend=N` as before)")

    def admit(self, names: list[str]) -> None:
        """Keep `names` among the cluster's backends, durably before they serve."""
        if set(names) <= self.names:
            return
        self.names.update(names)
        self.keep()

    def keep(self) -> None:
        """Write the id and the names, durably (replaced whole, never half-written)."""
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"cluster": self.cluster, "backends": sorted(self.names),
                       "served": sorted(self.served)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
