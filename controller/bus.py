"""The bus: one ordered, bidirectional stream per backend, and all that travels on it.

`Bus.broadcast` numbers a traffic unit (its seq) and puts it on every
backend's stream in one synchronous step, so all backends receive traffic
units in the same order — the broadcast bus of the paper's hardware, rebuilt.
Results come back on the same streams tagged with the seq and are routed to
that unit's `Inbox`, which also sends what goes down for it: credit, commit
and abort, and takes a writing unit's votes to a decision (`decisions.py`).
What was queued at once travels as one message each way, so a small request
costs one message down and one up per backend, not a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import TypeAlias

import grpc

from controller.decisions import Decisions
from mbds import faults, metrics
from mbds.errors import BackendUnavailable, TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_MESSAGE

log = logging.getLogger("mbds.controller")

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE),
                   ("grpc.max_send_message_length", MAX_MESSAGE)]
WINDOW = 8           # row batches (or groups) a backend may send of one unit ahead of PP
GRANT = WINDOW // 2  # credit is returned in steps of this many

# What a bus delivers to an inbox: a reply, or None when that bus broke.
Delivery: TypeAlias = tuple["BackendLink", "pb.BackendReply | None"]


class BackendLink:
    """One backend: its channel, and the bus stream while it is open."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.name = address          # replaced by the backend's own name at hello
        self.index = 0               # its place on the bus
        self.channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.stub = rpc.BackendStub(self.channel)
        self.queue: asyncio.Queue[pb.BusMessage | None] | None = None
        self.bus_task: asyncio.Task[None] | None = None
        # seq -> the inbox of the traffic unit waiting for its results.
        self.pending: dict[int, asyncio.Queue[Delivery]] = {}
        self.error = "not connected"
        self.metrics_url = ""
        # Told when this backend has forgotten a committed unit (its seq on this bus).
        self.on_forgotten: Callable[[int], None] = lambda seq: None

    @property
    def up(self) -> bool:
        return self.bus_task is not None and not self.bus_task.done() and not self.error

    def unavailable(self, detail: str | None = None) -> BackendUnavailable:
        return BackendUnavailable(
            f"backend {self.name} ({self.address}) is unreachable: {detail or self.error}")

    async def hello(self, timeout: float) -> pb.HelloReply:
        try:
            reply = await self.stub.Hello(pb.HelloRequest(), timeout=timeout,
                                          wait_for_ready=True)
        except grpc.aio.AioRpcError as e:
            raise self.unavailable(e.details() or e.code().name) from None
        self.name = reply.name
        host = self.address.rsplit(":", 1)[0]
        self.metrics_url = f"http://{host}:{reply.metrics_port}/metrics" if reply.metrics_port \
            else ""
        return reply

    async def directory(self, timeout: float) -> pb.DirectoryReply:
        """The backend's directory and its records per cluster (after a hello)."""
        try:
            return await self.stub.Directory(pb.DirectoryRequest(), timeout=timeout)
        except Exception as e:
            raise self.unavailable(str(e)) from None

    async def apply_directory(self, update: pb.DirectoryUpdate, timeout: float) -> None:
        await self.stub.ApplyDirectory(update, timeout=timeout)

    def open_bus(self, hello: pb.BusHello) -> None:
        """Start a fresh bus; the first message tells the backend its place in the set."""
        self.close_bus()
        self.queue = asyncio.Queue()
        self.queue.put_nowait(pb.BusMessage(hello=hello))
        self.error = ""
        self.pending = {}           # each bus has its own: a dying one fails only its units
        self.bus_task = asyncio.create_task(self._run_bus(self.queue, self.pending))

    async def _run_bus(self, queue: asyncio.Queue[pb.BusMessage | None],
                       pending: dict[int, asyncio.Queue[Delivery]]) -> None:
        sent = metrics.BUS_MESSAGES.labels("to_backend", self.name)
        items = metrics.BUS_ITEMS.labels("to_backend", self.name)

        async def batches() -> AsyncIterator[pb.BusBatch]:
            while (msg := await queue.get()) is not None:
                batch = [msg]
                while not queue.empty():     # everything queued meanwhile goes along
                    if (msg := queue.get_nowait()) is None:
                        break
                    batch.append(msg)
                sent.inc()
                items.inc(len(batch))
                yield pb.BusBatch(messages=batch)
                if msg is None:
                    return

        try:
            async for replies in self.stub.Bus(batches()):
                for reply in replies.replies:
                    if reply.WhichOneof("body") == "forgotten":
                        self.on_forgotten(reply.seq)
                        continue
                    inbox = pending.get(reply.seq)
                    if inbox is not None:     # else: a unit PP gave up on (aborted)
                        inbox.put_nowait((self, reply))
        except grpc.aio.AioRpcError as e:
            self.error = e.details() or e.code().name
            log.warning("bus to backend %s broke: %s", self.name, self.error)
        except asyncio.CancelledError:
            raise
        else:
            self.error = self.error or "bus closed"
        finally:
            for inbox in pending.values():   # their results will never come
                inbox.put_nowait((self, None))

    def send(self, msg: pb.BusMessage) -> None:
        if self.queue is None or not self.up:
            raise self.unavailable()
        self.queue.put_nowait(msg)

    def close_bus(self) -> None:
        if self.queue is not None:
            self.queue.put_nowait(None)
        if self.bus_task is not None:
            self.bus_task.cancel()
        self.queue = self.bus_task = None

    async def close(self) -> None:
        task = self.bus_task
        self.close_bus()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.channel.close()


class BackendFailure(Exception):
    """A backend failed a traffic unit: an error reply, a broken bus or a missed deadline."""

    def __init__(self, link: BackendLink, error: Exception) -> None:
        super().__init__(str(error))
        self.link, self.error = link, error


class Inbox:
    """One traffic unit's results from every backend, and what goes down for it.

    Each backend sends its requests' results in request order; a backend that is
    ahead of the others (results of request i+1 while PP still gathers request i)
    is buffered here, within its credit window, so memory stays bounded.
    """

    def __init__(self, links: list[BackendLink], seq: int, deadline: float, timeout: float,
                 requests: int, *, epoch: str = "", decisions: Decisions | None = None) -> None:
        self.links, self.seq, self.deadline, self.timeout = links, seq, deadline, timeout
        self.end = requests             # the stage of `prepared` / `committed`
        self.key = (epoch, seq)
        self.decisions = decisions
        self.deciding: asyncio.Task[None] | None = None
        self.ended: set[BackendLink] = set()    # backends done with the unit (or gone)
        self.queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self.ahead: dict[BackendLink, deque[pb.BackendReply]] = {x: deque() for x in links}
        self.consumed: dict[BackendLink, int] = dict.fromkeys(links, 0)
        for link in links:
            link.pending[seq] = self.queue

    def unregister(self) -> None:
        """Stop routing this unit's replies here (later ones are dropped)."""
        for link in self.links:
            link.pending.pop(self.seq, None)
        if self.decisions is not None:
            self.decisions.finished(self.key)

    def _stage(self, msg: pb.BackendReply) -> int:
        return self.end if msg.WhichOneof("body") in ("prepared", "committed") \
            else msg.request_index

    def _check(self, link: BackendLink, msg: pb.BackendReply | None) -> pb.BackendReply:
        if msg is None:
            self.ended.add(link)
            raise BackendFailure(link, link.unavailable(link.error or "its bus closed"))
        if msg.WhichOneof("body") == "error":
            self.ended.add(link)
            raise BackendFailure(link, TrafficUnitAborted(msg.error))
        return msg

    def ready(self, waiting: set[BackendLink], stage: int) -> bool:
        """Would `take` answer without waiting?"""
        return not self.queue.empty() or any(
            self.ahead[x] and self._stage(self.ahead[x][0]) == stage for x in waiting)

    async def take(self, waiting: set[BackendLink], stage: int
                   ) -> tuple[BackendLink, pb.BackendReply]:
        """The next reply of `stage` (a request index) from one of the backends in `waiting`."""
        for link in waiting:
            ahead = self.ahead[link]
            if ahead and self._stage(ahead[0]) == stage:
                return link, ahead.popleft()
        while True:
            if self.queue.empty():
                try:
                    async with asyncio.timeout_at(self.deadline):
                        link, got = await self.queue.get()
                except TimeoutError:
                    late = min(waiting, key=lambda x: x.index)
                    raise BackendFailure(late, late.unavailable(
                        f"no answer within the {self.timeout:g} s deadline")) from None
            else:
                link, got = self.queue.get_nowait()
            msg = self._check(link, got)
            if link in waiting and self._stage(msg) == stage and not self.ahead[link]:
                return link, msg
            self.ahead[link].append(msg)

    def consumed_batch(self, link: BackendLink) -> None:
        """PP is done with one row batch (or group): return credit in steps."""
        self.consumed[link] += 1
        if self.consumed[link] >= GRANT and link.up:
            link.send(pb.BusMessage(credit=pb.Credit(seq=self.seq,
                                                     batches=self.consumed[link])))
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
        voted: list[BackendLink] = []
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
            waiting.discard(link)
        if voted:
            self.deciding = asyncio.create_task(self._commit(voted))
            await asyncio.shield(self.deciding)

    async def _commit(self, voted: list[BackendLink]) -> None:
        assert self.decisions is not None
        try:
            faults.hit("controller.before_decision")
            await self.decisions.commit(self.key, [x.name for x in voted])
        except Exception as e:
            self._abort_now(f"no commit decision: {e}")
            raise BackendFailure(voted[0], TrafficUnitAborted(
                f"traffic unit aborted: no commit decision: {e}")) from None
        faults.hit("controller.after_decision")
        for i, link in enumerate(voted):
            if link.up:            # one that is not resolves the unit when it rejoins
                link.send(pb.BusMessage(commit=pb.Commit(seq=self.seq)))
            if i == 0 and faults.armed("controller.mid_commit"):
                await asyncio.sleep(0.5)     # the first Commit is on its way
                faults.hit("controller.mid_commit")

    def abort(self, reason: str) -> None:
        """Roll the unit back on every backend whose bus is open, unless it is being
        decided (the decision then carries it out, or aborts it itself)."""
        if self.deciding is None:
            self._abort_now(reason)

    async def abort_and_wait(self, reason: str, grace: float = 1.0) -> None:
        """Abort, and wait (a little past the deadline at most) until every backend
        whose bus is open has rolled the unit back: a client told that its unit failed
        then finds it nowhere, even in the backends' files."""
        self.abort(reason)
        if self.deciding is not None:
            return
        for link, held in self.ahead.items():
            if any(m.WhichOneof("body") == "committed" for m in held):
                self.ended.add(link)
        loop = asyncio.get_running_loop()
        until = max(self.deadline, loop.time()) + grace
        while any(x.up and x not in self.ended for x in self.links):
            try:
                async with asyncio.timeout_at(until):
                    link, msg = await self.queue.get()
            except TimeoutError:
                return
            if msg is None or msg.WhichOneof("body") in ("error", "committed"):
                self.ended.add(link)

    def _abort_now(self, reason: str) -> None:
        for link in self.links:
            if link.up:
                link.send(pb.BusMessage(abort=pb.Abort(seq=self.seq, reason=reason)))


class Bus:
    """The set of backends in bus order, and the total order of traffic units."""

    def __init__(self, addresses: list[str], *, internal_timing: bool, iig_address: str,
                 decisions: Decisions) -> None:
        self.links = [BackendLink(a) for a in addresses]
        self.internal_timing = internal_timing
        self.iig_address = iig_address
        self.decisions = decisions
        self.epoch = uuid.uuid4().hex[:12]   # tells the backends this controller's buses apart
        self.seq = 0

    def arrange(self, links: list[BackendLink]) -> None:
        """The set of backends, in bus order (each one's index is its place)."""
        self.links = links
        for i, link in enumerate(links):
            link.index = i

    def open(self, link: BackendLink) -> None:
        link.on_forgotten = lambda seq: self.decisions.forgotten((self.epoch, seq), link.name)
        link.open_bus(pb.BusHello(
            epoch=self.epoch, backend_index=link.index, peers=[x.address for x in self.links],
            internal_timing=self.internal_timing, iig_address=self.iig_address,
            credit_window=WINDOW))

    def broadcast(self, units: dict[int, pb.TrafficUnit], timeout: float,
                  requests: int) -> Inbox:
        """Give a traffic unit (one copy per backend index it goes to) its place in the
        total order, put it on those buses and return its inbox, registered before
        anything is sent."""
        links = [link for link in self.links if link.index in units]
        down = [link for link in links if not link.up]
        if down:
            raise down[0].unavailable()
        self.seq += 1
        inbox = Inbox(links, self.seq, asyncio.get_running_loop().time() + timeout, timeout,
                      requests, epoch=self.epoch, decisions=self.decisions)
        for link in links:
            tu = units[link.index]
            tu.seq = self.seq
            link.send(pb.BusMessage(traffic_unit=tu))
        return inbox

    async def push_directory(self, update: pb.DirectoryUpdate, timeout: float,
                             skip: str = "") -> None:
        """New directory entries to every reachable backend but `skip`, outside bus order."""
        await asyncio.gather(*(link.apply_directory(update, timeout) for link in self.links
                               if link.up and link.name != skip), return_exceptions=True)

    async def close(self) -> None:
        for link in self.links:
            await link.close()
