"""One timed run of IDM Test 1's users, all on one asyncio event loop.

Each user has its own `AsyncClient` — its own channel and session, as each IDM user
had its own terminal line — and runs its scripts back to back. Users are coroutines,
not threads: the harness shares the machine's two cores with the controller and the
backends, and threads contending for the GIL would take more of that CPU per request
than one loop does (docs/benchmarks-seeds.md has the figures).
"""

from __future__ import annotations

import asyncio
import time

from loadgen.hist import Hist
from mbds.async_client import AsyncClient
from mbds.client import ClientError

TIMEOUT_S = 120.0


async def _run(address: str, users: int, scripts: list[list[list[str]]], hist: Hist,
               dry: bool) -> tuple[float, int]:
    clients = [AsyncClient(address, timeout=TIMEOUT_S) for _ in range(max(users, 1))]
    rows = [0] * len(clients)
    asking: list[float | None] = [None] * len(clients)   # when each user's retrieve began

    async def retrieve(client: AsyncClient, text: str) -> int:
        # Rows are counted from each batch's `count`, never decoded (as run_counted does).
        got = 0
        async for batch in client.batches(text):
            got += sum(r.rows.count for r in batch.replies if r.WhichOneof("body") == "rows")
        return got

    async def user(i: int) -> None:
        for script in scripts[i]:
            for text in script:
                asking[i] = t = time.perf_counter()
                got = 1 if dry else await retrieve(clients[i], text)
                hist.record((time.perf_counter() - t) * 1000)
                asking[i] = None
                rows[i] += got
    try:
        if not dry:     # connect first, so channel set-up is not part of the timed run
            await asyncio.gather(*(c.connect() for c in clients))
        t0 = time.perf_counter()
        await _watched(asyncio.gather(*(user(i) for i in range(len(clients)))), asking)
        elapsed = time.perf_counter() - t0
    finally:
        for c in clients:
            await c.close()
    return elapsed, sum(rows)


async def _watched(users: asyncio.Future, asking: list[float | None]) -> None:
    """Await the users; fail the run if one retrieve goes unanswered for TIMEOUT_S + 5 s
    (one timer for all users, not a timer per request)."""
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
    return asyncio.run(_run(address, users, scripts, hist, dry))
