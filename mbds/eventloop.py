"""The event loop a service runs on: uvloop (libuv's loop, written in C) unless asked
for the standard library's. A small traffic unit takes many turns of the loop (gRPC's
callbacks, the tasks of DM's stages, the buses), and uvloop's cost less CPU
(docs/profile.md, "The event loop")."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

CHOICES = ("uvloop", "asyncio")
DEFAULT = "uvloop"
ENV = "MBDS_EVENT_LOOP"         # what --event-loop reads, and measuring code follows


def configured() -> str:
    """The loop the environment asks for (MBDS_EVENT_LOOP), uvloop by default: what
    the services run on, so that what measures them in process runs on it too."""
    return os.environ.get(ENV) or DEFAULT


def run(main: Coroutine[Any, Any, T], loop: str | None = None) -> T:
    """Run `main` to its end on a new loop of the kind named (one of CHOICES; default:
    `configured()`)."""
    loop = loop or configured()
    if loop not in CHOICES:
        raise ValueError(f"event loop {loop!r}: expected one of {', '.join(CHOICES)}")
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running() -> str:
    """The kind of the running loop, as CHOICES names it."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") \
        else "asyncio"
