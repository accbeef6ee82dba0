"""What every gRPC process shares: the message size limit, and waiting for SIGTERM/SIGINT
to shut down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import signal

# The largest gRPC message any process sends or takes (a row batch is held well under it).
MAX_MESSAGE = 64 << 20

async def until_stopped(ready: asyncio.Event | None = None) -> None:
    """Signal `ready` (tests, embedding) and return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):   # not on every platform
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
