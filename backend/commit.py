"""This backend's prepared units and PP's decisions on them (docs/commit.md).

A unit is prepared when its writes, undo log and marker are committed (`undo.py`); a
definition when its files and marker are (`definitions.py`).
Those found in the file at start are in doubt until the controller resolves them
(the bus stays closed meanwhile); those prepared since wait, locks held, for the
decision by bus or by Resolve. Carrying a decision out is the writer's job.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from functools import partial
from typing import TypeVar

from backend import undo
from backend.state import TuState
from backend.writer import Writer
from mbds import faults
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.backend")

T = TypeVar("T")
RETRY_SECONDS = 1.0      # between attempts at carrying out a decision that failed
# How long a Resolve waits for a unit prepared since start to carry its decision out
# (retrying while the disk is full): the controller asks again, not waits its deadline.
RESOLVE_WAIT = 5.0


class ResolveFailed(Exception):
    """A decision on an in-doubt unit could not be carried out (e.g. a full disk): it
    stays in doubt, and the controller's Resolve is told why."""


async def settle(fut: Future[T]) -> T:
    """The writer's result for a job, even if this task is cancelled meanwhile: what the
    writer did must be known (a prepared unit must be decided)."""
    wrapped = asyncio.wrap_future(fut)
    while True:
        try:
            return await asyncio.shield(wrapped)
        except asyncio.CancelledError:
            if wrapped.done():
                return wrapped.result()


class PreparedUnits:
    def __init__(self, writer: Writer, directory: Directory) -> None:
        self.writer = writer
        self.directory = directory
        # Prepared before a restart, decision not heard: (epoch, seq) → marker.
        self.on_disk: dict[undo.Key, int] = undo.in_doubt(writer.conn)
        self.waiting: dict[undo.Key, TuState] = {}   # prepared since, awaiting decision
        # Per epoch, the highest seq of a two-phase unit committed here (`undo.commit`),
        # and of any unit whose writes were (`undo.carried_out`), told at Hello.
        self.committed: dict[str, int] = writer.committed
        self.carried: dict[str, int] = writer.carried

    def listed(self) -> list[undo.Key]:
        """Every unit still prepared here: its decision has not come, or is not yet
        carried out (the controller keeps a decision until no backend lists it)."""
        return [*self.on_disk, *self.waiting]

    async def resolve(self, outcomes: list[pb.Outcome]) -> None:
        """The controller's decisions on in-doubt units: each carried out, durably. One
        that cannot be (a full disk) stays in doubt, and `ResolveFailed` says why; one
        prepared since start that is still retrying after `RESOLVE_WAIT` stays listed."""
        for o in outcomes:
            key = (o.unit.epoch, o.unit.seq)
            st = self.waiting.get(key)
            if st is not None:
                if st.decision is not None and not st.decision.done():
                    st.decision.set_result(o.commit)
                if st.task is not None:
                    await asyncio.wait([st.task], timeout=RESOLVE_WAIT)
            elif key in self.on_disk:
                try:
                    await self.carry_out(self.on_disk[key], o.commit, retry=False)
                except Exception as e:
                    raise ResolveFailed(
                        f"{'commit' if o.commit else 'roll-back'} of in-doubt unit "
                        f"(epoch {key[0]}, seq {key[1]}) failed: {e}") from None
                # A Resolve asked again meanwhile carried it out too (the writer's second
                # go changes nothing) and may have taken it off already.
                self.on_disk.pop(key, None)

    def carried_out(self, key: undo.Key) -> None:
        """A unit's writes are committed here (in two phases or in one)."""
        self.carried[key[0]] = max(key[1], self.carried.get(key[0], 0))

    async def carry_out(self, unit: int, commit: bool, *, retry: bool = True) -> None:
        """Forget a prepared unit (commit) or undo it (abort), retrying what fails (a
        full disk) unless told not to: the unit keeps its locks until it is done. A
        definition undone is taken back from the directory too."""
        if not commit:
            # Here, not in twophase.py, so that a definition's roll-back passes the point
            # too; undone whatever fails at it, or the unit would stay prepared.
            try:
                faults.hit("backend.before_roll_back")
            except Exception as e:
                log.error("prepared unit %d, before its roll-back: %s", unit, e)
        while True:
            try:
                if commit:
                    key = await settle(self.writer.submit(partial(undo.commit, unit=unit)))
                    if key is not None:
                        self.committed[key[0]] = max(key[1], self.committed.get(key[0], 0))
                        self.carried_out(key)
                else:
                    before = await settle(self.writer.submit(
                        partial(undo.roll_back, unit=unit, files=dict(self.directory.files))))
                    if before:
                        self.directory.restore_files(before)
                return
            except Exception as e:
                log.error("%s of prepared unit %d failed%s: %s",
                          "commit" if commit else "roll-back", unit,
                          ", retrying" if retry else "", e)
                if not retry:
                    raise
                await asyncio.sleep(RETRY_SECONDS)
