"""The backend process: gRPC servicers (Backend, Peer, health) over a BackendNode."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from backend.check import BadMessage
from backend.links import IigClient, PeerLinks
from backend.node import BackendNode
from backend.state import BusOut
from backend.store import Store
from mbds import metrics
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_MESSAGE, until_stopped

log = logging.getLogger("mbds.backend")


class BackendServicer(rpc.BackendServicer):
    def __init__(self, node: BackendNode) -> None:
        self.node = node

    async def Hello(self, request: pb.HelloRequest,
                    context: grpc.aio.ServicerContext) -> pb.HelloReply:
        return pb.HelloReply(name=self.node.name, directory_digest=self.node.directory.digest(),
                             metrics_port=self.node.metrics_port, in_doubt=[
                                 pb.UnitId(epoch=e, seq=s)
                                 for e, s in self.node.prepared.listed()])

    async def Resolve(self, request: pb.Outcomes,
                      context: grpc.aio.ServicerContext) -> pb.HelloReply:
        await self.node.prepared.resolve(list(request.outcomes))
        return await self.Hello(pb.HelloRequest(), context)

    async def Directory(self, request: pb.DirectoryRequest,
                        context: grpc.aio.ServicerContext) -> pb.DirectoryReply:
        node = self.node
        counts = await node.loop.run_in_executor(
            node.counting, node.store.cluster_counts, list(node.directory.files))
        return pb.DirectoryReply(
            name=node.name, directory=node.directory.to_update(),
            counts=[pb.ClusterCount(cluster_id=c, records=n) for c, n in counts],
            directory_digest=node.directory.digest())

    async def ApplyDirectory(self, request: pb.DirectoryUpdate,
                             context: grpc.aio.ServicerContext) -> pb.HelloReply:
        try:
            await self.node.apply_directory(request)
        except BadMessage as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"backend {self.node.name}: {e}")
        return await self.Hello(pb.HelloRequest(), context)

    async def Bus(self, request_iterator: AsyncIterator[pb.BusBatch],
                  context: grpc.aio.ServicerContext) -> AsyncIterator[pb.BackendReplies]:
        """Traffic units come down in the controller's total order; results go back up.

        Each message down is handled completely (stage 1) before the next one is read.
        Replies queued while the stream was busy go back together in one message.
        """
        if self.node.prepared.on_disk:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, (
                f"backend {self.node.name} has {len(self.node.prepared.on_disk)} prepared units "
                "to resolve first"))
        bus = BusOut()
        reader = asyncio.create_task(self._read_bus(request_iterator, bus))
        sent = metrics.BUS_MESSAGES.labels("to_controller", self.node.name)
        items = metrics.BUS_ITEMS.labels("to_controller", self.node.name)
        try:
            while (msg := await bus.queue.get()) is not None:
                replies = [msg]
                while not bus.queue.empty() and (msg := bus.queue.get_nowait()) is not None:
                    replies.append(msg)
                sent.inc()
                items.inc(len(replies))
                yield pb.BackendReplies(replies=replies)
                if msg is None:
                    break
        finally:
            reader.cancel()
            self.node.on_bus_closed(bus)

    async def _read_bus(self, request_iterator: AsyncIterator[pb.BusBatch],
                        bus: BusOut) -> None:
        node = self.node
        try:
            async for batch in request_iterator:
                for msg in batch.messages:
                    try:
                        await self._handle(msg, bus)
                    except Exception as e:  # one bad message fails alone, not the bus
                        log.warning("a bus message failed: %s", e)
                        if msg.HasField("traffic_unit"):
                            bus.send(pb.BackendReply(seq=msg.traffic_unit.seq, error=(
                                f"backend {node.name}: {type(e).__name__}: {e}")[:1000]))
        except Exception as e:  # a broken bus ends the call
            log.info("bus from the controller ended: %s", e)
        finally:
            bus.queue.put_nowait(None)


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


class PeerServicer(rpc.PeerServicer):
    def __init__(self, node: BackendNode) -> None:
        self.node = node

    async def DescriptorIdsStream(self, request_iterator: AsyncIterator[pb.DescriptorIdsBatch],
                                  context: grpc.aio.ServicerContext) -> pb.PeerAck:
        async for batch in request_iterator:
            for msg in batch.ids:
                self.node.on_peer_ids(msg)
        return pb.PeerAck()


async def serve(*, listen: str, data_dir: Path, name: str | None = None,
                synchronous: str = "NORMAL", memory: bool = False, metrics_port: int = 0,
                ready: asyncio.Event | None = None, grace: float = 5.0) -> None:
    """Run one backend until SIGTERM/SIGINT; its data and identity live in data_dir."""
    store = Store(data_dir / "backend.db", synchronous=synchronous, memory=memory)
    node_name = store.identity(name or data_dir.resolve().name)
    peers, iig = PeerLinks(), IigClient(node_name)
    node = BackendNode(node_name, store, peers=peers, iig=iig)
    node.metrics_port = metrics_port
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE)])
    rpc.add_BackendServicer_to_server(BackendServicer(node), server)
    rpc.add_PeerServicer_to_server(PeerServicer(node), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port(listen)
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    host = listen.rsplit(":", 1)[0]
    log.info("backend %s serving on %s:%d (data %s)", node_name, host, port, data_dir)
    print(f"backend {node_name} listening on {host}:{port}", flush=True)
    await until_stopped(ready)
    await health_servicer.enter_graceful_shutdown()
    # Our streams to the peers end first: a peer stopping at the same time then has no
    # open stream from us to wait its grace period for.
    await peers.close()
    await server.stop(grace)
    await iig.close()
    node.writer.shutdown()
    store.close()
    log.info("backend %s stopped", node_name)
