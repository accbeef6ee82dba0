"""A backend joins a running cluster whatever happens around its admission: a new
backend whose first bus is cut while it stores the cluster's id takes the next one; no
reconnection opens a bus while the set of backends changes; and an admission that fails
part-way leaves no backend on the set as it was before, so once every backend is back
every unit is answered by all of them."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from backend.links import IigClient, PeerLinks
from backend.node import BackendNode
from backend.server import BackendServicer
from backend.store import Store
from controller.bus import BackendLink
from controller.coordinator import Coordinator
from mbds.cluster import _on_old_port
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import CLUSTER_KEY, EPOCH_KEY
from tests.conftest import CENSUS_YAML
from tests.test_members_kept import _execute, backend
from tests.test_membership import _until

COUNT = "RETRIEVE (FILE = Census) (COUNT(CITY))"
# Five predicates: with four backends the descriptor search is split over all of them.
SPLIT = ("RETRIEVE ((FILE = Census) and (POP >= 0) and (POP < 5000) and (STATE = CA) "
         "and (CITY != nowhere)) (COUNT(CITY))")


def test_a_backend_keeps_one_cluster_id_and_names_it_against_another(tmp_path: Path
                                                                      ) -> None:
    """The cluster's id is kept once: kept again with the same id it stays as it is;
    another id is refused, naming the one kept."""
    store = Store(tmp_path / "backend.db")
    conn = store.writer()
    Store.join_cluster(conn, "c-one")
    Store.join_cluster(conn, "c-one")
    assert store.cluster() == "c-one"
    with pytest.raises(ValueError, match="it already belongs to cluster c-one"):
        Store.join_cluster(conn, "c-two")
    assert store.cluster() == "c-one"


# --------------------------------------------------- a bus cut while joining --
class Watched(BackendServicer):
    """The servicer, with the task serving each Bus call kept."""

    def __init__(self, node: BackendNode) -> None:
        super().__init__(node)
        self.handlers: list[asyncio.Task] = []

    async def Bus(self, request_iterator: AsyncIterator[pb.BusBatch],
                  context: grpc.aio.ServicerContext) -> AsyncIterator[pb.BackendReplies]:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.append(task)
        async for replies in super().Bus(request_iterator, context):
            yield replies


async def _quiet() -> AsyncIterator[pb.BusBatch]:
    """A bus down stream that sends nothing and stays open."""
    await asyncio.Event().wait()
    yield pb.BusBatch()          # never reached


@pytest.mark.parametrize("next_epoch", ["e1", "e2"], ids=["same-controller",
                                                          "next-controller"])
def test_a_bus_cut_while_the_backend_keeps_its_cluster_id_leaves_it_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, next_epoch: str) -> None:
    """A new backend's first bus, cut by its controller while the backend's writer stores
    the cluster's id, leaves the id on disk and no bus open: the next bus, from the same
    controller (epoch e1) or one started since (e2), is taken and names the cluster."""
    entered, release = threading.Event(), threading.Event()
    keep = Store.join_cluster

    def held(conn: sqlite3.Connection, cluster: str) -> None:
        if not entered.is_set():             # the first bus's: held while it runs
            entered.set()
            assert release.wait(30)
        keep(conn, cluster)
    monkeypatch.setattr(Store, "join_cluster", staticmethod(held))

    async def scenario() -> None:
        node = BackendNode("b0", Store(tmp_path / "backend.db"), peers=PeerLinks(),
                           iig=IigClient("b0"))
        servicer = Watched(node)
        server = grpc.aio.server()
        rpc.add_BackendServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        stub = rpc.BackendStub(channel)
        cluster = uuid.uuid4().hex
        try:
            first = stub.Bus(_quiet(), metadata=((CLUSTER_KEY, cluster), (EPOCH_KEY, "e1")))
            async with asyncio.timeout(30):   # the writer runs the id's job, held
                while not entered.is_set():
                    await asyncio.sleep(0.01)
            first.cancel()
            await _until(lambda: bool(servicer.handlers) and servicer.handlers[0].done(),
                         "end of the first bus's call")
            release.set()
            await asyncio.wrap_future(node.writer.submit(lambda conn: None))
            with closing(sqlite3.connect(tmp_path / "backend.db")) as conn:
                assert conn.execute("SELECT value FROM meta WHERE key = 'cluster'"
                                    ).fetchall() == [(cluster,)]   # kept on disk
            assert (await stub.Hello(pb.HelloRequest())).bus_epoch == ""

            second = stub.Bus(_quiet(), metadata=((CLUSTER_KEY, cluster),
                                                  (EPOCH_KEY, next_epoch)))
            reply = pb.HelloReply()
            async with asyncio.timeout(30):
                while not second.done():
                    reply = await stub.Hello(pb.HelloRequest())
                    if reply.bus_epoch and reply.cluster:     # taken, and joined
                        break
                    await asyncio.sleep(0.01)
            assert not second.done(), (await second.code(), await second.details())
            assert (reply.bus_epoch, reply.cluster) == (next_epoch, cluster)
            second.cancel()
        finally:
            release.set()
            await channel.close()
            await server.stop(0)
            node.writer.shutdown()

    asyncio.run(scenario())


# ------------------------------------------------------ one bus at a time --
class WatchedLock(asyncio.Lock):
    """A lock that keeps the tasks that found it held."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[asyncio.Task | None] = []

    async def acquire(self) -> bool:
        if self.locked():
            self.waited.append(asyncio.current_task())
        return await super().acquire()


def test_no_reconnection_opens_a_bus_while_a_backend_is_admitted(tmp_path: Path) -> None:
    """While a backend is admitted, a reconnection (as `status` starts, outside any
    traffic unit) waits for the admission: every bus is opened by the admission alone,
    once, and the new backend serves the controller's bus."""
    procs = [backend(tmp_path / f"b{i}") for i in range(3)]

    async def scenario() -> None:
        addrs = [p.wait_ready(30) for p in procs]
        c = Coordinator(addrs[:2], connect_timeout=10)
        await c.start()
        await c.define(CENSUS_YAML)
        m = c.membership
        m._connecting = lock = WatchedLock()
        joining, go = asyncio.Event(), asyncio.Event()
        admit: asyncio.Task | None = None
        sync = m._sync

        async def held_sync(link: BackendLink, digest: str) -> None:
            if asyncio.current_task() is admit and not go.is_set():
                joining.set()              # the set arranged, no bus opened yet
                await go.wait()
            await sync(link, digest)
        m._sync = held_sync  # type: ignore[method-assign]
        opened: list[tuple[str, asyncio.Task | None]] = []
        bus_open = c.bus.open

        def counted(link: BackendLink) -> None:
            opened.append((link.name, asyncio.current_task()))
            bus_open(link)
        c.bus.open = counted  # type: ignore[method-assign]

        admit = asyncio.create_task(c.add_backends([addrs[2]]))
        async with asyncio.timeout(30):
            await joining.wait()
        assert [(x.name, x.up) for x in c.links] == [("b0", True), ("b1", True),
                                                     ("b2", False)]
        reconnect = asyncio.create_task(c.ensure_up())
        await _until(lambda: reconnect.done() or reconnect in lock.waited,
                     "reconnection waiting or done")
        assert not reconnect.done() and opened == [], opened
        go.set()
        async with asyncio.timeout(30):
            await admit
            await reconnect
        assert opened == [(n, admit) for n in ("b0", "b1", "b2")], opened
        await _buses_served(c)
        [res] = await _execute(c, COUNT)
        assert [b["backend"] for b in res.stats["backends"]] == ["b0", "b1", "b2"]
        await c.close()

    try:
        asyncio.run(scenario())
    finally:
        for p in procs:
            p.stop()


async def _buses_served(c: Coordinator) -> None:
    """Every backend serves this controller's bus."""
    async with asyncio.timeout(30):
        for link in c.links:
            while (await link.hello(10)).bus_epoch != c.bus.epoch:
                await asyncio.sleep(0.01)


# ------------------------------------------------ an admission cut short --
def test_an_admission_cut_short_leaves_no_bus_on_the_old_set(tmp_path: Path) -> None:
    """An admission that fails part-way (another backend down past the connect timeout)
    keeps the new backend in the set and reopens every bus with it: once the down
    backend is back, a unit whose descriptor search is split over all four backends is
    answered by all of them."""
    procs = [backend(tmp_path / f"b{i}") for i in range(3)]

    async def scenario() -> None:
        addrs = [p.wait_ready(30) for p in procs]
        c = Coordinator(addrs, connect_timeout=1, timeout=10)
        await c.start()
        await c.define(CENSUS_YAML)
        for i in range(8):
            await _execute(c, f"INSERT (<FILE, Census>, <CITY, c{i}>, <POP, {i}>, "
                              "<STATE, CA>)")
        procs[1].stop()
        await _until(lambda: not c.links[1].up, "b1's bus seen broken")
        procs.append(backend(tmp_path / "b3"))
        with pytest.raises(BackendUnavailable, match=r"backend b1 \("):
            await c.add_backends([procs[-1].wait_ready(30)])
        assert [x.name for x in c.links] == ["b0", "b1", "b2", "b3"]

        def start(port: int) -> None:
            procs[1] = backend(tmp_path / "b1", f"127.0.0.1:{port}")
            procs[1].wait_ready(30)
        await asyncio.to_thread(_on_old_port, start, addrs[1])
        async with asyncio.timeout(30):
            while True:                  # the first tries may find b1 still starting
                try:
                    await c.ensure_up()
                    break
                except BackendUnavailable:
                    await asyncio.sleep(0.1)
        for text in (SPLIT, SPLIT, COUNT):
            [res] = await _execute(c, text)
            assert res.records == [{"COUNT(CITY)": 8}], (text, res.records)
            assert [b["backend"] for b in res.stats["backends"]] == ["b0", "b1", "b2", "b3"]
        await _execute(c, "INSERT (<FILE, Census>, <CITY, late>, <POP, 9>, <STATE, CA>)")
        [res] = await _execute(c, SPLIT)
        assert res.records == [{"COUNT(CITY)": 9}]
        await c.close()

    try:
        asyncio.run(scenario())
    finally:
        for p in procs:
            p.stop()
