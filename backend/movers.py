"""Units under way that may move records of a file into clusters made as they run.

An UPDATE of a directory attribute moves each record to the cluster of its new values,
which IIG makes while the unit runs if it is new (and a new type-C value's descriptor
with it). A unit after it in bus order that reads the file waits for its locks, but
stage 2 would have planned it before: its cluster search would not know the new
clusters, and it would look for the moved records where they were. So stage 2 plans
such a unit only once every earlier mover of its files has ended on this backend, in
bus order as stage 2 runs, and searches descriptors again if the directory changed
meanwhile, or if a mover of its files ran here at its stage 1 or since (`mark`; a
peer's share of the search may predate the mover's new value, `node.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class Movers:
    """The movers under way on this backend, with the files each may move records in."""

    def __init__(self) -> None:
        self.running: dict[Hashable, tuple[frozenset[str], asyncio.Future[None]]] = {}
        # Per file, how many movers of it have started or ended here.
        self.changes: dict[str, int] = {}

    def mark(self, files: frozenset[str]) -> int:
        """A mark that differs after any mover of `files` starts or ends here, and -1 while
        one runs: a descriptor search made under a mark that is -1, or that has changed
        since, may be stale on some backend (a peer searched before IIG's new descriptor
        reached it, this backend after), so stage 2 searches whole again."""
        if not self.changes:               # no mover has run here
            return 0
        if self.before(files):
            return -1
        return sum(self.changes.get(f, 0) for f in files)

    def before(self, files: frozenset[str]) -> list[asyncio.Future[None]]:
        """The ends to wait for before planning a unit that searches `files`."""
        if not self.running:
            return []
        return [end for moved, end in self.running.values() if moved & files]

    def start(self, key: Hashable, files: frozenset[str]) -> None:
        self.running[key] = (files, asyncio.get_running_loop().create_future())
        for f in files:
            self.changes[f] = self.changes.get(f, 0) + 1

    def end(self, key: Hashable) -> None:
        """The unit ended here (committed, rolled back or failed); idempotent."""
        entry = self.running.pop(key, None)
        if entry is not None:
            for f in entry[0]:
                self.changes[f] = self.changes.get(f, 0) + 1
            if not entry[1].done():
                entry[1].set_result(None)
