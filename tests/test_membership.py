"""A backend joining a running system (scale 3 → 4): admitted between traffic units, it
gets the directory, takes new records where IIG's rule puts them, and nothing already
stored moves or is lost. A peer that restarts leaves nothing of the stream to it behind."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from backend.links import PeerLinks
from controller.coordinator import Coordinator
from controller.membership import natural_key
from mbds.client import collect
from mbds.cluster import Proc, _on_old_port
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb
from tests.conftest import CENSUS_YAML

COUNT = "RETRIEVE (FILE = Census) (COUNT(CITY))"
# Records share clusters (CITY is type C; every POP here is in the range [0, 999]), so
# placing by a cluster's own counts and placing by totals disagree. Before the fourth
# backend: c0..c4 six times each; after it: c3, c4 (stored) and c5 (new) in turn.
FIRST = [(f"c{i % 5}", i) for i in range(30)]
SECOND = [(f"c{i % 3 + 3}", i) for i in range(30, 70)]


def test_natural_order_of_backend_names() -> None:
    assert sorted(["b10", "b2", "b1"], key=natural_key) == ["b1", "b2", "b10"]


def expected_holdings() -> tuple[dict[str, set[tuple[str, int]]],
                                 dict[str, set[tuple[str, int]]]]:
    """Each backend's records after the first 30 (three backends) and after all 70,
    placed by IIG's rule written out: the backend with the fewest records of the
    record's cluster, then the fewest records overall, then the first."""
    counts: dict[str, Counter[str]] = {}        # cluster (CITY) -> backend -> records
    totals: Counter[str] = Counter()
    held: dict[str, set[tuple[str, int]]] = {f"b{i}": set() for i in range(4)}

    def place(records: list[tuple[str, int]], backends: list[str]) -> None:
        for rec in records:
            here = counts.setdefault(rec[0], Counter())
            b = min(backends, key=lambda x: (here[x], totals[x], backends.index(x)))
            here[b] += 1
            totals[b] += 1
            held[b].add(rec)

    place(FIRST, ["b0", "b1", "b2"])
    first = {b: set(recs) for b, recs in held.items() if b != "b3"}
    place(SECOND, ["b0", "b1", "b2", "b3"])
    return first, held


def holdings(data: Path, names: list[str]) -> dict[str, set[tuple[str, int]]]:
    """Each backend's records (CITY, POP), read from its own SQLite file."""
    out = {}
    for name in names:
        with closing(sqlite3.connect(f"file:{data / name / 'backend.db'}?mode=ro",
                                     uri=True)) as conn:
            out[name] = set(conn.execute('SELECT "CITY", "POP" FROM "r_CENSUS"').fetchall())
    return out


async def _execute(c: Coordinator, text: str) -> list:
    return collect([r async for batch in c.execute(text) for r in batch.replies])


async def _until(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not cond():
                await asyncio.sleep(0)
    except TimeoutError:
        raise AssertionError(f"no {what} within {timeout:g} s") from None


def test_scale_up_admits_a_backend(tmp_path: Path) -> None:
    procs = [Proc(f"b{i}", ["backend", "--listen", "127.0.0.1:0", "--data-dir",
                            str(tmp_path / f"b{i}")]) for i in range(3)]
    want_first, want_all = expected_holdings()
    want_new = {b: len(want_all[b] - want_first.get(b, set())) for b in want_all}
    # The rule, worked out: b3 takes the most of the new records, not all of them.
    assert want_new == {"b0": 9, "b1": 9, "b2": 8, "b3": 14}

    async def scenario() -> None:
        addrs = [p.wait_ready(30) for p in procs]
        c = Coordinator(addrs, connect_timeout=10)
        await c.start()
        await c.define(CENSUS_YAML)
        for city, pop in FIRST:
            await _execute(c, f"INSERT (<FILE, Census>, <CITY, {city}>, <POP, {pop}>)")
        before = holdings(tmp_path, ["b0", "b1", "b2"])
        assert before == want_first
        procs.append(Proc("b3", ["backend", "--listen", "127.0.0.1:0", "--data-dir",
                                 str(tmp_path / "b3")]))
        new = procs[-1].wait_ready(30)
        # Traffic keeps flowing while the new backend is admitted: queries on the bus
        # when admission starts are answered by the three, queries made while it holds
        # new traffic units wait for it and are answered by all four.
        early = [asyncio.create_task(_execute(c, COUNT)) for _ in range(3)]
        await _until(lambda: c.membership._inflight == len(early), "early queries on the bus")
        admit = asyncio.create_task(c.add_backends([new]))
        await _until(lambda: not c.membership._open.is_set(), "admission holding new units")
        held = [asyncio.create_task(_execute(c, COUNT)) for _ in range(3)]
        async with asyncio.timeout(60):
            await admit
            answers = await asyncio.gather(*early, *held)
        for i, [res] in enumerate(answers):
            assert res.records == [{"COUNT(CITY)": 30}], (i, res.records)
            assert [b["backend"] for b in res.stats["backends"]] == (
                ["b0", "b1", "b2"] if i < len(early) else ["b0", "b1", "b2", "b3"]), i
        assert [x.name for x in c.links] == ["b0", "b1", "b2", "b3"]

        for city, pop in SECOND:
            await _execute(c, f"INSERT (<FILE, Census>, <CITY, {city}>, <POP, {pop}>)")
        after = holdings(tmp_path, ["b0", "b1", "b2", "b3"])
        # Nothing stored moved: each backend still holds exactly the records it had.
        assert {b: {r for r in recs if r[1] < 30} for b, recs in after.items()} == {
            **before, "b3": set()}
        # Every new record is where IIG's rule puts it.
        assert after == want_all
        [res] = await _execute(c, "RETRIEVE ((FILE = Census) and (POP >= 30)) (CITY)")
        assert {b["backend"]: b["records"] for b in res.stats["backends"]} == want_new
        [res] = await _execute(c, "RETRIEVE (FILE = Census) (CITY, POP)")
        assert sorted((r["CITY"], r["POP"]) for r in res.records) == sorted(FIRST + SECOND)
        digests = {(await x.hello(5)).directory_digest for x in c.links}
        assert digests == {c.directory.digest()}
        await c.close()

    try:
        asyncio.run(scenario())
    finally:
        for p in procs:
            p.stop()


def test_a_controller_meeting_its_backends_tells_clients_to_come_back() -> None:
    """Before it has met its backends the controller knows no file: a request, a load,
    a definition and a status are answered UNAVAILABLE ("starting"), which a client
    retries, not INVALID_ARGUMENT ("unknown file"), which it would not."""
    async def main() -> None:
        c = Coordinator([])
        with pytest.raises(BackendUnavailable, match="the controller is starting"):
            c.execute("RETRIEVE (FILE = Census) (CITY)")
        with pytest.raises(BackendUnavailable, match="the controller is starting"):
            c.check_load(pb.LoadRequest(file="CENSUS"))
        for call in (c.define(CENSUS_YAML), c.status()):
            with pytest.raises(BackendUnavailable, match="the controller is starting"):
                await call
        assert BackendUnavailable.code == grpc.StatusCode.UNAVAILABLE

    asyncio.run(main())


def test_a_peer_restarted_leaves_no_stream_reader_pending(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A backend's id stream to a peer ends when the peer stops: the task gRPC runs to
    read the stream's messages ends with it, rather than being collected pending ("Task
    was destroyed but it is pending", "aclose(): asynchronous generator is already
    running"), and the stream to the peer back at its address carries the next ids."""
    def peer(listen: str = "127.0.0.1:0") -> Proc:
        return Proc("b1", ["backend", "--listen", listen, "--data-dir", str(tmp_path / "b1")])

    def ends() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "mbds.peers"]

    procs = [peer()]

    def again(port: int) -> None:
        procs.append(peer(f"127.0.0.1:{port}"))
        procs[-1].wait_ready(30)

    async def scenario() -> None:
        address = procs[0].wait_ready(30)
        links = PeerLinks()
        links.configure(["127.0.0.1:1", address], 0)    # this backend is index 0
        try:
            for seq in (1, 2):
                links.broadcast(pb.DescriptorIds(seq=seq))
                await _until(links.flushed, f"ids {seq} on the stream to the peer")
                procs[-1].stop()
                await _until(lambda n=seq: len(ends()) == n, f"the end of stream {seq}")
                for _ in range(3):      # what is left of the ended stream is collected
                    await asyncio.sleep(0.05)
                    gc.collect()
                _on_old_port(again, address)
        finally:
            await links.close()

    with caplog.at_level(logging.INFO):
        try:
            asyncio.run(scenario())
        finally:
            for p in procs:
                p.stop()
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
