"""A client's lifetime: one never closed lets go of its session once collected, closing
one fails the requests under way and the later ones with a ClientError, a slow reader of
a long answer is not taken for a silent controller, and an `AsyncClient` made before
its event loop runs works on that loop."""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
import time

import pytest

from mbds.async_client import AsyncClient
from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML, Running

INSERT = "INSERT (<FILE, Census>, <CITY, '{c}'>, <POP, {p}>, <STATE, CA>, <AREA, 1.5>)"
ALL = "RETRIEVE (FILE = Census) (CITY, POP)"


def census(cluster_factory) -> Running:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(INSERT.format(c=f"c{i}", p=i * 100)
                                     for i in range(20)) + "]")
    return r


def threads_after_gc(settle: float = 15.0, floor: int = 0) -> int:
    """The thread count once collected clients' threads have had time to end."""
    gc.collect()
    stop = time.monotonic() + settle
    while threading.active_count() > floor and time.monotonic() < stop:
        time.sleep(0.1)
    return threading.active_count()


def test_a_client_never_closed_lets_go_of_its_session_and_threads(cluster_factory) -> None:
    r = census(cluster_factory)
    before = threads_after_gc(settle=0)
    for _ in range(30):
        [res] = Client(r.cluster.address, timeout=60).execute(ALL)   # the docs' one-liner
        assert len(res.records) == 20
    # Three threads a client (its session's watchdog, gRPC's request and channel
    # threads) would stay for ever; a few may still be ending.
    assert threads_after_gc(floor=before) <= before + 5
    c = Client(r.cluster.address, timeout=60)
    c.execute(ALL)
    del c
    assert threads_after_gc(floor=before) <= before + 5


def test_a_closed_client_raises_client_errors_sync(cluster_factory) -> None:
    """A request under way when another thread closes the client fails CANCELLED, on the
    session and on a call of its own; one made after the close FAILED_PRECONDITION."""
    r = census(cluster_factory)
    assert r.cluster.controller is not None
    c = Client(r.cluster.address, timeout=60)
    c.execute(ALL)
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            c.execute(ALL)
        except BaseException as e:
            errors.append(e)

    r.cluster.controller.signal(signal.SIGSTOP)     # no answer can end them first
    try:
        first = threading.Thread(target=ask)
        first.start()
        while not c._in_use.locked():           # the first one holds the session
            time.sleep(0.01)
        second = threading.Thread(target=ask)   # ... so this one is a call of its own
        second.start()
        time.sleep(0.5)
        c.close()
        first.join(30)
        second.join(30)
    finally:
        r.cluster.controller.signal(signal.SIGCONT)
    assert len(errors) == 2
    for e in errors:
        assert isinstance(e, ClientError), repr(e)
        assert e.code == "CANCELLED" and "closed while the request was under way" in str(e)
    for later in (lambda: c.execute(ALL), lambda: c.status(), lambda: c.define(CENSUS_YAML),
                  lambda: list(c.load("CENSUS", ["CITY"], [(["x"], None)]))):
        with pytest.raises(ClientError) as got:
            later()
        assert got.value.code == "FAILED_PRECONDITION" and "client is closed" in str(got.value)


def test_a_closed_client_raises_client_errors_async(cluster_factory) -> None:
    """The same for `AsyncClient`; a task its owner cancels stays cancelled."""
    r = census(cluster_factory)
    assert r.cluster.controller is not None

    async def run() -> None:
        c = AsyncClient(r.cluster.address, timeout=60)
        await c.execute(ALL)
        r.cluster.controller.signal(signal.SIGSTOP)
        try:
            # The first goes on the session, the others as calls of their own.
            tasks = [asyncio.create_task(c.execute(ALL)) for _ in range(3)]
            owned = asyncio.create_task(c.execute(ALL))
            await asyncio.sleep(0.5)
            owned.cancel()
            await c.close()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            r.cluster.controller.signal(signal.SIGCONT)
        for t, e in zip(tasks, results, strict=True):
            assert not t.cancelled()
            assert isinstance(e, ClientError), repr(e)
            assert e.code == "CANCELLED" and "closed while the request was under way" in str(e)
        with pytest.raises(asyncio.CancelledError):
            await owned
        with pytest.raises(ClientError) as got:
            await c.execute(ALL)
        assert got.value.code == "FAILED_PRECONDITION" and "client is closed" in str(got.value)
    asyncio.run(run())


def test_a_slow_reader_of_a_long_answer_is_not_cut_off(cluster_factory) -> None:
    """The client's deadline (timeout + 5 s) counts the controller's silence only: an
    answer of many messages, read slowly for longer than that in all, completes."""
    r = census(cluster_factory)
    n = 30
    unit = "[" + "; ".join([ALL] * n) + "]"      # an answer of about n / 2 messages
    with Client(r.cluster.address, timeout=1) as c:
        for replies in (c.stream, c.call):       # on the session, and a call of its own
            done = 0
            for reply in replies(unit):
                if reply.WhichOneof("body") == "done":
                    done += 1
                    time.sleep(0.3)              # about 0.6 s a message, 9 s in all
            assert done == n
        assert c.sessions_opened == 1
        assert len(c.execute(ALL)[0].records) == 20 and c.sessions_opened == 1


def test_an_async_client_made_before_its_loop_runs_works_on_that_loop(cluster_factory
                                                                      ) -> None:
    """Made at module level, used in `asyncio.run(main())`: the channel opens on that
    loop. Used again from another loop, it says so at once."""
    r = census(cluster_factory)
    c = AsyncClient(r.cluster.address, timeout=2)

    async def main() -> int:
        return len((await c.execute(ALL))[0].records)

    assert asyncio.run(main()) == 20
    with pytest.raises(ClientError) as got:
        asyncio.run(main())
    assert got.value.code == "FAILED_PRECONDITION" and "another event loop" in str(got.value)


def test_a_load_whose_controller_goes_silent_fails_after_its_timeout(cluster_factory) -> None:
    """A load has no deadline of its own (it may run for hours), but a controller that
    owes it an answer and says nothing for timeout + 5 s fails it, as it fails a request,
    instead of leaving it waiting."""
    from tests.test_bulk_load import ATTRS, census_row
    r = census(cluster_factory)
    go = threading.Event()

    def rows():
        for i in range(500):
            if i == 250:
                go.wait(60)             # the second batch only once the controller is held
            yield census_row(i), None

    client = Client(r.cluster.address, timeout=1.0)
    acks: list[int] = []
    failed: list[ClientError] = []

    def run() -> None:
        try:
            for done in client.load("CENSUS", ATTRS, rows(), chunk=250):
                acks.append(done.stats.records_retrieved)
        except ClientError as e:
            failed.append(e)

    loading = threading.Thread(target=run)
    loading.start()
    controller = r.cluster.controller
    assert controller is not None
    try:
        deadline = time.monotonic() + 30
        while not acks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert acks == [250]
        controller.popen.send_signal(signal.SIGSTOP)
        go.set()
        loading.join(60)
    finally:
        controller.popen.send_signal(signal.SIGCONT)
        go.set()
    assert not loading.is_alive()
    assert [e.code for e in failed] == ["DEADLINE_EXCEEDED"], failed
    client.close()


def test_a_port_past_65535_is_refused_not_dialled_modulo() -> None:
    with pytest.raises(ClientError) as err:
        Client("127.0.0.1:99999")
    assert (err.value.code, str(err.value)) == (
        "INVALID_ARGUMENT", "127.0.0.1:99999: a port is at most 65535")


def test_status_asks_within_the_client_s_timeout_and_ten_seconds_at_most() -> None:
    """It asks the backends only whether they are up: a held controller fails it at the
    client's timeout when that is shorter, and at 10 s when it is longer."""
    asked: list[float] = []

    class Stub:
        def Status(self, request: object, timeout: float) -> str:
            asked.append(timeout)
            return "status"

    for timeout, used in ((1.0, 1.0), (120.0, 10.0)):
        client = Client("127.0.0.1:1", timeout=timeout)
        client.stub = Stub()  # type: ignore[assignment]
        assert client.status() == "status"
        client.close()
        assert asked[-1] == used
