"""The backend process: gRPC servicers (Backend, Peer, health) over a BackendNode."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from backend.node import BackendNode
from backend.store import Store
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import until_stopped
from mbds.values import Value, to_pb

log = logging.getLogger("mbds.backend")


class BackendServicer(rpc.BackendServicer):
    def __init__(self, node: BackendNode) -> None:
        self.node = node
        self._iig_channel: grpc.aio.Channel | None = None
        self._iig_address = ""
        node.iig = self._place

    async def Hello(self, request: pb.HelloRequest, context) -> pb.HelloReply:  # noqa: ANN001
        return pb.HelloReply(name=self.node.name, directory_digest=self.node.directory.digest(),
                             metrics_port=self.node.metrics_port)

    async def Directory(self, request, context) -> pb.DirectoryReply:  # noqa: ANN001
        node = self.node
        counts = await node.loop.run_in_executor(
            node.readers, node.store.cluster_counts, list(node.directory.files))
        return pb.DirectoryReply(
            name=node.name, directory=node.directory.to_update(),
            counts=[pb.ClusterCount(cluster_id=c, records=n) for c, n in counts],
            directory_digest=node.directory.digest())

    async def ApplyDirectory(self, request: pb.DirectoryUpdate, context) -> pb.HelloReply:  # noqa: ANN001
        await self.node.apply_directory(request)
        return await self.Hello(pb.HelloRequest(), context)

    async def Bus(self, request_iterator, context) -> pb.BusAck:  # noqa: ANN001
        # The bus delivers traffic units in the controller's total order; handle each
        # message completely (stage 1) before reading the next one.
        async for msg in request_iterator:
            kind = msg.WhichOneof("body")
            if kind == "hello":
                self.node.on_hello(msg.hello)
            elif kind == "traffic_unit":
                await self.node.on_traffic_unit(msg.traffic_unit)
            elif kind == "abort":
                self.node.on_abort(msg.abort.seq, msg.abort.reason)
            elif kind == "commit":
                self.node.on_commit(msg.commit.seq)
        return pb.BusAck()

    async def Results(self, request: pb.ResultsRequest, context):  # noqa: ANN001, ANN201
        key = (request.epoch, request.seq)
        st = self.node.state(key)
        st.attached = True
        try:
            await asyncio.wait_for(st.arrived.wait(), self.node.result_timeout)
        except TimeoutError:
            self.node.tus.pop(key, None)
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"backend {self.node.name}: traffic unit {request.seq} "
                                "never arrived on the bus")
        done = False
        try:
            while (msg := await st.out.get()) is not None:
                msg.seq = request.seq
                yield msg
            done = True
        finally:
            if not done:     # PP went away: abort the traffic unit, roll back
                self.node.on_abort(request.seq, "PP stopped reading the results")
            self.node.tus.pop(key, None)

    async def _place(self, file: str, values: list[Value]) -> pb.PlaceReply:
        address = self.node.session.iig_address
        if self._iig_channel is None or address != self._iig_address:
            self._iig_channel = grpc.aio.insecure_channel(address)
            self._iig_address = address
        stub = rpc.IigStub(self._iig_channel)
        return await stub.Place(pb.PlaceRequest(
            file=file, directory_values=[to_pb(v) for v in values], backend=self.node.name),
            timeout=30)


class PeerServicer(rpc.PeerServicer):
    def __init__(self, node: BackendNode) -> None:
        self.node = node

    async def DescriptorIdsStream(self, request_iterator, context) -> pb.PeerAck:  # noqa: ANN001
        async for msg in request_iterator:
            self.node.on_peer_ids(msg)
        return pb.PeerAck()


async def serve(*, listen: str, data_dir: Path, name: str | None = None,
                synchronous: str = "NORMAL", memory: bool = False, metrics_port: int = 0,
                ready: asyncio.Event | None = None, grace: float = 5.0) -> None:
    """Run one backend until SIGTERM/SIGINT; its data and identity live in data_dir."""
    store = Store(data_dir / "backend.db", synchronous=synchronous, memory=memory)
    node_name = store.identity(name or data_dir.resolve().name)
    node = BackendNode(node_name, store)
    node.metrics_port = metrics_port
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
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
    await server.stop(grace)
    await node.peer_links.close()
    node.writer.shutdown(wait=True)
    store.close()
    log.info("backend %s stopped", node_name)
