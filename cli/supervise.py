"""A command that owns clusters runs in a thread of its own; the main thread only
waits for it, or for SIGTERM or Ctrl-C, and then stops what it owns.

Python runs a signal handler in the main thread between any two bytecodes: a handler
that raises (SystemExit, KeyboardInterrupt) can land inside gRPC's blocking read,
between a lock's release and its re-acquisition, and leave the lock broken or held
(a later `cancel` then waits for ever, or `with` fails on an unheld lock). Here
the handler only notes the signal, and the benchmark's thread learns of it the way
it learns of any fault: its clusters stop under it (`mbds.owned.stop_all`), its
requests fail, and it unwinds through its own `finally` blocks.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import click

from cli.lazy import LazyGroup
from mbds import owned

T = TypeVar("T")
UNWIND_S = 30.0     # how long the work may take to unwind once its clusters are gone


def in_thread(work: Callable[[], T], on_signal: Callable[[int, threading.Thread], None],
              signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> T:
    """`work()` in a thread of its own, its result or exception passed on. Meanwhile
    `signals` only note themselves; this (main) thread calls `on_signal(signum, the
    work's thread)` for each, between its waits, where raising is safe."""
    if threading.current_thread() is not threading.main_thread():
        return work()                   # only the main thread receives signals
    got: list[int] = []
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as e:      # handed to the main thread
            outcome["error"] = e

    old = {s: signal.signal(s, lambda n, _f: got.append(n)) for s in signals}
    try:
        worker = threading.Thread(target=run, name="mbds-work", daemon=True)
        worker.start()
        while True:
            while got:
                on_signal(got.pop(0), worker)
            if not worker.is_alive():
                break
            worker.join(0.1)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if "error" in outcome:
        raise outcome["error"]          # type: ignore[misc]
    return outcome["value"]             # type: ignore[return-value]


def supervise(work: Callable[[], T]) -> T:
    """`work()` in a thread of its own; SIGTERM or SIGINT meanwhile stops everything
    `mbds.owned` records and exits 128 + SIGTERM, or raises KeyboardInterrupt (click
    prints "Aborted!")."""
    return in_thread(work, _stop)


def _stop(signum: int, worker: threading.Thread) -> None:
    name = signal.Signals(signum).name
    click.echo(f"{name}: stopping the clusters", err=True)
    problems = owned.stop_all()
    worker.join(UNWIND_S)               # its requests fail now; its cleanup runs
    problems += owned.stop_all()        # anything its cleanup left (nothing, normally)
    if not worker.is_alive():
        owned.reset()                   # this process may start clusters again
    for p in problems:
        click.echo(f"could not stop {p}", err=True)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    sys.exit(128 + signum)


class SupervisedGroup(LazyGroup):
    """A LazyGroup whose subcommands run under `supervise`."""

    def invoke(self, ctx: click.Context) -> object:
        return supervise(lambda: super(SupervisedGroup, self).invoke(ctx))
