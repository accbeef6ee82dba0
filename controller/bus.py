"""The bus: one ordered, bidirectional stream per backend, and all that travels on it.

`Bus.broadcast` numbers a traffic unit (its seq) and puts it on every
backend's stream in one synchronous step, so all backends receive traffic
units in the same order — the broadcast bus of the paper's hardware, rebuilt.
Results come back on the same streams tagged with the seq and are routed to
that unit's `Inbox` (`inbox.py`), which also sends what goes down for it.
What was queued at once travels as one message each way, so a small request
costs one message down and one up per backend, not a call; what would not fit in one
message (`MESSAGE_BUDGET`) goes on in the next, and a traffic unit that fits in none is
refused before it is numbered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable

import grpc

from controller.decisions import Decisions
from controller.inbox import BackendFailure, Inbox
from controller.reply_order import WINDOW
from mbds import metrics, tls
from mbds.directory_parts import directory_parts, update_entries
from mbds.errors import BackendUnavailable, SemanticError, shorten
from mbds.mailbox import Mailbox
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_BACKEND_NAME, MAX_MESSAGE, MESSAGE_BUDGET, too_large

# BackendFailure and Inbox live in inbox.py; named here too for the modules that
# meet them with the bus.
__all__ = ["BackendFailure", "BackendLink", "Bus", "Inbox"]

log = logging.getLogger("mbds.controller")

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE),
                   ("grpc.max_send_message_length", MAX_MESSAGE)]


# Field keys (number << 3 | wire type 2, length-delimited) of `BusBatch.messages`,
# `BusMessage.traffic_unit` and `TrafficUnit.directory`, and of `TrafficUnit.seq` (a
# varint): a unit's copies are framed once as bytes instead of built as messages.
_BATCH_MESSAGE, _TRAFFIC_UNIT, _DIRECTORY, _SEQ = 0x0A, 0x12, 0x1A, 0x08
# What framing adds to a traffic unit's body at most: keys, lengths and its seq.
_FRAMING = 40


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _framed(key: int, payload: bytes) -> bytes:
    """A length-delimited field: its key, its length, its bytes."""
    return bytes((key,)) + _varint(len(payload)) + payload


def traffic_unit_message(body: bytes, seq: int, directory: bytes = b"") -> bytes:
    """A serialized `BusMessage` carrying a traffic unit: `body` (a serialized
    `TrafficUnit` without its seq) with `seq` and, merged into its `directory`, the
    serialized `DirectoryUpdate` `directory` (serialized messages concatenated merge)."""
    unit = body + bytes((_SEQ,)) + _varint(seq)
    if directory:
        unit += _framed(_DIRECTORY, directory)
    return _framed(_TRAFFIC_UNIT, unit)


class BackendLink:
    """One backend: its channel, and the bus stream while it is open."""

    def __init__(self, address: str) -> None:
        self.name = address          # replaced by the backend's own name at hello
        self.named = False           # after the first hello only that backend may answer
        self.index = 0               # its place on the bus
        self.elsewhere = ""          # the other backend that answered at its address
        self._dial(address)
        self.queue: Mailbox[pb.BusMessage | bytes | None] | None = None
        self.bus_task: asyncio.Task[None] | None = None
        # seq -> the inbox of the traffic unit waiting for its results.
        self.pending: dict[int, Inbox] = {}
        self.error = "not connected"
        # Its last bus failed (a crash, a lost connection) rather than ended (a backend
        # that stops ends it once its answers are out, and its descriptor ids too).
        self.broke = False
        self.metrics_url = ""
        # The cluster and epoch every call but Hello names (`Bus.admit`): the backend
        # takes calls of its own cluster only, and writes from one controller at a time.
        self.metadata: tuple[tuple[str, str], ...] = ()
        # Told when this backend has forgotten a committed unit (its seq on this bus).
        self.on_forgotten: Callable[[int], None] = lambda seq: None

    def _dial(self, address: str) -> None:
        self.address = address
        self.channel = tls.channel(address, "backend", CHANNEL_OPTIONS)
        self.stub = rpc.BackendStub(self.channel)
        # The bus takes each batch serialized already (`traffic_unit_message`).
        self._bus_call = self.channel.stream_stream(
            "/mbds.Backend/Bus", request_serializer=None,
            response_deserializer=pb.BackendReplies.FromString, _registered_method=True)

    async def move_to(self, address: str) -> None:
        """The backend (its bus down) now answers at `address`: reach it there."""
        old = self.channel
        self._dial(address)
        self.elsewhere = ""
        log.info("backend %s now answers at %s", self.name, address)
        await old.close()

    async def answering(self, timeout: float) -> str:
        """The name of the backend answering at this address now ("" if none does)."""
        try:
            return (await self.stub.Hello(pb.HelloRequest(), timeout=timeout)).name
        except grpc.aio.AioRpcError:
            return ""

    @property
    def up(self) -> bool:
        return self.bus_task is not None and not self.bus_task.done() and not self.error

    def unavailable(self, detail: str | None = None) -> BackendUnavailable:
        return BackendUnavailable(
            f"backend {shorten(self.name)} ({self.address}) is unreachable: "
            f"{shorten(detail or self.error, 500)}")

    async def hello(self, timeout: float) -> pb.HelloReply:
        try:
            reply = await self.stub.Hello(pb.HelloRequest(), timeout=timeout,
                                          wait_for_ready=True)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise self.unavailable(f"no answer to a hello within {timeout:g} s") from None
            raise self.unavailable(e.details() or e.code().name) from None
        if not 0 < len(reply.name) <= MAX_BACKEND_NAME:
            # Kept in members.json and sent to every backend in its bus hello, which each
            # refuses: refused here, before anything is kept.
            raise self.unavailable(f"it names itself {shorten(repr(reply.name))}: a "
                                   f"backend's name is 1 to {MAX_BACKEND_NAME} characters")
        if self.named and reply.name != self.name:
            # Its records live only in that backend: another one must not take its place.
            log.warning("backend %s (%s): backend %s answers at its address; refused",
                        self.name, self.address, shorten(reply.name))
            self.elsewhere = reply.name
            raise self.unavailable(f"backend {shorten(repr(reply.name))} answers at its "
                                   "address instead")
        self.name, self.named = reply.name, True
        host = self.address.rsplit(":", 1)[0]
        self.metrics_url = f"http://{host}:{reply.metrics_port}/metrics" if reply.metrics_port \
            else ""
        return reply

    async def directory(self, start: pb.DirectoryPosition, timeout: float
                        ) -> pb.DirectoryReply:
        """One part of the backend's directory, from `start`, with its clusters' records
        (after a hello; `Membership` reads the parts and checks them)."""
        try:
            return await self.stub.Directory(pb.DirectoryRequest(start=start),
                                             timeout=timeout, metadata=self.metadata)
        except Exception as e:
            raise self.unavailable(str(e)) from None

    async def apply_directory(self, parts: Iterable[pb.DirectoryUpdate],
                              timeout: float) -> None:
        """Directory entries to the backend, a part per call (`directory_parts`): each
        is checked and applied there before the next is made and sent."""
        for part in parts:
            await self.stub.ApplyDirectory(part, timeout=timeout, metadata=self.metadata)

    def open_bus(self, hello: pb.BusHello) -> None:
        """Start a fresh bus; the first message tells the backend its place in the set."""
        self.close_bus()
        self.queue = Mailbox()
        self.queue.put(pb.BusMessage(hello=hello))
        self.error, self.broke = "", False
        self.pending = {}           # each bus has its own: a dying one fails only its units
        self.bus_task = asyncio.create_task(self._run_bus(self.queue, self.pending))

    async def _run_bus(self, queue: Mailbox[pb.BusMessage | bytes | None],
                       pending: dict[int, Inbox]) -> None:
        sent = metrics.BUS_MESSAGES.labels("to_backend", self.name)
        items = metrics.BUS_ITEMS.labels("to_backend", self.name)

        async def batches() -> AsyncIterator[bytes]:
            while True:
                batch = await queue.take()       # everything queued meanwhile goes along,
                messages: list[bytes] = []       # in as many messages as its bytes need
                size = 0
                for m in batch:
                    if m is None:                # closed
                        break
                    framed = _framed(_BATCH_MESSAGE, m if isinstance(m, bytes)
                                     else m.SerializeToString())
                    if messages and size + len(framed) > MESSAGE_BUDGET:
                        sent.inc()
                        items.inc(len(messages))
                        yield b"".join(messages)
                        messages, size = [], 0
                    messages.append(framed)
                    size += len(framed)
                if messages:
                    sent.inc()
                    items.inc(len(messages))
                    yield b"".join(messages)
                if m is None:
                    return

        try:
            async for replies in self._bus_call(batches(), metadata=self.metadata):
                for reply in replies.replies:
                    if reply.WhichOneof("body") == "forgotten":
                        self.on_forgotten(reply.seq)
                        continue
                    inbox = pending.get(reply.seq)
                    if inbox is not None:     # else: a unit PP gave up on (aborted)
                        inbox.deliver(self, reply)
        except grpc.aio.AioRpcError as e:
            self.error = e.details() or e.code().name
            self.broke = True
            log.warning("bus to backend %s broke: %s", self.name, self.error)
        except asyncio.CancelledError:
            raise
        else:
            self.error = self.error or "bus closed"
        finally:
            for inbox in pending.values():   # their results will never come
                inbox.deliver(self, None)

    def send(self, msg: pb.BusMessage | bytes) -> None:
        """Queue a message (or its serialized form) down this bus."""
        if self.queue is None or not self.up:
            raise self.unavailable()
        self.queue.put(msg)

    def close_bus(self) -> None:
        if self.queue is not None:
            self.queue.put(None)
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
            credit_window=WINDOW, members=[x.name for x in self.links]))

    @staticmethod
    def _fits(size: int, backend: str = "") -> None:
        """Refuses a traffic unit of `size` bytes (framing aside) that no bus message
        could carry: sent, it would break the bus and fail every unit on it."""
        if size + _FRAMING > MESSAGE_BUDGET:
            raise SemanticError(too_large("the traffic unit" + (
                f" for backend {backend}" if backend else ""), size + _FRAMING))

    def _number(self, links: list[BackendLink], timeout: float, requests: int) -> Inbox:
        """The next traffic unit's place in the total order, and its inbox, registered
        before anything is sent."""
        down = [link for link in links if not link.up]
        if down:
            raise down[0].unavailable()
        self.seq += 1
        return Inbox(links, self.seq, asyncio.get_running_loop().time() + timeout, timeout,
                     requests, epoch=self.epoch, decisions=self.decisions)

    def broadcast(self, units: dict[int, pb.TrafficUnit], timeout: float,
                  requests: int) -> Inbox:
        """Give a traffic unit (one copy per backend index it goes to) its place in the
        total order, put it on those buses and return its inbox, registered before
        anything is sent."""
        links = [link for link in self.links if link.index in units]
        bodies = []
        for link in links:                 # serialized without their seq, and measured
            body = units[link.index].SerializeToString()
            self._fits(len(body), link.name)
            bodies.append(body)
        inbox = self._number(links, timeout, requests)
        inbox.one_phase = frozenset(x for x in links if units[x.index].one_phase)
        for link, body in zip(links, bodies, strict=True):
            link.send(traffic_unit_message(body, self.seq))
        return inbox

    def broadcast_same(self, body: bytes, directory: bytes, timeout: float,
                       requests: int) -> Inbox:
        """`broadcast` of one traffic unit that is the same for every backend: `body`
        serialized without its seq, and the serialized directory entries it carries."""
        self._fits(len(body) + len(directory))
        inbox = self._number(list(self.links), timeout, requests)
        if len(self.links) == 1:        # one backend: one phase (`same_unit`)
            inbox.one_phase = frozenset(self.links)
        msg = traffic_unit_message(body, self.seq, directory)
        for link in self.links:
            link.send(msg)
        return inbox

    async def push_directory(self, update: pb.DirectoryUpdate, timeout: float,
                             skip: str = "") -> None:
        """New directory entries to every reachable backend but `skip`, outside bus order.
        A backend it fails gets them with the next traffic unit (Coordinator.place)."""
        targets = [link for link in self.links if link.up and link.name != skip]
        results = await asyncio.gather(*(link.apply_directory(
            directory_parts(update_entries(update)), timeout) for link in targets),
            return_exceptions=True)
        for link, result in zip(targets, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("directory push to %s failed: %s", link.name, result)

    async def close(self) -> None:
        for link in self.links:
            await link.close()
