"""Large requests enter the controller's service within a bound on their bytes
(controller/admission.py): FIFO, one larger than the bound alone, a waiter that gives
up leaving no trace; small requests never wait."""

from __future__ import annotations

import asyncio

import pytest

from controller import admission
from controller.admission import Admission
from controller.coordinator import Coordinator
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from tests.conftest import CENSUS_YAML


def test_admission_is_fifo_within_its_bound() -> None:
    async def main() -> None:
        a = Admission(100)
        assert await a.enter(60) == 60
        second = asyncio.ensure_future(a.enter(60))
        third = asyncio.ensure_future(a.enter(10))      # fits, but waits its turn
        await asyncio.sleep(0)
        assert not second.done() and not third.done() and a.used == 60
        a.leave(60)
        await asyncio.sleep(0)
        assert second.result() == 60 and third.result() == 10 and a.used == 70
        big = asyncio.ensure_future(a.enter(10_000))    # larger than the bound: alone
        await asyncio.sleep(0)
        assert not big.done()
        a.leave(60)
        a.leave(10)
        await asyncio.sleep(0)
        assert big.result() == 100 and a.used == 100
        gone = asyncio.ensure_future(a.enter(5))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        a.leave(100)
        assert a.used == 0 and not a.waiting

    asyncio.run(main())


def test_large_requests_wait_for_room_and_small_ones_do_not(monkeypatch) -> None:
    """Two 0.6 MiB INSERTs with room for one: the second's unit starts only once the
    first has ended; a small request runs beside the first."""
    async def main() -> None:
        c = Coordinator([])
        c.iig.define(parse_definition(CENSUS_YAML))
        c.started = True
        c.admission = Admission(admission.LARGE)
        monkeypatch.setattr(admission, "LARGE", 600_000)
        running: list[str] = []
        release = asyncio.Event()

        async def run(prepared, transaction, update=None, timeout=None, arrived=None):
            running.append(prepared[0].op)
            await release.wait()
            yield pb.ExecuteReplies()

        monkeypatch.setattr(c, "run", run)
        body = "b" * 700_000
        big = f"INSERT (<FILE, Census>, <CITY, x>) {{{body}}}"
        first = asyncio.ensure_future(_drain(c.execute(big)))
        second = asyncio.ensure_future(_drain(c.execute(big)))
        small = asyncio.ensure_future(_drain(c.execute("RETRIEVE (FILE = Census) (CITY)")))
        for _ in range(5):
            await asyncio.sleep(0)
        assert running == ["INSERT", "RETRIEVE"]         # the second large one waits
        release.set()
        await asyncio.gather(first, second, small)
        assert running == ["INSERT", "RETRIEVE", "INSERT"] and c.admission.used == 0

    asyncio.run(main())


async def _drain(answer) -> None:
    async for _ in answer:
        pass
