"""What a command has started and must not leave behind: its server processes and
compose projects, each owned here by the function that stops it.

`mbds bench` runs a benchmark in a thread of its own and keeps the main thread for
SIGTERM and Ctrl-C (`cli/supervise.py`): a signal then never raises inside gRPC's
or the benchmark's code, half-way through a lock, but makes the main thread call
`stop_all()`. That stops everything owned at once and refuses anything started
after it, so the benchmark's requests fail and it unwinds through its own cleanup.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Stopping(RuntimeError):
    """Raised by `starting` once `stop_all` has begun: nothing new starts then."""


_lock = threading.Lock()
_stops: dict[int, Callable[[], object]] = {}
_keys = itertools.count()
_stopping = threading.Event()


@contextmanager
def starting() -> Iterator[Callable[[Callable[[], object]], int]]:
    """Start something inside this block and record how to stop it with the function
    it yields (which returns the key that disowns it). `stop_all` waits for the block,
    so nothing is started without being recorded; once it has begun, this refuses."""
    with _lock:
        check()
        yield _record


def _record(stop: Callable[[], object]) -> int:
    key = next(_keys)
    _stops[key] = stop
    return key


def check() -> None:
    """Raise Stopping once `stop_all` has begun (for a start that outlasted it)."""
    if _stopping.is_set():
        raise Stopping("stopping: nothing new is started")


def disown(key: int) -> None:
    """It has stopped by itself (or by its owner): `stop_all` leaves it alone."""
    with _lock:
        _stops.pop(key, None)


def stopping() -> bool:
    return _stopping.is_set()


def stop_all(timeout: float = 60.0) -> list[str]:
    """Stop everything owned, all at once (each stop in its own thread, so one slow
    stop delays none of the others); from here on `starting` refuses. Returns what did
    not stop within `timeout`, named, or the error it stopped with."""
    with _lock:
        _stopping.set()
        stops = list(_stops.items())
        _stops.clear()
    problems: list[str] = []

    def run(stop: Callable[[], object]) -> None:
        try:
            stop()
        except Exception as e:          # reported; the others still stop
            problems.append(f"{stop!r}: {e}")
    threads = [threading.Thread(target=run, args=(stop,), daemon=True) for _, stop in stops]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t, (_, stop) in zip(threads, stops, strict=True):
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            problems.append(f"{stop!r}: still stopping after {timeout:g}s")
    return problems


def reset() -> None:
    """Own things again after a `stop_all` (a test, or a supervisor that ran before)."""
    with _lock:
        _stopping.clear()
