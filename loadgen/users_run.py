"""One timed run of IDM Test 1's users, all on one asyncio event loop.

Each user has its own gRPC channel (its own connection, as each IDM user had
its own terminal line) and runs its scripts back to back. Users are
coroutines, not threads: the harness shares the machine's two cores with the
controller and the backends, and 24 threads contending for the GIL cost the
machine about a third more CPU per request than one loop does (0.77 against
0.58 ms per request at 24 users, measured with /proc/<pid>/stat) — CPU the
IDM's users, on their own terminals, never took from the database machine.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from loadgen.hist import Hist
from mbds.client import ClientError
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc

TIMEOUT_S = 120.0


async def _run(address: str, users: int, scripts: list[list[list[str]]], hist: Hist,
               dry: bool) -> tuple[float, int]:
    channels = [grpc.aio.insecure_channel(address) for _ in range(max(users, 1))]
    stubs = [rpc.ControllerStub(c) for c in channels]
    rows = [0] * len(channels)

    async def retrieve(stub: rpc.ControllerStub, text: str) -> int:
        got = 0
        # Rows are counted from each batch's `count`, never decoded (as run_counted does).
        async for batch in stub.Execute(pb.ExecuteRequest(text=text, timeout_s=TIMEOUT_S),
                                        timeout=TIMEOUT_S + 5):
            for reply in batch.replies:
                if reply.WhichOneof("body") == "rows":
                    got += reply.rows.count
        return got

    async def user(i: int) -> None:
        for script in scripts[i]:
            for text in script:
                t = time.perf_counter()
                got = 1 if dry else await retrieve(stubs[i], text)
                hist.record((time.perf_counter() - t) * 1000)
                rows[i] += got
    try:
        if not dry:     # connect first, so channel set-up is not part of the timed run
            await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in channels)), 30)
        t0 = time.perf_counter()
        await asyncio.gather(*(user(i) for i in range(len(channels))))
        elapsed = time.perf_counter() - t0
    finally:
        for c in channels:
            await c.close()
    return elapsed, sum(rows)


def run_users(address: str, users: int, scripts: list[list[list[str]]], hist: Hist,
              dry: bool = False) -> tuple[float, int]:
    """One timed run: (seconds from the common start to the last user's end, rows received).

    `dry` is the zero-user run: the same loop, scripts and bookkeeping, nothing sent.
    A failed retrieve raises ClientError, as the synchronous client's calls do.
    """
    try:
        return asyncio.run(_run(address, users, scripts, hist, dry))
    except grpc.aio.AioRpcError as e:
        raise ClientError(e.code().name, e.details() or e.code().name) from None
