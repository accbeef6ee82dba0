"""Directory updates on one backend (docs/spec.md §4): applied at once, stored later.

An update comes from IIG, with its traffic unit on the bus (stage 1, in bus order) or
out of band (`Backend.ApplyDirectory`). DM's searches must see it at once, but stage 1
must not wait for the writer thread, which may be busy with a traffic unit that is
itself waiting on IIG; so the update's rows are stored by a writer job that nobody
awaits here, and a traffic unit's reads wait for that job instead (`awaited`), so they
never meet a file whose table or index is not there yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Future

from backend import check
from backend.cc import LockTable, X
from backend.definitions import Definitions, defines
from backend.state import TuState
from mbds.descriptors import Descriptor
from mbds.directory import Directory, changes
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.backend")

# CC's grant of a lock set (kind, owner, wants), the wait timed by the node.
Acquire = Callable[[str, Hashable, dict[Hashable, str]], Awaitable[tuple[Hashable, int]]]


def _log_failure(fut: Future[None]) -> None:
    if fut.exception() is not None:
        log.error("storing a directory update failed: %s", fut.exception())


async def _ended(fut: asyncio.Future[None]) -> None:
    """Wait for `fut` whatever its outcome."""
    with contextlib.suppress(Exception):
        await fut


class DirectoryUpdates:
    """The directory updates this backend applies, and the storing of the latest."""

    def __init__(self, directory: Directory, definitions: Definitions, cc: LockTable,
                 acquire: Acquire) -> None:
        self.directory, self.definitions, self.cc = directory, definitions, cc
        self._acquire = acquire
        self.storing: Future[None] | None = None    # the latest directory update's storing

    @staticmethod
    def touches(tu: pb.TrafficUnit) -> tuple[bool, bool]:
        """Whether a traffic unit carries directory entries, and whether it defines
        files: most do neither, and stage 1 then has nothing to do here."""
        return changes(tu.directory), defines(tu)

    async def carried(self, key: tuple[str, int], st: TuState, tu: pb.TrafficUnit,
                      carried: bool, defining: bool) -> Future[None] | None:
        """Stage 1's part of a traffic unit's directory update (`touches`): checked
        (`BadMessage`), a definition begun before its files change, then applied under
        CC's locks. Returns its storing job, if any."""
        made = check.directory_update(self.directory, tu.directory) if carried else {}
        if defining:
            self.definitions.begin(key, st, tu)
        return await self._apply_with_locks(tu.directory, made) if carried else None

    async def apply(self, update: pb.DirectoryUpdate,
                    made: dict[int, Descriptor] | None = None) -> Future[None] | None:
        """Apply a directory update (from IIG, by bus or out of band) and queue its storing.

        Storing is not awaited: the writer thread may be busy with a traffic unit that
        is itself waiting on IIG. The single writer thread runs jobs in order, so these
        rows are stored before any later traffic unit's records that refer to them; a
        backend that crashes before storing them is brought up to date by the
        controller when it rejoins. Returns the storing job, if any, for a traffic unit
        that must not finish before it (see `TuState.stored`). `made`: the update as
        `check.directory_update` read it, when it has been checked already.
        """
        if made is None:
            made = check.directory_update(self.directory, update)
        new = self.directory.apply(update, made)
        if changes(new):
            fut = self.definitions.store_rows(update, new)
            fut.add_done_callback(_log_failure)
            self.storing = fut
            return fut
        return None

    async def _apply_with_locks(self, update: pb.DirectoryUpdate,
                                made: dict[int, Descriptor]) -> Future[None] | None:
        # New type-C sub-descriptors take their attribute exclusively; new clusters their
        # descriptor-id groups (docs/spec.md §4). Stage 1 runs in bus order, so this never waits.
        wants: dict[Hashable, str] = {("attr", d.file, d.attr): X
                                   for d in update.descriptors if d.kind == "C"}
        for c in update.clusters:
            for attr in self.directory.files[c.file].directory_attributes \
                    if c.file in self.directory.files else []:
                wants[("didgroup", c.file, attr)] = X
        handle = await self._acquire("directory", "directory", wants)
        try:
            return await self.apply(update, made)
        finally:
            self.cc.release(handle)

    def awaited(self, own: Future[None] | None) -> asyncio.Future[None] | None:
        """What a traffic unit's reads wait for (`TuState.stored`), given its own storing.

        Every directory update stored so far, the unit's own or one that came out of
        band (a joining backend's tables, say): writer jobs run in order, so the latest
        one's end covers them all. Another unit's failure to store is that unit's (a
        definition taken back), not this one's.
        """
        if self.storing is None or self.storing.done():
            return None
        stored = asyncio.wrap_future(self.storing)
        if self.storing is not own:
            return asyncio.ensure_future(_ended(stored))
        return stored
