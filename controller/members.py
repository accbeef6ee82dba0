"""The backends this cluster has had, kept in the controller's --data-dir.

Every backend holds a slice of every cluster, so a controller that met only some of
them would answer from part of the database and acknowledge writes the others miss.
The names of the backends it has admitted are kept (`members.json`, beside the
decision log), and a start that does not meet every one of them is refused, naming
those missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mbds.errors import BackendUnavailable, shorten

FILE = "members.json"


class Members:
    """The names of the backends admitted so far; None as the path keeps nothing (a
    controller without a --data-dir of its own, in tests)."""

    def __init__(self, directory: Path | None) -> None:
        self.path = None if directory is None else directory / FILE
        self.names: set[str] = set()
        if self.path is not None and self.path.exists():
            try:
                names = json.loads(self.path.read_text())
                if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
                    raise ValueError("not a list of names")
            except ValueError as e:
                raise BackendUnavailable(f"{self.path}: {shorten(str(e))}") from None
            self.names = set(names)

    def check_all(self, met: list[str]) -> None:
        """Refuse a start that met only some of the backends the cluster has had."""
        missing = sorted(self.names - set(met))
        if missing:
            raise BackendUnavailable(
                f"backend{'s' if len(missing) > 1 else ''} {shorten(', '.join(missing))} of "
                f"this cluster {'are' if len(missing) > 1 else 'is'} not among those met "
                f"({shorten(', '.join(sorted(met)))}): each holds part of every cluster, so "
                f"the controller does not serve without {'them' if len(missing) > 1 else 'it'}"
                f" (the cluster's backends are listed in {self.path})")

    def admit(self, names: list[str]) -> None:
        """Keep `names` among the cluster's backends, durably before they serve."""
        if self.path is None or set(names) <= self.names:
            return
        self.names.update(names)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(sorted(self.names), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
