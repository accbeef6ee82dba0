"""A backend's place in its cluster is its data: one that has served the cluster and
comes back without that data (an empty or replaced data dir) is refused, naming it,
rather than answering without its records; so is a second live backend of one name.
Real backend processes, a controller in the test's own process."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections.abc import Callable, Coroutine
from contextlib import closing
from pathlib import Path

import pytest

from controller.coordinator import Coordinator
from mbds.client import collect
from mbds.cluster import Proc, _on_old_port
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb
from tests.conftest import CENSUS_YAML
from tests.test_metrics import scrape, series

COUNT = "RETRIEVE (FILE = Census) (COUNT(CITY))"


async def _execute(c: Coordinator, text: str) -> list:
    return collect([r async for batch in c.execute(text) for r in batch.replies])


def buses(metrics_url: str, want: dict[str, float], timeout: float = 30) -> None:
    """Until the controller's `mbds_backend_up` is `want`, by backend."""
    deadline = time.monotonic() + timeout
    while (got := {dict(labels)["backend"]: v for labels, v in
                   series(scrape([metrics_url]), "mbds_backend_up").items()}) != want:
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def backend(data: Path, listen: str = "127.0.0.1:0") -> Proc:
    return Proc(data.name, ["backend", "--listen", listen, "--data-dir", str(data)])


def run(tmp_path: Path,
        scenario: Callable[[list[Proc], list[str]], Coroutine[None, None, None]]) -> None:
    """`scenario(procs, addresses)` on two backend processes, stopped whatever happens."""
    procs = [backend(tmp_path / f"b{i}") for i in range(2)]
    try:
        asyncio.run(scenario(procs, [p.wait_ready(30) for p in procs]))
    finally:
        for p in procs:
            p.stop()


async def census(addrs: list[str], log: Path) -> Coordinator:
    """A controller started on `addrs`, its decisions in `log`, with ten records."""
    c = Coordinator(addrs, connect_timeout=10, log_path=log / "decisions.db")
    await c.start()
    await c.define(CENSUS_YAML)
    for i in range(10):
        await _execute(c, f"INSERT (<FILE, Census>, <CITY, c{i}>, <POP, {i}>)")
    return c


def test_a_backend_back_with_an_empty_data_dir_is_refused(tmp_path: Path) -> None:
    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = await census(addrs, tmp_path / "c")
        procs[1].stop()
        shutil.rmtree(tmp_path / "b1")               # a new, empty disk
        procs[1] = backend(tmp_path / "b1", addrs[1])
        procs[1].wait_ready(30)
        errors = []
        for _ in range(100):     # the first finds the old bus broken, the next meets b1
            with pytest.raises(BackendUnavailable) as err:      # never an answer
                await _execute(c, COUNT)
            errors.append(str(err.value))
            if "holds no data" in errors[-1]:
                break
            await asyncio.sleep(0.1)
        assert errors[-1].startswith("backend b1 (") and \
            "holds no data of this cluster, though it has served it" in errors[-1], errors
        await c.close()
        # A controller started again refuses it too (it would answer 5 of 10 records).
        again = Coordinator(addrs, connect_timeout=10, log_path=tmp_path / "c" / "decisions.db")
        with pytest.raises(BackendUnavailable, match="holds no data of this cluster"):
            await again.start()
        await again.close()

    run(tmp_path, scenario)


def test_a_second_live_backend_of_one_name_is_refused(tmp_path: Path) -> None:
    """A copy of b0's data dir started at another address while b0 serves (they would
    replace each other in turn): refused, and b0 keeps serving."""
    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = await census(addrs, tmp_path / "c")
        copy = tmp_path / "copy" / "b0"
        copy.mkdir(parents=True)
        with closing(sqlite3.connect(tmp_path / "b0" / "backend.db")) as src, \
                closing(sqlite3.connect(copy / "backend.db")) as dst:
            src.backup(dst)
        procs.append(backend(copy))
        with pytest.raises(BackendUnavailable) as err:
            await c.add_backends([procs[-1].wait_ready(30)])
        assert "two backends named b0 answer" in str(err.value), err.value
        assert [x.address for x in c.links] == addrs
        [res] = await _execute(c, COUNT)
        assert res.records == [{"COUNT(CITY)": 10}]
        await c.close()

    run(tmp_path, scenario)


def test_requests_while_a_backend_is_down_share_one_reconnection(tmp_path: Path) -> None:
    """Requests that come while the controller tries to reach a down backend take that
    try's failure (naming the backend) instead of each trying again in turn, 2 s
    apiece."""
    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = Coordinator(addrs, connect_timeout=10)
        await c.start()
        await c.define(CENSUS_YAML)
        procs[1].kill()
        link = c.links[1]
        async with asyncio.timeout(30):
            while link.up:                   # its bus seen broken
                await asyncio.sleep(0.01)
        hellos = 0
        hello = link.hello

        async def counted(timeout: float) -> pb.HelloReply:
            nonlocal hellos
            hellos += 1
            return await hello(timeout)
        link.hello = counted  # type: ignore[method-assign]
        results = await asyncio.gather(*(_execute(c, COUNT) for _ in range(10)),
                                       return_exceptions=True)
        assert all(isinstance(r, BackendUnavailable) and "backend b1" in str(r)
                   for r in results), results
        assert hellos <= 2, hellos
        await c.close()

    run(tmp_path, scenario)


def test_a_controller_that_lost_its_list_learns_the_backends_from_them(
        tmp_path: Path) -> None:
    """A controller whose --data-dir was lost, started with only some of the backends,
    is refused: each backend keeps the names of the cluster's backends from its bus
    hello (it served half the records, and kept a list of that half for good)."""
    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = await census(addrs, tmp_path / "c")
        await c.close()
        lost = Coordinator(addrs[:1], connect_timeout=10,
                           log_path=tmp_path / "new" / "decisions.db")
        with pytest.raises(BackendUnavailable, match="backend b1 of this cluster is not "
                                                     "among those met"):
            await lost.start()
        await lost.close()
        whole = Coordinator(addrs, connect_timeout=10,
                            log_path=tmp_path / "new" / "decisions.db")
        await whole.start()
        [res] = await _execute(whole, COUNT)
        assert res.records == [{"COUNT(CITY)": 10}]
        await whole.close()

    run(tmp_path, scenario)


def test_a_bus_hello_naming_backends_that_do_not_fit_its_peers_is_refused(
        tmp_path: Path) -> None:
    """The names a backend keeps come from the bus hello, checked: one per peer, each a
    data dir's name."""
    from backend import check
    from backend.links import IigClient, PeerLinks
    from backend.node import BackendNode
    from backend.state import BusOut
    from backend.store import Store

    async def scenario() -> None:
        node = BackendNode("b0", Store(tmp_path / "backend.db"), peers=PeerLinks(),
                           iig=IigClient("b0"))
        try:
            for names in ([""], ["b0", "b1"], ["x" * 256]):
                with pytest.raises(check.BadMessage, match="a bus hello naming"):
                    node.on_hello(pb.BusHello(epoch="e", backend_index=0,
                                              peers=["127.0.0.1:1"], members=names),
                                  BusOut("e"))
            node.on_hello(pb.BusHello(epoch="e", backend_index=0, peers=["127.0.0.1:1"],
                                      members=["b0"]), BusOut("e"))
        finally:
            node.writer.shutdown()

    asyncio.run(scenario())


def test_backends_naming_a_member_that_cannot_be_one_are_refused(tmp_path: Path) -> None:
    """The names a controller learns from its backends are checked as they come."""
    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = await census(addrs, tmp_path / "c")
        await c.close()
        procs[0].stop()
        with closing(sqlite3.connect(tmp_path / "b0" / "backend.db")) as conn, conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'members'", ('["", "b1"]',))
        procs[0] = backend(tmp_path / "b0", addrs[0])
        procs[0].wait_ready(30)
        fresh = Coordinator(addrs, connect_timeout=10, log_path=tmp_path / "new" / "d.db")
        with pytest.raises(BackendUnavailable, match="backend b0 names the cluster's "
                                                     "backends with a name empty"):
            await fresh.start()
        await fresh.close()

    run(tmp_path, scenario)


def test_backends_restarted_at_one_another_s_addresses_are_followed(cluster_factory) -> None:
    """Two backends stopped together come back each at the other's address (containers
    given their addresses anew): the first request after follows each name to its new
    address and is served, with every record, and a new unit reaches both."""
    r = cluster_factory(2, metrics_port=0)
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>, <STATE, CA>)"
        for i in range(6)) + "]")
    ports = [int((p.address or "").rsplit(":", 1)[1]) for p in r.cluster.backends]
    url = r.client.status().metrics_url
    for p in r.cluster.backends:
        p.stop()
    # Until the controller has seen both buses break: its metrics reconnect nothing.
    buses(url, {"b0": 0.0, "b1": 0.0})
    for i, port in ((0, ports[1]), (1, ports[0])):
        def start(port: int, i: int = i) -> None:
            r.cluster.backends[i] = r.cluster.start_backend(i, port)
        _on_old_port(start, f"127.0.0.1:{port}")
    [res] = r.client.execute("RETRIEVE (FILE = Census) (CITY)")
    assert sorted(x["CITY"] for x in res.records) == [f"c{i}" for i in range(6)]
    assert {b["backend"]: b["records"] for b in res.stats["backends"]} == {"b0": 3, "b1": 3}
    r.client.execute("INSERT (<FILE, Census>, <CITY, 'late'>, <POP, 9>, <STATE, NY>)")
    status = r.client.status()
    assert {b.name: b.address for b in status.backends} == {
        "b0": f"127.0.0.1:{ports[1]}", "b1": f"127.0.0.1:{ports[0]}"}
