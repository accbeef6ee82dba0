"""Bulk load by columnar batches: the wire form, REQP's check per batch, IIG's placement
per batch, the backend's check and insert, atomicity per batch, and `mbds load`'s bar."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from backend import check
from backend.load import insert
from backend.store import Store
from cli.database import load_progress, track_load
from cli.main import main as cli
from controller import load
from controller.iig import Iig
from loadgen import paper_db
from mbds import columns
from mbds.client import ClientError
from mbds.directory import Directory
from mbds.errors import SemanticError, TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.service import MAX_LOAD_RECORDS
from tests.conftest import CENSUS_YAML, Running
from tests.crashes import retry

ATTRS = ["CITY", "POP", "AREA", "STATE"]       # CENSUS's template order


def census_row(i: int) -> list[Any]:
    """Record i: POP in either range (or none), STATE of two B values or none, CITY one
    of 40 type-C values, AREA a float or null."""
    return [f"city{i % 40}", (i * 37) % 6000, None if i % 7 == 0 else i / 4,
            ["CA", "NY", "TX"][i % 3]]


def key(rec: Any) -> list[Any]:
    """A census record's directory values: FILE, then CITY, POP, STATE (template order)."""
    return ["CENSUS", rec[0], rec[1], rec[3]]


def census_iig() -> Iig:
    iig = Iig(Directory())
    iig.define(parse_definition(CENSUS_YAML))
    return iig


def chunk(rows: list[list[Any]], first: int = 1, attrs: list[str] = ATTRS,
          bodies: list[str | None] | None = None) -> pb.LoadRequest:
    return pb.LoadRequest(file="CENSUS", attributes=attrs, columns=columns.encode_batch(
        rows, len(attrs), first, bodies))


# ------------------------------------------------------------------ the wire form --
def test_columns_carry_every_kind_and_decode_to_the_records() -> None:
    rows = [census_row(i) for i in range(500)]
    batch = columns.encode_batch(rows, 4, 1, [None, "body"] * 250)
    kinds = [c.kind for c in batch.columns]
    # CITY has 40 distinct values (by dictionary), POP integers, AREA with nulls one
    # Value per record, STATE three values (by dictionary).
    assert kinds == [pb.STRING_REFS, pb.INTEGERS, pb.VALUES, pb.STRING_REFS]
    assert len(batch.columns[0].strings) == 40
    back = [columns.decode(c, 500) for c in batch.columns]
    assert [list(r) for r in zip(*back, strict=True)] == rows
    assert columns.decode(batch.bodies, 500) == [None, "body"] * 250
    unique = [[f"u{i}", i, float(i), "CA"] for i in range(10)]
    batch = columns.encode_batch(unique, 4, 1)
    # Distinct strings go one per record; one value for every record goes once.
    assert [c.kind for c in batch.columns] == [pb.STRINGS, pb.INTEGERS, pb.FLOATS,
                                               pb.CONSTANT]
    assert len(batch.columns[3].values) == 1
    back = [columns.decode(c, 10) for c in batch.columns]
    assert [list(r) for r in zip(*back, strict=True)] == unique
    # 1 == 1.0 == True: equal values of other kinds are not taken for one constant.
    mixed = columns.encode_batch([["a", 1, 1.0, "CA"], ["b", 1, 1, "CA"]], 4, 1)
    assert mixed.columns[2].kind == pb.VALUES
    assert columns.decode(mixed.columns[2], 2) == [1.0, 1]


def test_a_value_the_wire_cannot_carry_is_named_by_its_index() -> None:
    for bad, why in ((True, "booleans"), (1 << 70, "out of range")):
        with pytest.raises(columns.ColumnError, match=why) as e:
            columns.encode_batch([["a", 1, 1.0, "CA"], ["b", bad, 1.0, "CA"]], 4, 1)
        assert e.value.index == 1


# ------------------------------------------------------------ REQP, per batch --
def prepare(req: pb.LoadRequest) -> load.PreparedLoad:
    return load.prepare(census_iig().directory, req)


def test_a_batch_is_checked_per_column_and_names_the_bad_record() -> None:
    rows = [census_row(i) for i in range(300)]
    assert prepare(chunk(rows, first=1001)).batch.count == 300  # type: ignore[union-attr]
    rows[7][1] = "many"               # POP is integer: the column is now of mixed kinds
    with pytest.raises(SemanticError) as refused:
        prepare(chunk(rows, first=1001))
    assert str(refused.value) == ("record 1008: type mismatch: CENSUS.POP is integer, got "
                                  "string 'many' (its batch, records 1001-1300, is not "
                                  "loaded)")
    floats = [census_row(i) for i in range(10)]
    for r in floats:
        r[1] = 2.5                     # a whole column of floats for an integer attribute
    with pytest.raises(SemanticError, match=r"record 1: .*POP is integer, got float"):
        prepare(chunk(floats))
    nan = [census_row(i) for i in range(10)]
    for r in nan:
        r[2] = 1.5
    nan[4][2] = float("nan")
    with pytest.raises(SemanticError, match=r"record 5: nan is not a finite number"):
        prepare(chunk(nan))


def test_a_batch_with_bad_names_or_shapes_is_refused() -> None:
    rows = [census_row(i) for i in range(5)]
    with pytest.raises(SemanticError, match="unknown attribute NOPE"):
        prepare(chunk([r[:1] for r in rows], attrs=["NOPE"]))
    with pytest.raises(SemanticError, match="CITY appears twice"):
        prepare(chunk([r[:2] for r in rows], attrs=["CITY", "city"]))
    short = chunk(rows)
    del short.columns.columns[1].ints[-1]
    with pytest.raises(SemanticError, match="record 5: CENSUS.POP: 4 values for 5 records"):
        prepare(short)
    refs = chunk([census_row(i % 2) for i in range(6)])      # CITY by dictionary
    refs.columns.columns[0].refs[3] = 9
    with pytest.raises(SemanticError, match="record 4: .*reference 9 beyond"):
        prepare(refs)
    placed = chunk(rows)
    placed.columns.cluster_ids.extend([1] * 5)
    with pytest.raises(SemanticError, match="names no clusters"):
        prepare(placed)
    both = chunk(rows)
    both.records.add()
    with pytest.raises(SemanticError, match="as rows or as columns, not both"):
        prepare(both)
    # A column of nulls costs the wire nothing per record: the count itself is bounded.
    for count in (0, MAX_LOAD_RECORDS + 1, 2 ** 32 - 1):
        huge = pb.LoadRequest(file="CENSUS", attributes=[],
                              columns=pb.LoadColumns(count=count))
        with pytest.raises(SemanticError, match=f"a load batch of {count} records: a batch "
                                                f"holds 1 to 100,000"):
            prepare(huge)


def test_a_load_that_fails_at_the_backends_names_the_records_loaded_after_it() -> None:
    """Batches in flight beside one that fails at the backends commit on their own: the
    failure names the records it did not load and those loaded after them."""
    chunks = [chunk([census_row(i) for i in range(10)], first=1 + 10 * k) for k in range(5)]

    async def feed() -> AsyncIterator[pb.LoadRequest]:
        for c in chunks:
            yield c

    async def run(p: Any) -> AsyncIterator[pb.ExecuteReplies]:
        await asyncio.sleep(0)
        if p.batch.first == 11:
            await asyncio.sleep(0.2)    # the others are taken meanwhile, up to the window
            raise TrafficUnitAborted("traffic unit aborted: backend b1: disk full")
        yield pb.ExecuteReplies(replies=[pb.ExecuteReply(done=pb.RequestDone())])

    acknowledged: list[int] = []

    async def drain() -> None:
        async for _ in load.pipelined(feed(), lambda c, first: prepare(c), run, window=4):
            acknowledged.append(1)

    with pytest.raises(TrafficUnitAborted) as err:
        asyncio.run(drain())
    assert str(err.value) == ("traffic unit aborted: backend b1: disk full; records 11-20 "
                              "were not loaded, records 21-30, 31-40, 41-50 (in flight "
                              "beside them) were loaded")
    assert len(acknowledged) == 4           # the first batch, and the three beside


def test_a_batch_is_acknowledged_as_soon_as_it_is_stored_while_the_next_is_awaited(
        ) -> None:
    """A slow source (the next chunk comes only once the first is acknowledged) is not
    held up: each batch's answer goes out when its unit is done."""
    chunks = [chunk([census_row(i) for i in range(10)], first=1 + 10 * k) for k in range(2)]
    first_answered = asyncio.Event()

    async def feed() -> AsyncIterator[pb.LoadRequest]:
        yield chunks[0]
        await first_answered.wait()
        yield chunks[1]

    async def run(p: Any) -> AsyncIterator[pb.ExecuteReplies]:
        yield pb.ExecuteReplies(replies=[pb.ExecuteReply(done=pb.RequestDone())])

    async def drain() -> int:
        n = 0
        async with asyncio.timeout(10):
            async for _ in load.pipelined(feed(), lambda c, first: prepare(c), run, window=4):
                n += 1
                first_answered.set()
        return n

    assert asyncio.run(drain()) == 2


# ------------------------------------------------------------- IIG, per batch --
def test_placement_per_batch_matches_the_per_record_rule() -> None:
    """Every record lands in the cluster `cluster_of` gives its directory values, each
    cluster's records are dealt out over the backends in load order, one at a time as
    per record (so every run of them, such as the part of a cluster a range predicate
    finds, is split evenly, ±1 from the cluster's start), and new type-C values get one
    descriptor each, in the update that travels with the unit."""
    iig = census_iig()
    names = ["b0", "b1", "b2"]
    rows = [census_row(i) for i in range(2000)]
    position = {row[1]: i for i, row in enumerate(rows)}    # POP is unique here
    where: dict[int, Counter[str]] = defaultdict(Counter)
    dealt: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for first in (1, 1001):
        units = {b: pb.TrafficUnit(requests=[pb.Request(op=pb.INSERT)]) for b in range(3)}
        update = pb.DirectoryUpdate()
        p = prepare(chunk(rows[first - 1:first + 999], first=first))
        assert p.batch is not None
        touched = iig.place_batch(0, p.batch, names, update, units)
        placed = []
        for b, tu in units.items():
            assert tu.requests[0].record_count == 1000
            got = pb.LoadColumns.FromString(tu.requests[0].load_columns)
            vals = [columns.decode(c, got.count) for c in got.columns]
            for cid, rec in zip(got.cluster_ids, zip(*vals, strict=True), strict=True):
                placed.append(list(rec))
                where[cid][names[b]] += 1
                dealt[cid].append((position[rec[1]], b))
                assert iig.cluster_of("CENSUS", key(rec), pb.DirectoryUpdate()) == cid
        assert sorted(map(repr, placed)) == sorted(map(repr, rows[first - 1:first + 999]))
        assert touched == len({iig.cluster_of("CENSUS", key(r), pb.DirectoryUpdate())
                               for r in rows[first - 1:first + 999]})
        if first == 1:     # the 40 cities are new: 40 type-C descriptors, once each
            assert sorted(d.value.s for d in update.descriptors if d.kind == "C") == sorted(
                f"city{i}" for i in range(40))
    for cid, per in where.items():
        counts = [per[b] for b in names]
        assert max(counts) - min(counts) <= 1, (cid, counts)
        so_far = [0, 0, 0]
        for n, (_, b) in enumerate(sorted(dealt[cid]), 1):   # in load order
            so_far[b] += 1
            assert max(so_far) - min(so_far) <= 1, (cid, n, so_far)
        assert iig.counts[cid] == {b: per[b] for b in names if per[b]} | {
            b: 0 for b in names if not per[b] and b in iig.counts[cid]}


# ------------------------------------------------------------ backend's check --
def test_the_backend_checks_a_batch_per_column() -> None:
    iig = census_iig()
    units = {0: pb.TrafficUnit(requests=[pb.Request(op=pb.INSERT, file="CENSUS")])}
    update = pb.DirectoryUpdate()
    p = prepare(chunk([census_row(i) for i in range(50)], first=101))
    assert p.batch is not None
    iig.place_batch(0, p.batch, ["b0"], update, units)
    directory = Directory()
    directory.apply(iig.directory.to_update())
    good = pb.TrafficUnit()
    good.CopyFrom(units[0])
    check.traffic_unit(directory, good)          # parsed into `columns`, and accepted
    assert good.requests[0].columns.count == 50 and not good.requests[0].load_columns
    bad = pb.TrafficUnit()
    bad.CopyFrom(good)
    pop = bad.requests[0].columns.columns[1]
    pop.ClearField("ints")
    pop.kind = pb.STRINGS
    pop.strings.extend(["x"] * 50)
    with pytest.raises(check.BadMessage, match=r"record 101: inserted value: .*POP is "
                                               r"integer, got string 'x'"):
        check.traffic_unit(directory, bad)
    foreign = pb.TrafficUnit()
    foreign.CopyFrom(good)
    foreign.requests[0].columns.cluster_ids[0] = 10 ** 6
    with pytest.raises(check.BadMessage, match="cluster 1000000 is not a cluster of CENSUS"):
        check.traffic_unit(directory, foreign)


def test_the_backend_stores_every_column_kind_as_sent(tmp_path: Path) -> None:
    """One parameter per distinct constant (the string "1", the integer 1 and the float
    1.0 apart), all-null columns left out, and a bad dictionary reference named."""
    store = Store(tmp_path / "backend.db")
    schema = parse_definition(CENSUS_YAML)[0]
    conn = store.writer()
    conn.execute("BEGIN")
    store._create_file_table(conn, schema)
    same = columns.encode_batch([["1", 1, 1.0, None]] * 3, 4, 1, ["1"] * 3)
    mixed = columns.encode_batch([["a", 5, None, "CA"], ["b", 6, 2.5, "CA"],
                                  ["a", 7, -0.5, "CA"], ["a", 8, 1.0, "CA"]], 4, 4)
    assert [c.kind for c in (*same.columns, same.bodies)] == [pb.CONSTANT] * 3 + [
        pb.NULLS, pb.CONSTANT]
    assert [c.kind for c in (*mixed.columns, mixed.bodies)] == [
        pb.STRING_REFS, pb.INTEGERS, pb.VALUES, pb.CONSTANT, pb.NULLS]
    for batch in (same, mixed):
        batch.cluster_ids.extend(range(batch.count))
        assert insert(conn, schema, batch) == batch.count
    got = conn.execute('SELECT cluster_id, "CITY", "POP", "AREA", "STATE", _body '
                       'FROM "r_CENSUS" ORDER BY rid').fetchall()
    assert repr(got) == repr([(i, "1", 1, 1.0, None, "1") for i in range(3)] + [
        (0, "a", 5, None, "CA", None), (1, "b", 6, 2.5, "CA", None),
        (2, "a", 7, -0.5, "CA", None), (3, "a", 8, 1.0, "CA", None)])
    mixed.columns[0].refs[2] = 9
    with pytest.raises(check.BadMessage, match="record 6: a dictionary reference beyond"):
        insert(conn, schema, mixed)


# ------------------------------------------------------------- a real cluster --
def stored(r: Running) -> dict[str, list[tuple[Any, ...]]]:
    """Every backend's census records (cluster, CITY, POP, AREA, STATE, body), read from
    its own SQLite file."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = conn.execute(
                'SELECT cluster_id, "CITY", "POP", "AREA", "STATE", _body FROM "r_CENSUS"'
            ).fetchall()
    return out


def test_a_load_lands_every_record_on_the_backend_placement_chose(cluster_factory) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    rows = [census_row(i) for i in range(3000)]
    records = [(row, f"body {i}" if i % 5 == 0 else None) for i, row in enumerate(rows)]
    dones = list(r.client.load("CENSUS", ATTRS, records, chunk=400))
    assert [d.stats.records_retrieved for d in dones] == [400] * 7 + [200]
    got = stored(r)
    everything = [x for recs in got.values() for x in recs]
    assert sorted(map(repr, (x[1:] for x in everything))) == sorted(
        map(repr, ((*row, body) for row, body in records)))
    # One cluster per combination of directory values (POP's range, STATE, CITY), the
    # same on both backends, and each cluster split evenly between them.
    ranges = lambda pop: 0 if pop <= 999 else 1 if pop <= 4999 else 2   # noqa: E731
    cluster_of: dict[tuple[Any, ...], int] = {}
    per: dict[int, Counter[str]] = defaultdict(Counter)
    for b, recs in got.items():
        for cid, city, pop, _area, state, _body in recs:
            assert cluster_of.setdefault((ranges(pop), state, city), cid) == cid
            per[cid][b] += 1
    assert len(set(cluster_of.values())) == len(cluster_of)
    assert all(abs(c["b0"] - c["b1"]) <= 1 for c in per.values())
    [res] = r.client.execute("RETRIEVE ((FILE = Census) and (STATE = NY)) (COUNT(CITY))")
    assert res.records == [{"COUNT(CITY)": 1000}]


def test_a_file_whose_only_directory_attribute_is_file_loads_into_one_cluster(
        cluster_factory) -> None:
    """With no directory attribute of its own a file has one cluster, spread over the
    backends like any other."""
    r = cluster_factory(2)
    r.client.define("files:\n  PAIRS:\n    attributes: {K: integer, V: integer}\n")
    dones = list(r.client.load("PAIRS", ["K", "V"], [([k, -k], None) for k in range(50)],
                               chunk=20))
    assert sum(d.stats.records_retrieved for d in dones) == 50
    [res] = r.client.execute("RETRIEVE ((FILE = Pairs) and (K >= 0)) (SUM(V), COUNT(K))")
    assert res.records == [{"SUM(V)": -1225, "COUNT(K)": 50}]
    assert res.stats["clusters_examined"] == 1
    assert sorted(b["records"] for b in res.stats["backends"]) == [25, 25]


def test_integers_loaded_into_a_float_attribute_are_placed_as_the_floats_stored(
        cluster_factory) -> None:
    """A float column keeps what it is given as floats: integers loaded into it, 2**53 + 1
    among them (stored as 2**53), are placed by that float, so an equality finds them."""
    r = cluster_factory(2)
    r.client.define("files:\n  LEVELS:\n    attributes: {F: float, T: string}\n"
                    "    directory:\n      F: {type: C}\n")
    big = 2 ** 53
    list(r.client.load("LEVELS", ["F", "T"], [([big + 1, "a"], None), ([big, "b"], None),
                                               ([3, "c"], None)]))
    for value, tags in ((float(big), ["a", "b"]), (3.0, ["c"])):
        [res] = r.client.execute(f"RETRIEVE ((FILE = Levels) and (F = {value!r})) (T)")
        assert sorted(x["T"] for x in res.records) == tags
        assert res.stats["clusters_examined"] == 1


def test_a_refused_batch_changes_no_data_and_names_its_record(cluster_factory) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    rows = [census_row(i) for i in range(6000)]
    rows[1233][1] = "many"            # record 1234, in the batch of records 1001–1250
    acknowledged = 0
    with pytest.raises(ClientError) as err:
        for d in r.client.load("CENSUS", ATTRS, ((row, None) for row in rows), chunk=250):
            acknowledged += d.stats.records_retrieved
    assert err.value.code == "INVALID_ARGUMENT"
    assert str(err.value).endswith(
        "record 1234: type mismatch: CENSUS.POP is integer, got string 'many' (its batch, "
        "records 1001-1250, is not loaded)")
    here = [x for recs in stored(r).values() for x in recs]
    # Exactly the batches before the refused one are stored and acknowledged: a chunk is
    # checked as it comes, so none after it was taken.
    assert len(here) == acknowledged == 1000
    assert not {(x[1], x[2]) for x in here} & {(row[0], row[1]) for row in rows[1000:1250]}


@pytest.mark.parametrize("n", [1, 2])
def test_an_exception_of_the_records_source_ends_the_input_and_is_raised_as_it_was(
        cluster_factory, n: int) -> None:
    """The records' own generator failing mid-load ends the input there: the batches
    sent (the records it gave, the last batch short) are answered, so what was
    acknowledged is exactly what is stored, and then the failure reaches the caller as
    itself (not as gRPC's "Exception iterating requests!")."""
    r = cluster_factory(n)
    r.client.define(CENSUS_YAML)

    def rows() -> Iterator[tuple[list, None]]:
        for i in range(5000):
            if i == 2120:
                raise KeyError("the source's own failure")
            yield census_row(i), None

    acknowledged = 0
    with pytest.raises(KeyError, match="the source's own failure"):
        for done in r.client.load("CENSUS", ATTRS, rows(), chunk=250):
            acknowledged += done.stats.records_retrieved
    here = [x for recs in stored(r).values() for x in recs]
    assert acknowledged == len(here) == 2120


def test_a_batch_a_backend_fails_lands_on_no_backend(cluster_factory) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1, env={"MBDS_FAULTS": "backend.before_prepare=error"})
    retry(r.client, "RETRIEVE (FILE = Census) (COUNT(CITY))", timeout=30)   # b1 is back
    rows = [census_row(i) for i in range(40)]
    with pytest.raises(ClientError) as err:
        list(r.client.load("CENSUS", ATTRS, ((row, None) for row in rows), chunk=40))
    assert err.value.code == "ABORTED" and "backend b1" in str(err.value)
    assert stored(r) == {"b0": [], "b1": []}      # b0 had prepared its half: undone


def test_the_backend_names_a_bad_record_of_a_split_batch_by_its_share() -> None:
    """A batch split over backends gives each a share that is no run of the load: a
    backend refusing one of its records names it by its place in its share, not by a
    load number it cannot know (it named the batch's first record's number plus its
    place in the share, another record)."""
    iig = census_iig()
    units = {b: pb.TrafficUnit(requests=[pb.Request(op=pb.INSERT, file="CENSUS")])
             for b in (0, 1)}
    p = prepare(chunk([census_row(i) for i in range(6)], first=101))
    assert p.batch is not None
    iig.place_batch(0, p.batch, ["b0", "b1"], pb.DirectoryUpdate(), units)
    directory = Directory()
    directory.apply(iig.directory.to_update())
    share = pb.LoadColumns.FromString(units[1].requests[0].load_columns)
    assert share.first == 0 and share.count == 3
    share.columns[1].CopyFrom(pb.Column(kind=pb.STRINGS, strings=["x"] * 3))   # POP
    units[1].requests[0].load_columns = share.SerializeToString()
    with pytest.raises(check.BadMessage, match="^record 1 of this backend's share of its "
                                               "batch: inserted value: "):
        check.traffic_unit(directory, units[1])


# ------------------------------------------------------------------ the bar --
def test_the_progress_bar_reaches_the_total() -> None:
    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=120)
    bar = load_progress(12_000, None, console)
    assert bar is not None                      # a terminal: shown
    dones = [pb.RequestDone(stats=pb.RequestStats(records_retrieved=n))
             for n in (5000, 5000, 2000)]
    assert track_load(iter(dones), 12_000, bar) == 12_000
    [task] = bar.tasks
    assert task.completed == task.total == 12_000 and task.finished
    assert "12000/12000" in console.export_text()
    quiet = Console(file=io.StringIO())         # no terminal: only for a large load
    assert load_progress(12_000, None, quiet) is None
    assert load_progress(200_000, None, quiet) is not None
    assert load_progress(200_000, False, console) is None
    assert track_load(iter(dones), 12_000, None) == 12_000


def test_mbds_load_paper_shows_its_progress(cluster_factory) -> None:
    r = cluster_factory(1)
    run = CliRunner().invoke(cli, ["load", "paper", "--controller", r.cluster.address,
                                   "--chunk", "300", "--progress"])
    assert run.exit_code == 0, run.output
    assert "1000/1000" in run.stderr and "loaded 1000 records into PAPER" in run.stdout
    again = CliRunner().invoke(cli, ["load", "paper", "--controller", r.cluster.address])
    assert again.exit_code == 1, again.output
    assert ("error: file PAPER already holds 1,000 records: a second load would add 1,000 "
            "more, and Table 2 counts those of one load; load into a cluster started on an "
            "empty --data-dir (compose: after `down -v`), or give --append"
            ) in again.stderr, again.output
    assert paper_db.held(r.client) == 1000
    quiet = CliRunner().invoke(cli, ["load", "paper", "--controller", r.cluster.address,
                                     "--no-progress", "--append"])
    assert quiet.exit_code == 0 and "/1000" not in quiet.stderr
    assert paper_db.held(r.client) == 2000


def test_mbds_bench_load_prints_each_rate_and_their_ratio() -> None:
    run = CliRunner().invoke(cli, ["bench", "load", "--records", "2000", "--chunk", "500",
                                   "--rounds", "1", "--json"])
    assert run.exit_code == 0, run.output
    *rows, summary = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["load"] for r in rows] == ["executemany, bare WAL SQLite file",
                                         "MBDS, 1 backend, no CPU budget"]
    assert all(r["records"] == 2000 and r["records/s"] > 0 for r in rows)
    assert summary["ratio_mbds_1_to_executemany"] == pytest.approx(
        rows[1]["records/s"] / rows[0]["records/s"], abs=1e-3)


@pytest.mark.parametrize("command", [["load", "file", "CENSUS", "-"], ["load", "paper"],
                                     ["bench", "load"]])
def test_a_chunk_larger_than_a_batch_may_hold_is_refused_by_the_command(
        command: list[str]) -> None:
    """Named by the command line before anything is read or sent (the controller would
    refuse each batch of it)."""
    result = CliRunner().invoke(cli, [*command, "--chunk", str(MAX_LOAD_RECORDS + 1)],
                                input="")
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--chunk': {MAX_LOAD_RECORDS + 1} is not in the range " \
           f"1<=x<={MAX_LOAD_RECORDS}" in result.output, result.output
