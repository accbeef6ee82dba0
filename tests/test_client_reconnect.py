"""A client reaches a controller that was down for a while as soon as it is back: the
channel's reconnect backoff is held to about a second (`mbds.client.RECONNECT`), where
gRPC's own grows to two minutes and would keep every client of the process failing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from mbds.async_client import AsyncClient
from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML

T = TypeVar("T")
INSERT = "INSERT (<FILE, Census>, <CITY, 'kept'>, <POP, 10>, <STATE, CA>, <AREA, 1.5>)"
ALL = "RETRIEVE (FILE = Census) (CITY)"
# Long enough for gRPC's default backoff to grow past ten seconds.
OUTAGE = 20.0
# The tries a client gets once a fresh one is served, 0.2 s apart: with the backoff held
# to a second they are several times what it needs.
TRIES = 15


def served(ask: Callable[[], T]) -> T:
    """The answer to `ask` within TRIES tries; a try may fail UNAVAILABLE only."""
    for _ in range(TRIES - 1):
        try:
            return ask()
        except ClientError as e:
            assert e.code == "UNAVAILABLE", e
        time.sleep(0.2)
    return ask()


def test_clients_reach_a_controller_back_after_a_long_outage(cluster_factory) -> None:
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.client.execute(INSERT)
    address = r.cluster.address
    loop = asyncio.new_event_loop()
    sync, aio = Client(address, timeout=10), AsyncClient(address, timeout=10)
    try:
        assert [x["CITY"] for x in sync.execute(ALL)[0].records] == ["kept"]
        assert [x["CITY"] for x in loop.run_until_complete(aio.execute(ALL))[0].records
                ] == ["kept"]
        assert r.cluster.controller is not None
        r.cluster.controller.stop()
        # Both clients keep asking while it is down, as a user would.
        end = time.monotonic() + OUTAGE
        while time.monotonic() < end:
            for ask in (lambda: sync.execute(ALL),
                        lambda: loop.run_until_complete(aio.execute(ALL))):
                try:
                    ask()
                    raise AssertionError("a request was answered with the controller down")
                except ClientError as e:
                    assert e.code == "UNAVAILABLE", e
            time.sleep(0.5)
        r.cluster.restart_controller()
        # A channel of its own, sharing no connection (nor its backoff) with the two.
        with Client(address, timeout=10,
                    channel_options=[("grpc.use_local_subchannel_pool", 1)]) as fresh:
            assert [x["CITY"] for x in fresh.execute(ALL)[0].records] == ["kept"]
        [res] = served(lambda: loop.run_until_complete(aio.execute(ALL)))
        assert [x["CITY"] for x in res.records] == ["kept"]
        [res] = served(lambda: sync.execute(ALL))
        assert [x["CITY"] for x in res.records] == ["kept"]
    finally:
        sync.close()
        loop.run_until_complete(aio.close())
        loop.close()
