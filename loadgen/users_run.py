"""One timed run of IDM Test 1's users, all on one asyncio event loop.

Each user has its own gRPC channel and session (its own connection, as each
IDM user had its own terminal line) and runs its scripts back to back, each
retrieve written to the session and read up to the reply marked `end`. Users are
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

    async def retrieve(session: grpc.aio.StreamStreamCall, text: str) -> int:
        got = 0
        await session.write(pb.ExecuteRequest(text=text, timeout_s=TIMEOUT_S))
        while True:
            batch = await session.read()
            if batch is grpc.aio.EOF:
                raise ClientError("UNAVAILABLE", "the controller closed the session")
            # Rows are counted from each batch's `count`, never decoded (as run_counted does).
            got += sum(r.rows.count for r in batch.replies if r.WhichOneof("body") == "rows")
            if batch.end:
                if batch.HasField("failure"):
                    raise ClientError(batch.failure.code, batch.failure.message)
                return got

    asking: list[float | None] = [None] * len(channels)   # when each user's retrieve began

    async def user(i: int) -> None:
        session = None if dry else stubs[i].Session()
        for script in scripts[i]:
            for text in script:
                asking[i] = t = time.perf_counter()
                got = 1 if dry else await retrieve(session, text)
                hist.record((time.perf_counter() - t) * 1000)
                asking[i] = None
                rows[i] += got
        if session is not None:
            await session.done_writing()
    try:
        if not dry:     # connect first, so channel set-up is not part of the timed run
            await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in channels)), 30)
        t0 = time.perf_counter()
        await _watched(asyncio.gather(*(user(i) for i in range(len(channels)))), asking)
        elapsed = time.perf_counter() - t0
    finally:
        for c in channels:
            await c.close()
    return elapsed, sum(rows)


async def _watched(users: asyncio.Future, asking: list[float | None]) -> None:
    """Await the users; fail the run if one retrieve goes unanswered for TIMEOUT_S + 5 s
    (a session has no deadline per request, and a timer per read costs a task each)."""
    while True:
        done, _ = await asyncio.wait({users}, timeout=1.0)
        if done:
            users.result()      # raises what a user raised
            return
        now = time.perf_counter()
        if any(t is not None and now - t > TIMEOUT_S + 5 for t in asking):
            users.cancel()
            raise ClientError("DEADLINE_EXCEEDED",
                              f"a retrieve went unanswered for {TIMEOUT_S + 5:g} s")


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
