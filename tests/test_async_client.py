"""`AsyncClient`: the synchronous client's Session protocol for asyncio code — answers
in order over one stream, a failed request failing alone, a request made while another
is read going as a call of its own, a request left mid-answer closing its session."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from mbds.async_client import AsyncClient
from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML

INSERT = "INSERT (<FILE, Census>, <CITY, '{c}'>, <POP, {p}>, <STATE, CA>, <AREA, 1.5>)"
ALL = "RETRIEVE (FILE = Census) (CITY, POP)"


@pytest.fixture
def address(cluster_factory) -> str:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(INSERT.format(c=f"c{i}", p=i * 100)
                                     for i in range(20)) + "]")
    return r.cluster.address


def test_one_session_answers_like_the_sync_client_and_a_failure_fails_alone(
        address: str) -> None:
    with Client(address) as sync:
        expected = sync.execute(ALL)[0]

    async def run() -> None:
        async with AsyncClient(address, timeout=60) as c:
            await c.connect()
            [got] = await c.execute(ALL)
            assert (got.op, got.columns, got.stats["records_retrieved"]) == (
                expected.op, expected.columns, 20)
            assert sorted(map(repr, got.records)) == sorted(map(repr, expected.records))
            for text, words in [("RETRIEVE (FILE = Census (CITY)", "syntax error"),
                                ("RETRIEVE (FILE = Nowhere) (CITY)", "unknown file")]:
                with pytest.raises(ClientError) as e:
                    await c.execute(text)
                assert e.value.code == "INVALID_ARGUMENT" and words in str(e.value)
            [ins] = await c.execute(INSERT.format(c="new", p=1))
            assert ins.op == "INSERT" and ins.stats["records_retrieved"] == 1
            [after] = await c.execute(ALL)
            assert len(after.records) == 21
            assert c.sessions_opened == 1       # every request above went on one stream
    asyncio.run(run())


def test_concurrent_requests_and_leaving_mid_answer(address: str) -> None:
    async def run() -> None:
        async with AsyncClient(address, timeout=60) as c:
            # Two at once on one client: the second goes as an Execute call of its own.
            a, b = await asyncio.gather(c.execute(ALL), c.execute(ALL))
            assert len(a[0].records) == len(b[0].records) == 20
            assert c.sessions_opened == 1
            # Cancelled before its answer (a timeout, say): that session is left
            # mid-answer and dropped; the next request opens another.
            task = asyncio.create_task(c.execute(ALL))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            [again] = await c.execute(ALL)
            assert len(again.records) == 20 and c.sessions_opened == 2
    asyncio.run(run())


def test_a_session_a_controller_restart_broke_is_replaced_and_the_request_runs_once(
        cluster_factory) -> None:
    """The controller killed and started again between two requests: the kept session is
    dead, which grpc.aio learns only when the next request's write fails. Nothing of that
    request reached the controller, so it goes again on a fresh session and runs once;
    with the controller down it fails UNAVAILABLE and is not sent again."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)

    async def run() -> None:
        async with AsyncClient(r.cluster.address, timeout=60) as c:
            assert (await c.execute(ALL))[0].records == []
            r.cluster.controller.kill()
            with pytest.raises(ClientError) as e:
                await c.execute(INSERT.format(c="down", p=1))
            # Named as not sent when the write fails; when the dead connection takes the
            # write (the peer's reset not yet in) and fails the read, the client cannot
            # know and says so. Either way it is not sent again ("down" is nowhere below).
            assert e.value.code == "UNAVAILABLE" and (
                "not sent" in str(e.value) or "may or may not have run" in str(e.value))
            r.cluster.restart_controller()
            await c.connect()       # past the channel's back-off from the failed connect
            [ins] = await c.execute(INSERT.format(c="back", p=2))
            assert ins.op == "INSERT" and ins.stats["records_retrieved"] == 1
            r.cluster.controller.kill()
            r.cluster.restart_controller()
            [ins] = await c.execute(INSERT.format(c="again", p=3))
            assert ins.op == "INSERT"
            [after] = await c.execute(ALL)
            assert sorted(x["CITY"] for x in after.records) == ["again", "back"]
    asyncio.run(run())


def test_a_request_the_controller_may_have_run_is_not_sent_again(cluster_factory) -> None:
    """The controller crashes after its commit decision, before answering: the unit was
    received and runs to its commit on the controller's return, so the client must not
    send it again (it would be stored twice); it fails UNAVAILABLE, outcome unknown."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.cluster.controller.kill()
    r.cluster.restart_controller(env={"MBDS_FAULTS": "controller.after_decision=crash"})
    unit = "[" + "; ".join(INSERT.format(c=f"u{i}", p=i) for i in range(2)) + "]"

    async def run() -> None:
        async with AsyncClient(r.cluster.address, timeout=60) as c:
            assert (await c.execute(ALL))[0].records == []
            with pytest.raises(ClientError) as e:
                await c.execute(unit)
            assert e.value.code == "UNAVAILABLE" and "may or may not have run" in str(e.value)
            assert r.cluster.controller.popen.wait(30) == 137
            r.cluster.restart_controller()
            [after] = await c.execute(ALL)
            assert sorted(x["CITY"] for x in after.records) == ["u0", "u1"]
            assert c.sessions_opened == 2
    asyncio.run(run())


def test_a_client_closed_while_a_request_is_written_names_it(address: str) -> None:
    """close() while a request is on its way onto the session: that request raises
    CANCELLED, named as a close, never an error from inside the client."""
    async def run() -> None:
        c = AsyncClient(address)
        await c.execute("RETRIEVE (FILE = Census) (CITY)")     # the session is open
        writing = asyncio.create_task(c.execute("RETRIEVE (FILE = Census) (CITY)"))
        await asyncio.sleep(0)                                  # awaiting its write
        await c.close()
        with pytest.raises(ClientError) as err:
            await writing
        assert err.value.code == "CANCELLED", err.value

    asyncio.run(run())


def test_a_client_collected_unclosed_has_its_session_closed(address: str) -> None:
    """An AsyncClient dropped without `close()`: once collected, its session is
    cancelled (so the controller's side of it ends) and its channel closed, on its
    loop, with a ResourceWarning; the loop goes on serving other clients."""
    import gc

    async def run() -> None:
        c = AsyncClient(address, timeout=60)
        await c.execute(ALL)
        session, channel = c._session, c._channel
        assert session is not None and not session.done()
        with pytest.warns(ResourceWarning, match="collected unclosed"):
            del c
            gc.collect()
        for _ in range(100):
            if session.done():
                break
            await asyncio.sleep(0.05)
        assert session.cancelled()
        with pytest.raises(grpc.aio.UsageError, match="closed"):   # it opens no call
            await channel.unary_unary("/mbds.Controller/Status")(b"", timeout=5)
        async with AsyncClient(address, timeout=60) as other:
            assert len((await other.execute(ALL))[0].records) == 20
    asyncio.run(run())
