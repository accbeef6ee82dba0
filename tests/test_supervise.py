"""`mbds bench`'s supervisor (cli/supervise.py) and what it stops (mbds/owned.py): a
signal never raises inside the work; it stops what the work owns, and the work ends
the way it ends on any fault."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cli.supervise import supervise
from mbds import owned

_started: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _fresh_owned():
    owned.reset()
    yield
    owned.stop_all(5)
    owned.reset()
    while _started:                     # whatever a failing test left running
        p = _started.pop()
        p.kill()
        p.wait()


def _sleeper() -> subprocess.Popen[bytes]:
    with owned.starting() as record:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        _started.append(p)
        record(p.terminate)
    return p


def _signal_soon(signum: int, after: float = 0.3) -> None:
    threading.Timer(after, os.kill, (os.getpid(), signum)).start()


def _waits_on(proc: subprocess.Popen[bytes], raised: list[BaseException]) -> str:
    """Like a gRPC read: short condition waits until the far end goes away."""
    cond = threading.Condition()
    try:
        with cond:
            while proc.poll() is None:
                cond.wait(0.05)
    except BaseException as e:
        raised.append(e)
        raise
    return "its process ended"


@pytest.mark.parametrize(("signum", "raises"), [(signal.SIGTERM, SystemExit),
                                               (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_stops_what_the_work_owns_and_never_raises_inside_it(signum, raises) -> None:
    proc = _sleeper()
    raised: list[BaseException] = []
    _signal_soon(signum)
    with pytest.raises(raises) as e:
        supervise(lambda: _waits_on(proc, raised))
    if raises is SystemExit:
        assert e.value.code == 128 + signum
    assert proc.poll() is not None          # stopped by the supervisor…
    assert raised == []                     # …and the work was never interrupted
    assert signal.getsignal(signum) is not None and not owned.stopping()
    _sleeper().terminate()                  # this process may start things again


def test_without_a_signal_the_work_s_result_and_errors_pass_through() -> None:
    assert supervise(lambda: 42) == 42
    with pytest.raises(ValueError, match="named"):
        supervise(lambda: (_ for _ in ()).throw(ValueError("named")))
    before = signal.getsignal(signal.SIGTERM)
    supervise(lambda: None)
    assert signal.getsignal(signal.SIGTERM) is before    # the handlers are given back


def test_nothing_starts_once_stopping_has_begun() -> None:
    proc = _sleeper()
    assert owned.stop_all(10) == []
    assert proc.wait(10) is not None
    with pytest.raises(owned.Stopping):
        _sleeper()
    with pytest.raises(owned.Stopping):
        owned.check()


def test_one_stop_that_hangs_is_named_and_delays_none_of_the_others() -> None:
    proc = _sleeper()
    release = threading.Event()

    def hangs() -> None:
        release.wait(30)
    with owned.starting() as record:
        record(hangs)
    t0 = time.monotonic()
    problems = owned.stop_all(0.5)
    release.set()
    assert time.monotonic() - t0 < 5
    assert proc.wait(5) is not None
    assert len(problems) == 1 and "hangs" in problems[0] and "still stopping" in problems[0]


def test_what_stopped_by_itself_is_left_alone() -> None:
    stopped: list[str] = []
    with owned.starting() as record:
        key = record(lambda: stopped.append("again"))
    owned.disown(key)
    owned.stop_all(5)
    assert stopped == []
