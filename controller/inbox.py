"""A traffic unit's inbox: its results from every backend, and what goes down for it.

The bus (`bus.py`) routes each reply tagged with the unit's seq here. The inbox
hands PP (`pp.py`) the replies of one request at a time, buffers a backend that
is ahead within its credit window, returns credit as PP consumes row batches,
takes a writing unit's votes to a decision (`decisions.py`) and sends Commit or
Abort down for it. Each reply is checked as it arrives against what its backend
may send next (`Inbox.deliver`); one it may not send fails the unit at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

from controller.decisions import Decisions
from controller.reply_order import FINAL_KINDS, WINDOW, Sent
from mbds import faults
from mbds.errors import DeadlineExceeded, TrafficUnitAborted
from mbds.mailbox import Mailbox
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.controller")


class Link(Protocol):
    """A backend's bus as an inbox uses it (`controller.bus.BackendLink`): it files
    itself under its unit's seq there, sends the unit's credit, commit or abort down it,
    and names the backend in an error."""

    name: str
    address: str
    index: int                      # its place on the bus
    error: str                      # why its bus is down; "" while it is up
    broke: bool                     # its bus failed rather than ended (`BackendLink`)
    pending: dict[int, Inbox]

    @property
    def up(self) -> bool: ...

    def send(self, msg: pb.BusMessage) -> None: ...

    def unavailable(self, detail: str | None = None) -> Exception: ...


GRANT = WINDOW // 2  # credit is returned in steps of this many

# What a bus delivers to an inbox: a reply, None when that bus broke, or (a string)
# why a reply was refused.
Delivery: TypeAlias = tuple[Link, "pb.BackendReply | str | None"]


class BackendFailure(Exception):
    """A backend failed a traffic unit: an error reply, a broken bus or a missed deadline."""

    def __init__(self, link: Link, error: Exception) -> None:
        super().__init__(str(error))
        self.link, self.error = link, error


class OnePhaseWrites(Exception):
    """What became of a failed unit's writes on a backend that writes it in one phase and
    that the abort reached too late: `stored`, or (no answer to the abort) perhaps. The
    cause of the error its client is given, which says so in words (`str` of this), so
    that a bulk load can word each of its failed batches by it."""

    def __init__(self, told: str, stored: bool) -> None:
        super().__init__(told)
        self.stored = stored


class Inbox:
    """One traffic unit's results from every backend, and what goes down for it.

    Each backend sends its requests' results in request order; a backend that is
    ahead of the others (results of request i+1 while PP still gathers request i)
    is buffered here, within its credit window, so memory stays bounded. A reply out
    of that order, or beyond the credit, is refused as it arrives (`deliver`).
    """

    def __init__(self, links: Sequence[Link], seq: int, deadline: float, timeout: float,
                 requests: int, *, epoch: str = "", decisions: Decisions | None = None) -> None:
        self.links, self.seq, self.deadline, self.timeout = links, seq, deadline, timeout
        self.end = requests             # the stage of `prepared` / `committed`
        self.key = (epoch, seq)
        self.decisions = decisions
        self.deciding: asyncio.Task[None] | None = None
        self.aborted = ""               # why Abort went down for it ("" if it has not)
        self.ended: set[Link] = set()    # backends done with the unit (or gone)
        self.queue: Mailbox[Delivery] = Mailbox()   # delivered by the buses, not yet taken
        self.ahead: dict[Link, deque[pb.BackendReply]] = {x: deque() for x in links}
        self.consumed: dict[Link, int] = dict.fromkeys(links, 0)
        self.sent = {x: Sent() for x in links}
        # The backends that commit the unit by themselves (one phase), set by the bus.
        self.one_phase: frozenset[Link] = frozenset()
        for link in links:
            link.pending[seq] = self

    def deliver(self, link: Link, msg: pb.BackendReply | None) -> None:
        """A reply of this unit from `link`'s bus (None: that bus broke), checked against
        what that backend may send next. One it may not send is refused: the unit fails
        with that refusal, and the backend's later replies are dropped but for its last
        (the rollback the abort waits for)."""
        if msg is None:
            self.queue.put((link, None))
            return
        sent = self.sent[link]
        kind = msg.WhichOneof("body")
        if sent.refused:
            if kind in FINAL_KINDS and not sent.final:
                sent.final = kind
                self.queue.put((link, msg))
            return
        fault = sent.fault(msg, kind, self.end)
        if fault:
            sent.refused = True
            if kind in FINAL_KINDS and not sent.final:
                sent.final = kind
            self.queue.put((link, f"traffic unit aborted: refused a reply from backend "
                                  f"{link.name} ({link.address}): {fault}"))
            return
        self.queue.put((link, msg))

    def unregister(self) -> None:
        """Stop routing this unit's replies here (later ones are dropped)."""
        for link in self.links:
            link.pending.pop(self.seq, None)
        if self.decisions is not None:
            self.decisions.finished(self.key)

    def _stage(self, msg: pb.BackendReply) -> int:
        return self.end if msg.WhichOneof("body") in ("prepared", "committed") \
            else msg.request_index

    def _check(self, link: Link, msg: pb.BackendReply | str | None) -> pb.BackendReply:
        if msg is None:
            self.ended.add(link)
            raise BackendFailure(link, link.unavailable(link.error or "its bus closed"))
        if isinstance(msg, str):
            raise BackendFailure(link, TrafficUnitAborted(msg))
        if msg.WhichOneof("body") == "error":
            self.ended.add(link)
            raise BackendFailure(link, TrafficUnitAborted(msg.error))
        return msg

    def ready(self, waiting: set[Link], stage: int) -> bool:
        """Would `take` answer without waiting?"""
        return bool(self.queue.items) or any(
            self.ahead[x] and self._stage(self.ahead[x][0]) == stage for x in waiting)

    async def take(self, waiting: set[Link], stage: int
                   ) -> tuple[Link, pb.BackendReply]:
        """The next reply of `stage` (a request index) from one of the backends in `waiting`."""
        for link in waiting:
            ahead = self.ahead[link]
            if ahead and self._stage(ahead[0]) == stage:
                return link, ahead.popleft()
        while True:
            try:
                link, got = await self.queue.get(self.deadline)
            except TimeoutError:
                # Every backend still owing an answer is named: one may be silent only
                # because it waits for another (for its descriptor ids, say).
                late = sorted(waiting, key=lambda x: x.index)
                names = ", ".join(f"{x.name} ({x.address})" for x in late)
                raise BackendFailure(late[0], DeadlineExceeded(
                    f"traffic unit aborted: no answer within the {self.timeout:g} s "
                    f"deadline from backend{'s' if len(late) > 1 else ''} {names}")) from None
            if got is None and self.sent[link].final:
                # A bus that ends after the backend's last reply of the unit (a backend
                # stopping once its answers and ids are out) takes nothing of it away.
                # One that breaks may have taken the backend's descriptor ids with it
                # (they go to the peers on streams of their own, not in step with its
                # replies): a backend that has sent nothing of the unit yet may be in
                # stage 2 waiting for them, which would hold it, and every unit behind
                # it, to the deadline.
                self.ended.add(link)
                unheard = self._unheard(link) if link.broke else []
                if not unheard:
                    continue
                names = ", ".join(x.name for x in unheard)
                raise BackendFailure(link, link.unavailable(
                    f"{link.error or 'its bus closed'} (after its last reply of the unit, "
                    f"before backend{'s' if len(unheard) > 1 else ''} {names} had sent "
                    "anything: they may be waiting for its descriptor ids)"))
            msg = self._check(link, got)
            if link in waiting and self._stage(msg) == stage and not self.ahead[link]:
                return link, msg
            self.ahead[link].append(msg)

    def _unheard(self, gone: Link) -> list[Link]:
        """The backends, but `gone`, still owing their part of the unit that have sent
        nothing of it yet: each may still be in stage 2, waiting for descriptor ids."""
        return sorted((x for x, s in self.sent.items() if x is not gone
                       and x not in self.ended and not s.final and not s.voted
                       and not s.at and not s.batches), key=lambda x: x.index)

    def consumed_batch(self, link: Link) -> None:
        """PP is done with one row batch (or group): return credit in steps."""
        self.consumed[link] += 1
        if self.consumed[link] >= GRANT and link.up:
            link.send(pb.BusMessage(credit=pb.Credit(seq=self.seq,
                                                     batches=self.consumed[link])))
            self.sent[link].granted += self.consumed[link]
            self.consumed[link] = 0

    async def expect_all(self, kind: str) -> None:
        """Wait until every backend has sent `kind` (`prepared` or `committed`)."""
        waiting = set(self.links)
        while waiting:
            link, msg = await self.take(waiting, self.end)
            if msg.WhichOneof("body") != kind:
                raise BackendFailure(link, TrafficUnitAborted(
                    f"backend {link.name} sent {msg.WhichOneof('body')} instead of {kind}"))
            waiting.discard(link)

    async def settle(self, writes: bool) -> None:
        """The unit's end on every backend. A write: each backend's vote (`prepared`, or
        `committed` from one that wrote nothing or committed in one phase), then, if any
        prepared, the durable decision and Commit to each of them. Once the decision is
        on disk the unit is committed, whatever happens to PP or to a backend."""
        if not writes:
            await self.expect_all("committed")
            return
        voted: list[Link] = []
        waiting = set(self.links)
        while waiting:
            link, msg = await self.take(waiting, self.end)
            kind = msg.WhichOneof("body")
            if kind not in ("prepared", "committed"):
                raise BackendFailure(link, TrafficUnitAborted(
                    f"backend {link.name} sent {kind} instead of its vote"))
            if kind == "prepared":
                voted.append(link)
            else:
                self.ended.add(link)
                if link in self.one_phase and self.decisions is not None:
                    self.decisions.carried_out(link.name, self.key)   # its writes stored
            waiting.discard(link)
        if voted and self.aborted:
            # Votes taken ahead of an abort that has since gone down are void: the
            # backends roll the unit back, so it must not be decided committed.
            raise BackendFailure(voted[0], TrafficUnitAborted(
                f"traffic unit aborted: {self.aborted}"))
        if voted:
            self.deciding = asyncio.create_task(self._commit(voted))
            await asyncio.shield(self.deciding)

    async def _commit(self, voted: list[Link]) -> None:
        assert self.decisions is not None
        try:
            faults.hit("controller.before_decision")
            await self.decisions.commit(self.key, [x.name for x in voted])
        except Exception as e:
            self._abort_now(f"no commit decision: {e}")
            raise BackendFailure(voted[0], TrafficUnitAborted(
                f"traffic unit aborted: no commit decision: {e}")) from None
        try:
            faults.hit("controller.after_decision")
        except Exception as e:
            # Decided: the unit commits whatever fails after the decision, or every voter
            # would hold its locks until the controller restarted.
            log.error("after the commit decision of traffic unit %d: %s", self.seq, e)
        for i, link in enumerate(voted):
            try:
                if link.up:        # one that is not resolves the unit when it rejoins
                    link.send(pb.BusMessage(commit=pb.Commit(seq=self.seq)))
                if i == 0 and faults.armed("controller.mid_commit"):
                    await asyncio.sleep(0.5)     # the first Commit is on its way
                    faults.hit("controller.mid_commit")
            except Exception as e:  # the other voters are told all the same
                log.error("after the commit decision of traffic unit %d: %s", self.seq, e)

    def abort(self, reason: str) -> None:
        """Roll the unit back on every backend whose bus is open, unless it is being
        decided (the decision then carries it out, or aborts it itself)."""
        if self.deciding is None:
            self._abort_now(reason)

    async def abort_and_wait(self, reason: str, grace: float = 1.0) -> str:
        """Abort, and wait (a little past the deadline at most) until every backend
        whose bus is open has rolled the unit back: a client told that its unit failed
        then finds it nowhere, even in the backends' files. Returns what the client must
        be told besides (`one_phase_outcome`)."""
        self.abort(reason)
        if not self.aborted:       # being decided: the decision carries it out
            return ""
        # Those whose last reply came have nothing to roll back.
        self.ended.update(x for x, sent in self.sent.items() if sent.final)
        loop = asyncio.get_running_loop()
        until = max(self.deadline, loop.time()) + grace
        while any(x.up and x not in self.ended for x in self.links):
            try:
                link, msg = await self.queue.get(until)
            except TimeoutError:
                break
            if msg is None or isinstance(msg, pb.BackendReply) and \
                    msg.WhichOneof("body") in FINAL_KINDS:
                self.ended.add(link)
        return self.one_phase_outcome()

    def when_stored(self, then: Callable[[set[int]], None]) -> None:
        """Calls `then` with the bus places of the backends that stored the unit's writes,
        as far as PP knows: every one once the decision is on disk (when it is, if it is
        being written), or those that reported a one-phase commit."""
        deciding = self.deciding
        if deciding is None:
            then({x.index for x in self.one_phase if self.sent[x].final == "committed"})
            return
        everyone = {x.index for x in self.links}
        deciding.add_done_callback(lambda task: then(
            everyone if not task.cancelled() and task.exception() is None else set()))

    def one_phase_outcome(self) -> str:
        """A backend that writes the unit in one phase commits it by itself: an abort may
        come too late. What the client must be told then ("" when the abort came in time):
        that the writes are stored, or, without an answer, that they may be."""
        written = self.one_phase_writes()
        return "" if written is None else str(written)

    def one_phase_writes(self) -> OnePhaseWrites | None:
        """`one_phase_outcome` as an error to chain (None when the abort came in time)."""
        for link in self.one_phase:
            if self.sent[link].final == "committed":
                return OnePhaseWrites(f"; but backend {link.name} had committed it in one "
                                      "phase before the abort reached it: its writes are "
                                      "stored", stored=True)
            if not self.sent[link].final:
                return OnePhaseWrites(f"; backend {link.name}, which writes it in one phase, "
                                      "has not answered the abort: its writes may have been "
                                      "stored", stored=False)
        return None

    def _abort_now(self, reason: str) -> None:
        if self.aborted:
            return                 # it went down once: the backends roll back once
        self.aborted = reason or "traffic unit aborted"
        for link in self.links:
            if link.up:
                link.send(pb.BusMessage(abort=pb.Abort(seq=self.seq, reason=reason)))
