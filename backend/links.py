"""A backend's outbound links: the descriptor-id streams to its peers (docs/spec.md §4 step 3)
and the IIG placement client, both configured from the bus hello.

One long-lived client stream per peer: a broadcast is a queue put, not an RPC,
which keeps the exchange cheap enough for two-record requests. A broken
stream is reopened on the next message; ids lost with it make the waiting
backend time out and fail that traffic unit with the peer's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc

from mbds import tls
from mbds.mailbox import Mailbox
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import CLUSTER_KEY, MESSAGE_BUDGET, too_large
from mbds.values import Value, to_pb

log = logging.getLogger("mbds.peers")


class _PeerLink:
    def __init__(self, address: str, cluster: str) -> None:
        self.address, self.cluster = address, cluster
        self.metadata = ((CLUSTER_KEY, cluster),) if cluster else ()   # the peer checks it
        self.channel = tls.channel(address, "backend")
        # The ids go down serialized already: a broadcast serializes a unit's ids once for
        # every peer (`PeerLinks.broadcast`).
        self._open = self.channel.stream_unary(
            "/mbds.Peer/DescriptorIdsStream", request_serializer=None,
            response_deserializer=pb.PeerAck.FromString, _registered_method=True)
        self.queue: Mailbox[bytes | None] = Mailbox()
        self.task = asyncio.create_task(self._run())

    @staticmethod
    async def _messages(queue: Mailbox[bytes | None]) -> AsyncIterator[bytes]:
        while True:       # every unit searched meanwhile goes along: serialized
            parts: list[bytes] = []               # batches concatenated are one batch,
            size = 0                              # as many as their bytes need
            for data in await queue.take():
                if data is None:                  # its stream is over (`_run`)
                    return
                if parts and size + len(data) > MESSAGE_BUDGET:
                    yield b"".join(parts)
                    parts, size = [], 0
                parts.append(data)
                size += len(data)
            yield b"".join(parts)

    async def _run(self) -> None:
        while True:
            queue = self.queue
            try:
                # The first stream takes what was broadcast before this task started.
                await self._open(self._messages(queue), wait_for_ready=True,
                                 metadata=self.metadata)
            except grpc.aio.AioRpcError as e:
                log.info("peer stream to %s broke: %s", self.address, e.code())
            else:
                log.info("peer stream to %s ended (the peer is stopping)", self.address)
            finally:
                # gRPC leaves the task that reads a call's messages waiting on the queue
                # when the call ends; left so, it would be collected pending, its
                # generator with it. The end marker lets it finish.
                queue.put(None)
            # A fresh queue per stream: the ended stream's reader takes the end marker,
            # and would take whatever was put after it along with it.
            self.queue = Mailbox()
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.channel.close()


class PeerLinks:
    """The descriptor-id streams to every other backend of the bus."""

    def __init__(self) -> None:
        self.links: dict[str, _PeerLink] = {}
        self.targets: list[str] = []
        self._closing: set[asyncio.Task[None]] = set()

    def configure(self, peers: list[str], my_index: int, cluster: str = "") -> None:
        self.targets = [a for i, a in enumerate(peers) if i != my_index]
        # A link to an address no longer a peer (a backend gone, or swapped to another
        # address), or of another cluster, is closed: left, it would keep trying to
        # reach it, and the ids queued for it would hold a stop's flush to its bound.
        for a, link in list(self.links.items()):
            if a not in self.targets or link.cluster != cluster:
                del self.links[a]
                task = asyncio.create_task(link.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        for a in self.targets:
            if a not in self.links:
                self.links[a] = _PeerLink(a, cluster)

    def broadcast(self, msg: pb.DescriptorIds) -> None:
        """Queue `msg` for every peer; raises ValueError, sending nothing, if no message
        can carry it (the unit then fails here, and its abort frees the peers)."""
        data = pb.DescriptorIdsBatch(ids=[msg]).SerializeToString()
        if len(data) > MESSAGE_BUDGET:
            raise ValueError(too_large("this backend's share of the unit's descriptor ids",
                                       len(data)))
        for a in self.targets:
            self.links[a].queue.put(data)

    def flushed(self) -> bool:
        """Has every id broadcast so far gone down its stream (each queue taken, and its
        stream waiting for more)?"""
        return all(link.queue.idle for link in self.links.values())

    async def close(self) -> None:
        for link in self.links.values():
            await link.close()
        if self._closing:
            await asyncio.wait(list(self._closing))


class IigClient:
    """Asks IIG (at the controller) for the cluster of a record an UPDATE moves to
    directory values that have no cluster here yet."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.address = ""           # from the bus hello
        self.metadata: tuple[tuple[str, str], ...] = ()    # this backend's cluster
        self._channel: grpc.aio.Channel | None = None
        self._channel_address = ""

    def configure(self, address: str, cluster: str = "") -> None:
        self.address = address
        self.metadata = ((CLUSTER_KEY, cluster),) if cluster else ()

    async def place(self, file: str, values: list[Value]) -> pb.PlaceReply:
        if not self.address:
            raise RuntimeError("no IIG to place a moved record")
        if self._channel is None or self.address != self._channel_address:
            self._channel = tls.channel(self.address, "controller")
            self._channel_address = self.address
        stub = rpc.IigStub(self._channel)
        return await stub.Place(pb.PlaceRequest(
            file=file, directory_values=[to_pb(v) for v in values], backend=self.backend),
            timeout=30, metadata=self.metadata)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
