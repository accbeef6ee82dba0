"""What every gRPC process shares: the message size limit, and waiting for SIGTERM/SIGINT
to shut down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

# The largest gRPC message any process sends or takes (a row batch is held well under it).
MAX_MESSAGE = 64 << 20
# Set in the environment of a process whose owner stops it (mbds/cluster.py).
OWNED = "MBDS_OWNED"

async def until_stopped(ready: asyncio.Event | None = None) -> None:
    """Signal `ready` (tests, embedding) and return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # A process of `mbds up` (or any LocalCluster) leaves Ctrl-C to its owner, which
    # stops the controller before the backends: the terminal sends SIGINT to them all.
    owned = bool(os.environ.get(OWNED))
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):   # not on every platform
            loop.add_signal_handler(sig, (lambda: None) if owned and sig == signal.SIGINT
                                    else stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
