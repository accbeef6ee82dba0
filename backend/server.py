"""The backend process: gRPC servicers (Backend, Peer, health) over a BackendNode."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from backend.check import BadMessage
from backend.commit import ResolveFailed
from backend.links import IigClient, PeerLinks
from backend.node import BackendNode
from backend.owner import Owner
from backend.state import BusOut
from backend.store import Store
from mbds import dirlock, eventloop, faults, metrics, tls
from mbds.directory_parts import DirectoryParts, TooLarge
from mbds.doors import RoleDoor
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import (
    COMMITTED_RUNS,
    MESSAGE_BUDGET,
    SERVER_OPTIONS,
    foreign,
    listen_on,
    too_large,
    until_stopped,
)

log = logging.getLogger("mbds.backend")


PEER_FLUSH = 1.0      # seconds a stopping backend waits for its ids to reach the peers


def _latest(through: dict[str, int]) -> list[pb.UnitId]:
    """The latest COMMITTED_RUNS epochs' seqs, as a Hello lists them."""
    return [pb.UnitId(epoch=e, seq=s) for e, s in list(through.items())[-COMMITTED_RUNS:]]


class BackendServicer(rpc.BackendServicer):
    def __init__(self, node: BackendNode, cluster: str = "",
                 members: list[str] | None = None) -> None:
        self.node = node
        # Whose calls it takes; its open Bus streams, which `drain` ends.
        self.owner = Owner(node.name, cluster, members)
        self.buses = self.owner.buses
        self.parts = DirectoryParts(node.directory)

    async def drain(self, grace: float) -> None:
        """At shutdown: the units in flight on an open bus finish (their answers and, for a
        prepared unit, PP's decision), within `grace`; then every bus ends, since none ends
        on its own. A unit prepared here whose bus is gone stays in doubt: only the
        controller decides it, when this backend is back."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline and any(
                st.bus in self.buses for st in self.node.tus.values()):
            await asyncio.sleep(0.02)
        # Their descriptor ids out to the peers too, before the buses end (a bus that
        # ends, unlike one that breaks, tells PP that nothing of its units is missing);
        # not longer than PEER_FLUSH, as a peer that is down takes nothing.
        flushed = min(deadline, loop.time() + PEER_FLUSH)
        while loop.time() < flushed and not self.node.exchange.peers.flushed():
            await asyncio.sleep(0.02)
        for bus in self.buses:
            bus.queue.put(None)

    async def Hello(self, request: pb.HelloRequest,
                    context: grpc.aio.ServicerContext) -> pb.HelloReply:
        return pb.HelloReply(name=self.node.name, directory_digest=self.node.directory.digest(),
                             metrics_port=self.node.metrics_port, in_doubt=[
                                 pb.UnitId(epoch=e, seq=s)
                                 for e, s in self.node.prepared.listed()],
                             cluster=self.owner.cluster, bus_epoch=self.owner.epoch,
                             members=self.owner.members,
                             committed=_latest(self.node.prepared.committed),
                             carried=_latest(self.node.prepared.carried))

    async def _admit(self, context: grpc.aio.ServicerContext, *, writes: bool) -> None:
        """Refuse a call from another cluster's controller, or one that `writes` from a
        controller other than the one whose bus is open (`backend/owner.py`)."""
        refused = self.owner.refusal(context.invocation_metadata(), writes=writes)
        if refused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)

    async def Resolve(self, request: pb.Outcomes,
                      context: grpc.aio.ServicerContext) -> pb.HelloReply:
        await self._admit(context, writes=True)
        try:
            await self.node.prepared.resolve(list(request.outcomes))
        except ResolveFailed as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"backend {self.node.name}: {e}"[:1000])
        return await self.Hello(pb.HelloRequest(), context)

    async def Directory(self, request: pb.DirectoryRequest,
                        context: grpc.aio.ServicerContext) -> pb.DirectoryReply:
        """One part of the directory, from `request.start`: its entries in order up to
        `DIRECTORY_PART` bytes, the records here of its clusters, the digest of the
        directory it was cut from, and where the next part starts (none after the last).
        Refused while units found prepared at start are undecided: an in-doubt
        definition's files are not yet part of the database, nor taken back."""
        node = self.node
        await self._admit(context, writes=False)
        if node.prepared.on_disk:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, (
                f"backend {node.name} has {len(node.prepared.on_disk)} prepared units "
                "to resolve first"))
        try:
            part, following = self.parts.cut(request.start)
        except TooLarge as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"backend {node.name}: {e}")
        digest = node.directory.digest()
        ranges: dict[str, tuple[int, int]] = {}
        for c in part.clusters:
            low, high = ranges.get(c.file, (c.id, c.id))
            ranges[c.file] = (min(low, c.id), max(high, c.id))
        counts = await node.loop.run_in_executor(node.counting, node.store.cluster_counts,
                                                 ranges) if ranges else []
        reply = pb.DirectoryReply(
            name=node.name, directory=part, directory_digest=digest,
            counts=[pb.ClusterCount(cluster_id=c, records=n) for c, n in counts])
        if following is not None:
            reply.next.CopyFrom(following)
        return reply

    async def ApplyDirectory(self, request: pb.DirectoryUpdate,
                             context: grpc.aio.ServicerContext) -> pb.HelloReply:
        await self._admit(context, writes=True)
        try:
            faults.hit("backend.apply_directory")
            await self.node.apply_directory(request)
        except BadMessage as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"backend {self.node.name}: {e}")
        return await self.Hello(pb.HelloRequest(), context)

    async def Bus(self, request_iterator: AsyncIterator[pb.BusBatch],
                  context: grpc.aio.ServicerContext) -> AsyncIterator[pb.BackendReplies]:
        """Traffic units come down in the controller's total order; results go back up.

        Each message down is handled completely (stage 1) before the next one is read.
        Replies queued while the stream was busy go back together, in one message or
        as many as their bytes need (`MESSAGE_BUDGET`); a reply no message can carry
        fails its traffic unit instead of the bus (`_oversized`).
        """
        if self.node.prepared.on_disk:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, (
                f"backend {self.node.name} has {len(self.node.prepared.on_disk)} prepared units "
                "to resolve first"))
        bus = BusOut()
        refused = self.owner.open(bus, context.invocation_metadata(), context.peer())
        if refused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
        try:
            await self.owner.join(context.invocation_metadata(), self.node.writer)
        except Exception as e:     # its store cannot keep it (a full disk): no bus
            self.owner.closed(bus)
            await context.abort(grpc.StatusCode.UNAVAILABLE, (
                f"backend {self.node.name} cannot keep its cluster's id: {e}")[:1000])
        except BaseException:      # cancelled (the controller reopened it): no bus either
            self.owner.closed(bus)
            raise
        bus.cluster = self.owner.cluster
        reader = asyncio.create_task(self._read_bus(request_iterator, bus))
        sent = metrics.BUS_MESSAGES.labels("to_controller", self.node.name)
        items = metrics.BUS_ITEMS.labels("to_controller", self.node.name)
        try:
            while True:
                queued = await bus.queue.take()      # replies queued meanwhile go along
                replies: list[pb.BackendReply] = []
                size = 0
                for msg in queued:
                    if msg is None:                  # the bus ended
                        break
                    n = msg.ByteSize()
                    if n > MESSAGE_BUDGET:
                        msg = self._oversized(msg, n)
                        n = msg.ByteSize()
                    if replies and size + n > MESSAGE_BUDGET:
                        sent.inc()
                        items.inc(len(replies))
                        yield pb.BackendReplies(replies=replies)
                        replies, size = [], 0
                    replies.append(msg)
                    size += n
                if replies:
                    sent.inc()
                    items.inc(len(replies))
                    yield pb.BackendReplies(replies=replies)
                if msg is None:
                    break
        finally:
            self.owner.closed(bus)
            reader.cancel()
            self.node.on_bus_closed(bus)

    def _oversized(self, msg: pb.BackendReply, size: int) -> pb.BackendReply:
        """A reply of `size` bytes, more than any message carries (a row or a partial
        group holding a very large value), replaced by its unit's failure naming it: PP
        aborts that unit everywhere, and the bus and the other units go on."""
        kind = msg.WhichOneof("body")
        what = {"rows": f"a row batch ({msg.rows.count} rows)",
                "groups": f"{len(msg.groups.groups)} partial group(s)"}.get(
            kind or "", f"a reply ({kind})")
        log.warning("backend %s: unit %d: %s of %d bytes refused", self.node.name, msg.seq,
                    what, size)
        return pb.BackendReply(seq=msg.seq, error=f"backend {self.node.name}: " + too_large(
            f"request {msg.request_index}'s answer: {what}", size))

    async def _read_bus(self, request_iterator: AsyncIterator[pb.BusBatch],
                        bus: BusOut) -> None:
        node = self.node
        try:
            async for batch in request_iterator:
                for msg in batch.messages:
                    try:
                        await self._handle(msg, bus)
                    except Exception as e:  # one bad message fails alone, not the bus
                        if msg.HasField("hello"):   # ...but a bad hello leaves no bus
                            raise
                        log.warning("a bus message failed: %s", e)
                        if msg.HasField("traffic_unit"):
                            bus.send(pb.BackendReply(seq=msg.traffic_unit.seq, error=(
                                f"backend {node.name}: {type(e).__name__}: {e}")[:1000]))
        except BadMessage as e:
            log.warning("bus from the controller refused: %s", e)
        except Exception as e:  # a broken bus ends the call
            log.info("bus from the controller ended: %s", e)
        finally:
            bus.queue.put(None)


    async def _handle(self, msg: pb.BusMessage, bus: BusOut) -> None:
        node = self.node
        kind = msg.WhichOneof("body")
        if kind == "traffic_unit":
            await node.on_traffic_unit(msg.traffic_unit, bus)
        elif kind == "credit":
            node.on_credit(msg.credit.seq, msg.credit.batches)
        elif kind == "commit":
            node.on_commit(msg.commit.seq)
        elif kind == "abort":
            node.on_abort(msg.abort.seq, msg.abort.reason)
        elif kind == "hello":
            node.on_hello(msg.hello, bus)
            await self.owner.keep_members(list(msg.hello.members), node.writer)


class PeerServicer(rpc.PeerServicer):
    def __init__(self, node: BackendNode, owner: Owner) -> None:
        self.node = node
        self.owner = owner          # a peer of another cluster is refused
        # Set at shutdown: a peer's id stream never ends on its own, and the server's
        # grace period would wait for it.
        self.stopping = asyncio.Event()

    async def DescriptorIdsStream(self, request_iterator: AsyncIterator[pb.DescriptorIdsBatch],
                                  context: grpc.aio.ServicerContext) -> pb.PeerAck:
        refused = foreign(self.owner.cluster, context.invocation_metadata(),
                          f"backend {self.node.name}")
        if refused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
        reading = asyncio.ensure_future(self._read_ids(request_iterator))
        stopping = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if reading.done():
                try:
                    reading.result()  # a broken stream fails the call, as it always did
                except BadMessage as e:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        f"backend {self.node.name}: {e}"[:1000])
        finally:
            stopping.cancel()
            reading.cancel()
        return pb.PeerAck()

    async def _read_ids(self, request_iterator: AsyncIterator[pb.DescriptorIdsBatch]) -> None:
        async for batch in request_iterator:
            for msg in batch.ids:
                self.node.on_peer_ids(msg)


async def serve(*, listen: str, data_dir: Path, name: str | None = None,
                synchronous: str = "NORMAL", memory: bool = False, metrics_port: int = 0,
                ready: asyncio.Event | None = None, grace: float = 5.0,
                tls_dir: Path | None = None, insecure: bool = False) -> None:
    """Run one backend until SIGTERM/SIGINT; its data and identity live in data_dir.

    With `tls_dir` only the controller may call the Backend service (bus, directory)
    and only other backends the Peer service, each proving its role by certificate."""
    identity = tls.Identity.load(tls_dir, "backend") if tls_dir else None
    if identity is None:
        tls.check_plaintext(listen, "the backend", insecure)
    tls.use(identity)
    dirlock.hold(data_dir, "the backend's")
    store = Store(data_dir / "backend.db", synchronous=synchronous, memory=memory)
    node_name = store.identity(name or data_dir.resolve().name)
    cluster = store.cluster()        # read before the writer thread takes the connection
    members = store.members()
    peers, iig = PeerLinks(), IigClient(node_name)
    node = BackendNode(node_name, store, peers=peers, iig=iig)
    node.metrics_port = metrics_port
    doors = [RoleDoor({"mbds.Backend": "controller", "mbds.Peer": "backend"})] if identity else []
    server = grpc.aio.server(interceptors=doors, options=SERVER_OPTIONS)
    backend_servicer = BackendServicer(node, cluster, members)
    peer_servicer = PeerServicer(node, backend_servicer.owner)
    rpc.add_BackendServicer_to_server(backend_servicer, server)
    rpc.add_PeerServicer_to_server(peer_servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = listen_on(server, listen, "the backend",
                     identity.internal_server() if identity else None)
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    host = listen.rsplit(":", 1)[0]
    log.info("backend %s serving on %s:%d (data %s)", node_name, host, port, data_dir)
    print(f"backend {node_name} listening on {host}:{port} (event loop {eventloop.running()})",
          flush=True)
    await until_stopped(ready)
    await health_servicer.enter_graceful_shutdown()
    # Current answers first (they may need ids from the peers and send ours to them);
    # then every stream ends, so the grace period below waits for nothing that is idle.
    await backend_servicer.drain(grace)
    await peers.close()
    peer_servicer.stopping.set()
    await server.stop(grace)
    await iig.close()
    node.writer.shutdown()
    store.close()
    log.info("backend %s stopped", node_name)
