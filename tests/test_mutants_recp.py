"""RECP's statements on a real record table (the store's own DDL, in memory): what INSERT,
RETRIEVE's target list, partial aggregates, DELETE and UPDATE do to which records
(docs/mutation.md)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from backend import recp_read, recp_write
from backend.plan import FilePlan
from backend.store import Store
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import from_pb, to_pb
from tests.conftest import CENSUS_YAML

SCHEMAS = {s.name: s for s in parse_definition(CENSUS_YAML)}
CENSUS, STATES = SCHEMAS["CENSUS"], SCHEMAS["STATES"]
ATTRS = ["CITY", "POP", "AREA", "STATE"]          # the file's attribute order

# cluster -> records (CITY, POP, AREA, STATE, body)
RECORDS: dict[int, list[tuple[Any, ...]]] = {
    1: [("Monterey", 25, 8.5, "CA", "by the sea"), ("Carmel", 2000, 1.0, "CA", None)],
    2: [("Albany", 9000, 21.0, "NY", ""), ("Buffalo", None, None, "NY", None)],
    3: [("Austin", 500, 300.0, "TX", None)],
}


def placed(cid: int, rec: tuple) -> pb.PlacedRecord:
    r = pb.PlacedRecord(cluster_id=cid, values=[to_pb(v) for v in rec[:4]])
    if rec[4] is not None:
        r.body = rec[4]
    return r


def table() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    Store._create_file_table(conn, CENSUS)
    for cid, recs in RECORDS.items():
        assert recp_write.insert(conn, CENSUS, [placed(cid, r) for r in recs]) == len(recs)
    return conn


def plan(clusters: list[int], conjunctions: list | None = None,
         every: bool = False) -> FilePlan:
    return FilePlan(CENSUS, clusters, [] if conjunctions is None else conjunctions, every)


def retrieve(conn: sqlite3.Connection, p: FilePlan, attrs: list[str]) -> list[list]:
    return [row for b in recp_read.retrieve_batches(conn, p, attrs, 0)
            for row in json.loads(b.rows.rows_json)]


def stored(conn: sqlite3.Connection) -> list[tuple]:
    """Every record as (cluster, CITY, POP, AREA, STATE, body), by city."""
    return sorted(conn.execute('SELECT cluster_id, "CITY", "POP", "AREA", "STATE", _body '
                               "FROM r_CENSUS"), key=lambda r: r[1])


@pytest.fixture(autouse=True)
def no_statement_texts_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test builds its own statements: a text cached by an earlier test (or by a
    parent process the test process was forked from) would stand in for the one built
    here, and hide what the test checks."""
    monkeypatch.setattr(recp_read, "_TEXTS", {})


ALL = sorted((cid, *r) for cid, recs in RECORDS.items() for r in recs)


def test_insert_stores_each_record_in_its_cluster_with_its_body() -> None:
    conn = table()
    assert stored(conn) == sorted(ALL, key=lambda r: r[1])
    assert recp_write.insert(conn, CENSUS, []) == 0


@pytest.mark.parametrize("every", [False, True])
def test_targets_file_body_and_attributes_the_file_lacks(every: bool) -> None:
    conn = table()
    rows = retrieve(conn, plan([1, 2, 3], every=every), ["FILE", "CITY", "BODY", "NAME"])
    assert sorted(rows) == sorted(["CENSUS", r[0], r[4], None]
                                  for recs in RECORDS.values() for r in recs)


def test_a_plan_without_conjunctions_matches_every_record_of_its_clusters() -> None:
    conn = table()
    assert sorted(retrieve(conn, plan([2]), ["CITY"])) == [["Albany"], ["Buffalo"]]
    assert sorted(retrieve(conn, plan([1, 2, 3], every=True), ["CITY"])) == sorted(
        [r[0]] for recs in RECORDS.values() for r in recs)


def groups(conn: sqlite3.Connection, p: FilePlan, items: list[str], by: str,
           agg: str = "SUM") -> dict:
    """Each group's records and, per item, its (sum, count, min, max) for `agg`."""
    out = {}
    for reply in recp_read.aggregate_groups(conn, p, [(a, agg) for a in items], by, 7):
        assert reply.request_index == 7
        for g in reply.groups.groups:
            out[from_pb(g.key)] = (g.records, [
                (whole_sum(g, j), g.counts[j], from_pb(g.mins[j]), from_pb(g.maxs[j]))
                for j in range(len(items))])
    return out


def whole_sum(g: pb.PartialGroup, j: int) -> object:
    """Item j's sum, an integer SUM's two halves joined (as PP joins them)."""
    if g.sum_lows and g.sum_lows[j].WhichOneof("v") is not None:
        assert g.sums[j].WhichOneof("v") == "i" and g.sum_lows[j].WhichOneof("v") == "i"
        return (g.sums[j].i << 32) + g.sum_lows[j].i
    return from_pb(g.sums[j])


def test_partial_aggregates_per_group() -> None:
    conn = table()
    got = groups(conn, plan([1, 2, 3], [[("POP", ">", 100)], [("STATE", "=", "NY")]]),
                 ["POP", "AREA", "NAME"], "STATE")
    assert got == {
        "CA": (1, [(2000, 1, None, None), (1.0, 1, None, None), (None, 0, None, None)]),
        "NY": (2, [(9000, 1, None, None), (21.0, 1, None, None), (None, 0, None, None)]),
        "TX": (1, [(500, 1, None, None), (300.0, 1, None, None), (None, 0, None, None)]),
    }


def test_partial_aggregates_without_by_and_over_some_clusters() -> None:
    conn = table()
    [(key, (records, [pop, city]))] = groups(conn, plan([1, 2]), ["POP", "CITY"], "").items()
    assert (key, records, pop, city[1:]) == (None, 4, (11025, 3, None, None),
                                             (4, None, None))
    # COUNT, MIN and MAX do not sum (an integer sum may overflow); AVG sums as a float;
    # MIN and MAX give only their own extreme.
    [(_, (_, [pop, city]))] = groups(conn, plan([1, 2]), ["POP", "CITY"], "", "MIN").items()
    assert (pop, city) == ((None, 3, 25, None), (None, 4, "Albany", None))
    [(_, (_, [pop, city]))] = groups(conn, plan([1, 2]), ["POP", "CITY"], "", "MAX").items()
    assert (pop, city) == ((None, 3, None, 9000), (None, 4, None, "Monterey"))
    [(_, (_, [pop]))] = groups(conn, plan([1, 2]), ["POP"], "", "COUNT").items()
    assert pop == (None, 3, None, None)
    [(_, (_, [pop]))] = groups(conn, plan([1, 2]), ["POP"], "", "AVG").items()
    assert pop == (11025.0, 3, None, None) and isinstance(pop[0], float)
    # Nothing matches: no group at all (rather than a group of no records).
    assert groups(conn, plan([1, 2], [[("POP", ">", 10**6)]]), ["POP"], "") == {}
    assert groups(conn, plan([]), ["POP"], "STATE") == {}


def test_delete_removes_the_matching_records_of_the_plans_clusters() -> None:
    conn = table()
    assert recp_write.delete(conn, plan([1, 2], [[("POP", ">", 100)]])) == 2
    assert [r[1] for r in stored(conn)] == ["Austin", "Buffalo", "Monterey"]
    assert recp_write.delete(conn, plan([])) == 0
    assert recp_write.delete(conn, plan([3], [[("POP", "=", 500)]], every=True)) == 1
    assert [r[1] for r in stored(conn)] == ["Buffalo", "Monterey"]


def modifier(attr: str, value: Any = None, source: str = "", arith: str = "") -> pb.Modifier:
    m = pb.Modifier(attr=attr, source=source, arith=arith)
    to_pb(value, m.value)
    return m


@pytest.mark.parametrize("m, pops", [
    (modifier("POP", 7), {"Monterey": 7, "Carmel": 7}),
    (modifier("POP", 10, "POP", "*"), {"Monterey": 250, "Carmel": 20000}),
    (modifier("POP", 1, "POP", "-"), {"Monterey": 24, "Carmel": 1999}),
])
def test_update_sets_the_matching_records_of_the_plans_clusters(m: pb.Modifier,
                                                                pops: dict) -> None:
    conn = table()
    assert recp_write.update(conn, plan([1, 3], [[("STATE", "=", "CA")]]), m) == 2
    after = {r[1]: r[2] for r in stored(conn)}
    assert after == {"Monterey": 25, "Carmel": 2000, "Albany": 9000, "Buffalo": None,
                     "Austin": 500, **pops}


def test_update_from_another_attribute_and_of_no_clusters() -> None:
    conn = table()
    assert recp_write.update(conn, plan([1]), modifier("AREA", source="POP")) == 2
    assert {r[1]: r[3] for r in stored(conn) if r[0] == 1} == {"Monterey": 25.0,
                                                                "Carmel": 2000.0}
    before = stored(conn)
    assert recp_write.update(conn, plan([]), modifier("POP", 1)) == 0
    assert stored(conn) == before


@pytest.mark.parametrize("m, new_pops", [
    (modifier("POP", 1000, "POP", "+"), {"Monterey": 1025, "Carmel": 3000}),
    (modifier("POP", 5000), {"Monterey": 5000, "Carmel": 5000}),
])
def test_update_moving_asks_for_each_records_new_cluster(m: pb.Modifier,
                                                         new_pops: dict) -> None:
    conn = table()
    asked = []

    def cluster_of(file: str, values: list) -> int:
        asked.append((file, values))
        return 10 + len(asked)

    assert recp_write.update_moving(
        conn, plan([1, 2], [[("STATE", "=", "CA")]]), m, cluster_of) == 2
    # The new directory values (FILE, CITY, POP, STATE), POP computed by SQLite.
    assert sorted(asked, key=lambda a: a[1][1]) == sorted(
        [("CENSUS", ["CENSUS", city, pop, "CA"]) for city, pop in new_pops.items()],
        key=lambda a: a[1][1])
    moved = {r[1]: (r[0], r[2]) for r in stored(conn) if r[0] > 10}
    assert {c: p for c, (_, p) in moved.items()} == new_pops
    assert sorted(cid for cid, _ in moved.values()) == [11, 12]
    assert len(stored(conn)) == len(ALL)
    assert recp_write.update_moving(conn, plan([]), m, cluster_of) == 0 and len(asked) == 2


def test_update_moving_of_the_state_keeps_the_other_values() -> None:
    conn = table()
    asked = []

    def cluster_of(file: str, values: list) -> int:
        asked.append(values)
        return 99

    assert recp_write.update_moving(conn, plan([3]), modifier("STATE", "OK"), cluster_of) == 1
    assert asked == [["CENSUS", "Austin", 500, "OK"]]
    assert [r for r in stored(conn) if r[0] == 99] == [(99, "Austin", 500, 300.0, "OK", None)]


def test_the_same_targets_on_two_files_read_each_files_own_values() -> None:
    conn = table()
    Store._create_file_table(conn, STATES)
    recp_write.insert(conn, STATES, [pb.PlacedRecord(
        cluster_id=1, values=[to_pb(v) for v in ("CA", "California", "West")])])
    for attrs in (["FILE", "POP", "NAME"], ["FILE", "POP", "NAME"]):   # the second: cached
        assert retrieve(conn, plan([3]), attrs) == [["CENSUS", 500, None]]
        assert retrieve(conn, FilePlan(STATES, [1], []), attrs) == [
            ["STATES", None, "California"]]


def test_aggregates_of_file_and_by_file() -> None:
    """FILE is the file's name in an aggregate item and as the BY key (a bound value)."""
    conn = table()
    items = [("FILE", "COUNT"), ("POP", "SUM"), ("FILE", "MAX"), ("AREA", "AVG"),
             ("FILE", "MIN")]
    for by, key in (("FILE", "CENSUS"), ("", None)):
        [reply] = recp_read.aggregate_groups(conn, plan([1, 2, 3]), items, by, 0)
        [g] = reply.groups.groups
        assert (from_pb(g.key), g.records) == (key, 5)
        assert [(whole_sum(g, j), g.counts[j], from_pb(g.mins[j]), from_pb(g.maxs[j]))
                for j in range(len(items))] == [
            (None, 5, None, None), (11525, 4, None, None),        # the extreme asked for
            (None, 5, None, "CENSUS"), (330.5, 4, None, None),    # only, the rest null
            (None, 5, "CENSUS", None)]


def test_an_integer_sum_comes_in_two_halves_that_join_exactly_beyond_64_bits() -> None:
    """A backend's part of an integer SUM may leave 64 bits where the total does not
    (PP checks the total): it sends the sums of the high and the low 32 bits, each in
    range, with null low sums for the other items."""
    conn = table()
    top = 2**63 - 1
    recp_write.insert(conn, CENSUS, [placed(3, ("Big", top, 1.0, "TX", None))])
    items = [("POP", "SUM"), ("AREA", "COUNT"), ("AREA", "SUM"), ("POP", "AVG")]
    [reply] = recp_read.aggregate_groups(conn, plan([3]), items, "", 0)
    [g] = reply.groups.groups
    assert [v.WhichOneof("v") for v in g.sum_lows] == ["i", None, None, None]
    assert (g.sums[0].i, g.sum_lows[0].i) == ((top >> 32) + (500 >> 32),
                                              (top & 0xFFFFFFFF) + (500 & 0xFFFFFFFF))
    assert whole_sum(g, 0) == top + 500
    # COUNT, MIN, MAX and AVG of the same records do not overflow.
    [(_, (_, [pop]))] = groups(conn, plan([3]), ["POP"], "", "AVG").items()
    assert pop == (float(2**63 - 1 + 500), 2, None, None)
    [(_, (_, [pop]))] = groups(conn, plan([3]), ["POP"], "", "MAX").items()
    assert pop == (None, 2, None, 2**63 - 1)


@pytest.mark.parametrize("per_statement", [1, 2, 3])
@pytest.mark.parametrize("by", ["STATE", "FILE", "CITY", ""])
def test_many_items_split_over_statements_give_the_same_groups(
        monkeypatch: pytest.MonkeyPatch, per_statement: int, by: str) -> None:
    """Items beyond one statement's columns are computed by several statements, each
    group's rows joined by its key: the same groups as one statement gives."""
    conn = table()
    recp_write.insert(conn, CENSUS, [placed(3, ("Big", 2**62, 1.0, "TX", None))])
    items = [("POP", "SUM"), ("AREA", "AVG"), ("CITY", "MAX"), ("FILE", "COUNT"),
             ("POP", "MIN"), ("NAME", "COUNT")]
    p = plan([1, 2, 3], [[("POP", ">", 20)], [("STATE", "=", "NY")]])

    def run() -> list:
        return [(from_pb(g.key), g.records,
                 [(whole_sum(g, j), g.counts[j], from_pb(g.mins[j]),
                   from_pb(g.maxs[j])) for j in range(len(items))])
                for r in recp_read.aggregate_groups(conn, p, items, by, 0)
                for g in r.groups.groups]

    whole = run()
    assert len(whole) == {"STATE": 3, "FILE": 1, "CITY": 6, "": 1}[by]
    monkeypatch.setattr(recp_read, "ITEMS_PER_STATEMENT", per_statement)
    assert run() == whole
    # A part beyond 64 bits comes whole, in halves, from any of the statements.
    recp_write.insert(conn, CENSUS, [placed(3, ("Big", 2**62, 1.0, "TX", None))] * 2)
    monkeypatch.setattr(recp_read, "ITEMS_PER_STATEMENT", len(items))
    whole = run()
    assert max(s for *_, sums in whole for s, *_ in sums[:1] if s is not None) >= 3 * 2**62
    monkeypatch.setattr(recp_read, "ITEMS_PER_STATEMENT", per_statement)
    assert run() == whole
