"""The controller's link to one backend: a channel and the ordered bus.

The bus is one bidirectional stream per backend. Traffic units are put on
every backend's bus queue in one synchronous step, so all backends receive
them in the same order — the broadcast bus of the paper's hardware, rebuilt.
The backend's results come back on the same stream, tagged with the traffic
unit's seq, and are routed to the PP that waits for them (`pending`). What
was queued at once travels as one message each way, so under many users a
message carries many traffic units, and a small request costs one message
down and one up per backend instead of a call of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from mbds import metrics
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc

log = logging.getLogger("mbds.controller")
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.max_send_message_length", 64 << 20)]


class BackendLink:
    def __init__(self, address: str) -> None:
        self.address = address
        self.name = address          # replaced by the backend's own name at hello
        self.index = 0
        self.channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.stub = rpc.BackendStub(self.channel)
        self.queue: asyncio.Queue[pb.BusMessage | None] | None = None
        self.bus_task: asyncio.Task | None = None
        # seq -> the inbox of the PP gathering that traffic unit: (link, reply) items,
        # (link, None) when the bus broke.
        self.pending: dict[int, asyncio.Queue] = {}
        self.error = "not connected"
        self.metrics_url = ""

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

    def open_bus(self, hello: pb.BusHello) -> None:
        """Start a fresh bus; the first message tells the backend its place in the set."""
        self.close_bus()
        self.queue = asyncio.Queue()
        self.queue.put_nowait(pb.BusMessage(hello=hello))
        self.error = ""
        self.pending = {}           # each bus has its own: a dying one fails only its units
        self.bus_task = asyncio.create_task(self._run_bus(self.queue, self.pending))

    async def _run_bus(self, queue: asyncio.Queue[pb.BusMessage | None],
                       pending: dict[int, asyncio.Queue]) -> None:
        sent = metrics.BUS_MESSAGES.labels("to_backend", self.name)
        items = metrics.BUS_ITEMS.labels("to_backend", self.name)

        async def batches():  # noqa: ANN202 - async generator
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
