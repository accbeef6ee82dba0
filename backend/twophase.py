"""A writing traffic unit on this backend, from its turn at the writer thread to PP's decision.

Writing traffic units enter the single writer thread (`writer.py`) in bus order; once
a unit's job is handed over, the next may follow at once and join the same group
commit. A two-phase unit that wrote here is prepared durably (`undo.py`) and votes; it
keeps its locks until PP's decision, however long that takes (the controller may have
to restart first), and is then forgotten (commit) or undone (abort) (`commit.py`). A
one-phase unit, or one that wrote nothing here, has nothing to decide. The node owns
the unit's locks and its last reply (docs/commit.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from backend.commit import PreparedUnits, settle
from backend.execution import Execution
from backend.plan import RequestPlan
from backend.state import Cancelled, TuState
from backend.writer import Writer
from mbds import faults
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.backend")

Key = tuple[str, int]
Send = Callable[[TuState, pb.BackendReply], None]
Cancel = Callable[[TuState, str], None]


class TwoPhaseWrites:
    """The writing traffic units: their turn at the writer thread, and a prepared
    unit's vote and PP's decision."""

    def __init__(self, name: str, writer: Writer, prepared: PreparedUnits,
                 execution: Execution, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.writer = writer
        self.prepared = prepared
        self.execution = execution
        self.loop = loop
        # Writing traffic units enter the writer thread in bus order, so no two backends
        # ever hold their writers for different units that each wait on the other.
        self.write_order: deque[Key] = deque()
        self.write_turn = asyncio.Condition()

    def __contains__(self, key: Key) -> bool:
        """The unit is among the writers: its turn has not come, or not yet ended."""
        return key in self.write_order

    def join(self, key: Key) -> None:
        """A writing unit takes its place among the writers (stage 2, in bus order)."""
        self.write_order.append(key)

    async def leave(self, key: Key) -> None:
        """The unit's turn is over, or will never come: the next writer may go."""
        async with self.write_turn:
            if key in self.write_order:
                self.write_order.remove(key)
            self.write_turn.notify_all()

    async def run(self, key: Key, st: TuState, plans: list[RequestPlan], queued: float, *,
                  send: Send, cancel: Cancel, release: Callable[[], None]) -> bool:
        """Writes in bus order through the writer; a two-phase unit that wrote here is
        prepared, votes, and waits for PP's decision with its locks held (`release`
        lets them go once the commit is decided). True once a commit is carried out;
        False if there was nothing to decide (one-phase, or nothing written here); an
        abort is carried out, then raises `Cancelled`."""
        async with self.write_turn:
            await self.write_turn.wait_for(lambda: self.write_order[0] == key)
        st.writing = True
        try:
            job = self.writer.submit(
                lambda conn: self.execution.run_writes(st, plans, queued, conn))
        finally:
            await self.leave(key)          # the next unit may join the same group
        unit = await settle(job)
        if unit is None:                   # one-phase, or nothing written here
            self.execution.committed(st)   # the writer's group is committed: final here
            assert st.tu is not None
            if st.tu.one_phase:
                self.prepared.carried_out(key)
            return False
        st.decision = self.loop.create_future()
        self.prepared.waiting[key] = st
        # Once the vote is sent only PP decides; a stop (cancellation) meanwhile leaves
        # the unit prepared on disk, for the controller to resolve at the next start.
        voted = False
        try:
            if not st.cancelled:           # else: aborted while it was being written
                faults.hit("backend.before_vote")
                send(st, pb.BackendReply(prepared=True))
                voted = True
                faults.hit("backend.after_vote")
        except Exception as e:
            if not voted:
                cancel(st, f"backend {self.name}: {e}")
            log.warning("traffic unit %s: %s", key, e)
        if st.cancelled and not st.decision.done():
            st.decision.set_result(False)
        commit = await st.decision
        # Decided: carried out whatever fails before, or the unit would stay prepared
        # and listed in doubt, and no controller could resolve it until a restart.
        # (A roll-back's fault point is in `carry_out`, which definitions share.)
        if commit:
            try:
                release()                  # the writes are final: readers may come
                faults.hit("backend.before_commit")
            except Exception as e:
                log.error("traffic unit %s, before its commit: %s", key, e)
        await self.prepared.carry_out(unit, commit)
        del self.prepared.waiting[key]
        if not commit:                     # undone: its records were never processed
            raise Cancelled(st.cancelled or "PP decided to abort")
        # Carried out: PP is told so whatever fails here, or it keeps the decision.
        try:
            self.execution.committed(st)
            faults.hit("backend.after_commit")
        except Exception as e:
            log.error("traffic unit %s, after its commit: %s", key, e)
        return True
