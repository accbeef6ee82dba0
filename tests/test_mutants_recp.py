"""RECP's statements on a real record table (the store's own DDL, in memory): what INSERT,
RETRIEVE's target list, partial aggregates, DELETE and UPDATE do to which records
(docs/mutation.md)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from backend import recp_groups, recp_read, recp_sql, recp_write
from backend.plan import FilePlan
from backend.store import Store
from controller.aggregates import Aggregates
from controller.reqp import Reqp
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import from_pb, to_pb
from tests.conftest import CENSUS_YAML
from tests.inproc import census

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
    monkeypatch.setattr(recp_sql, "TEXTS", {})


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
    for reply in recp_groups.aggregate_groups(conn, p, [(a, agg) for a in items], by, 7):
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
    # COUNT, MIN and MAX do not sum (an integer sum may overflow); AVG of an integer
    # attribute sums exactly, of a float one as a float; MIN and MAX give only their own
    # extreme.
    [(_, (_, [pop, city]))] = groups(conn, plan([1, 2]), ["POP", "CITY"], "", "MIN").items()
    assert (pop, city) == ((None, 3, 25, None), (None, 4, "Albany", None))
    [(_, (_, [pop, city]))] = groups(conn, plan([1, 2]), ["POP", "CITY"], "", "MAX").items()
    assert (pop, city) == ((None, 3, None, 9000), (None, 4, None, "Monterey"))
    [(_, (_, [pop]))] = groups(conn, plan([1, 2]), ["POP"], "", "COUNT").items()
    assert pop == (None, 3, None, None)
    [(_, (_, [pop]))] = groups(conn, plan([1, 2]), ["POP"], "", "AVG").items()
    assert pop == (11025, 3, None, None) and isinstance(pop[0], int)
    [(_, (_, [area]))] = groups(conn, plan([1, 2]), ["AREA"], "", "AVG").items()
    assert area == (30.5, 3, None, None) and isinstance(area[0], float)
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
        [reply] = recp_groups.aggregate_groups(conn, plan([1, 2, 3]), items, by, 0)
        [g] = reply.groups.groups
        assert (from_pb(g.key), g.records) == (key, 5)
        assert [(whole_sum(g, j), g.counts[j], from_pb(g.mins[j]), from_pb(g.maxs[j]))
                for j in range(len(items))] == [
            (None, 5, None, None), (11525, 4, None, None),        # the extreme asked for
            (None, 5, None, "CENSUS"), (330.5, 4, None, None),    # only, the rest null
            (None, 5, "CENSUS", None)]


def test_an_integer_sum_comes_in_two_halves_that_join_exactly_beyond_64_bits() -> None:
    """A backend's part of an integer SUM or AVG may leave 64 bits where the total does
    not (PP checks a SUM's total): it sends the sums of the high and the low 32 bits,
    each in range, with null low sums for the other items (a float AVG's too)."""
    conn = table()
    top = 2**63 - 1
    recp_write.insert(conn, CENSUS, [placed(3, ("Big", top, 1.0, "TX", None))])
    items = [("POP", "SUM"), ("AREA", "COUNT"), ("AREA", "SUM"), ("POP", "AVG"),
             ("AREA", "AVG")]
    [reply] = recp_groups.aggregate_groups(conn, plan([3]), items, "", 0)
    [g] = reply.groups.groups
    assert [v.WhichOneof("v") for v in g.sum_lows] == ["i", None, None, "i", None]
    assert (g.sums[3], g.sum_lows[3]) == (g.sums[0], g.sum_lows[0])
    assert (g.sums[0].i, g.sum_lows[0].i) == ((top >> 32) + (500 >> 32),
                                              (top & 0xFFFFFFFF) + (500 & 0xFFFFFFFF))
    assert whole_sum(g, 0) == top + 500
    # COUNT, MIN, MAX and AVG of the same records do not overflow.
    [(_, (_, [pop]))] = groups(conn, plan([3]), ["POP"], "", "AVG").items()
    assert pop == (2**63 - 1 + 500, 2, None, None)
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
                for r in recp_groups.aggregate_groups(conn, p, items, by, 0)
                for g in r.groups.groups]

    whole = run()
    assert len(whole) == {"STATE": 3, "FILE": 1, "CITY": 6, "": 1}[by]
    monkeypatch.setattr(recp_groups, "ITEMS_PER_STATEMENT", per_statement)
    assert run() == whole
    # A part beyond 64 bits comes whole, in halves, from any of the statements.
    recp_write.insert(conn, CENSUS, [placed(3, ("Big", 2**62, 1.0, "TX", None))] * 2)
    monkeypatch.setattr(recp_groups, "ITEMS_PER_STATEMENT", len(items))
    whole = run()
    assert max(s for *_, sums in whole for s, *_ in sums[:1] if s is not None) >= 3 * 2**62
    monkeypatch.setattr(recp_groups, "ITEMS_PER_STATEMENT", per_statement)
    assert run() == whole


def merged(text: str, parts: list[list[tuple]]) -> list[list]:
    """PP's rows for `text` over backends holding `parts` (each a list of (CITY, POP,
    AREA, STATE) records): each backend's partial groups as RECP computes them, checked
    and merged as PP does."""
    p = Reqp(census()[0]).prepare(text)[0][0]
    pp = Aggregates(p)
    for records in parts:
        conn = sqlite3.connect(":memory:")
        Store._create_file_table(conn, CENSUS)
        recp_write.insert(conn, CENSUS, [placed(1, (*r, None)) for r in records])
        for reply in recp_groups.aggregate_groups(
                conn, plan([1]), [(attr, agg) for agg, attr in p.aggregates], p.by, 0):
            for g in reply.groups.groups:
                assert pp.fault(g) == ""
                pp.add(g)
    return pp.rows()


def splits(records: list[tuple]) -> list[list[list[tuple]]]:
    """The records on one backend, on one each, and dealt over two, either way round."""
    return [[records], [[r] for r in records], [records[::2], records[1::2]],
            [records[1::2], [], records[::2]]]


def avg(values: list) -> float | None:
    """The exact average: the whole sum, divided once (int / int rounds correctly)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


AVG_SUM_COUNT = "RETRIEVE (FILE = Census) (AVG(POP), SUM(POP), COUNT(POP))"


def test_an_integer_avg_is_the_exact_sum_over_the_count_on_any_split() -> None:
    """2^62, 1 and -2^62 average 1/3 (a double's running sum loses the 1 and gives 0);
    2^53 + 1 + 1 is no double either. Nulls are not counted."""
    for pops in ([2**62, 1, -2**62], [2**53, 1, 1, None], [-2**63, -2**63, 2**63 - 1, 7]):
        records = [("C", v, 1.0, "CA") for v in pops]
        for parts in splits(records):
            assert merged(AVG_SUM_COUNT, parts) == [
                [avg(pops), sum(v for v in pops if v is not None),
                 sum(v is not None for v in pops)]], (pops, parts)
    # No values (no records, or only nulls): no average.
    assert merged(AVG_SUM_COUNT, [[], [("C", None, 1.0, "CA")]]) == [[None, None, 0]]
    # A float attribute's AVG is summed in doubles, as its SUM is: 0.1 + 0.2 is no 0.3.
    assert merged("RETRIEVE (FILE = Census) (AVG(AREA), SUM(AREA))",
                  [[("A", 1, 0.1, "CA"), ("B", 1, 0.2, "CA")]]) == [[(0.1 + 0.2) / 2, 0.1 + 0.2]]
    # Only a SUM's total must fit in 64 bits, not an AVG's.
    assert merged("RETRIEVE (FILE = Census) (AVG(POP))",
                  [[("C", 2**62, 1.0, "CA")] * 3]) == [[2.0**62]]


def test_an_integer_avg_by_groups_is_exact_per_group() -> None:
    """Per BY group, the exact average of its values; a group whose values are all null
    has no average (and a count of 0); a backend with no records adds nothing."""
    records = [("A", 2**62, 0.1, "CA"), ("B", 1, 0.2, "CA"), ("C", -2**62, 0.3, "CA"),
               ("D", None, 0.7, "CA"), ("E", 2**53, None, "NY"), ("F", 1, None, "NY"),
               ("G", 1, None, "NY"), ("H", None, 1.5, "TX"), ("I", None, None, "TX")]
    text = ("RETRIEVE (FILE = Census) (STATE, AVG(POP), COUNT(POP), SUM(POP), AVG(AREA)) "
            "BY STATE")
    for parts in splits(records):
        assert merged(text, parts) == [
            ["CA", 1 / 3, 3, 1, pytest.approx(0.325)],
            ["NY", (2**53 + 2) / 3, 3, 2**53 + 2, None],
            ["TX", None, 0, None, 1.5]], parts


@pytest.mark.parametrize("per_statement", [1, 2])
def test_an_integer_avg_after_other_items_in_a_later_statement_comes_exact(
        monkeypatch: pytest.MonkeyPatch, per_statement: int) -> None:
    """An integer AVG computed by a later statement than the first still comes in halves
    (its place among all the items, not among its statement's, marks it)."""
    monkeypatch.setattr(recp_groups, "ITEMS_PER_STATEMENT", per_statement)
    records = [("A", 2**62, 0.5, "CA"), ("B", 1, 0.25, "CA"), ("C", -2**62, None, "CA")]
    assert merged("RETRIEVE (FILE = Census) (AVG(AREA), COUNT(CITY), AVG(POP))",
                  [records]) == [[0.375, 3, 1 / 3]]


def test_a_float_part_beyond_a_double_is_refused_naming_its_item() -> None:
    """A backend whose own part of a float SUM or AVG leaves a double's range refuses
    it, naming the item, rather than sending infinity."""
    conn = table()
    recp_write.insert(conn, CENSUS, [placed(3, ("Big", 1, 1e308, "TX", None))] * 2)
    for agg in ("AVG", "SUM"):
        items = [("POP", "SUM"), ("AREA", agg)]
        with pytest.raises(OverflowError) as e:
            list(recp_groups.aggregate_groups(conn, plan([3]), items, "", 0))
        assert str(e.value) == f"{agg}(AREA): a sum beyond the range of a double"


def test_groups_fill_each_message_up_to_batch_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of a BY go together while their bytes fit GROUP_BATCH_BYTES, a message exactly
    full included; each message names its request."""
    conn = sqlite3.connect(":memory:")
    Store._create_file_table(conn, CENSUS)
    recp_write.insert(conn, CENSUS, [placed(1, (f"C{i:02}", i, None, "CA", None))
                                     for i in range(10, 17)])
    items = [("POP", "MAX")]
    [whole] = recp_groups.aggregate_groups(conn, plan([1]), items, "CITY", 7)
    sizes = {g.ByteSize() for g in whole.groups.groups}
    assert len(whole.groups.groups) == 7 and len(sizes) == 1      # groups alike in size
    monkeypatch.setattr(recp_groups, "GROUP_BATCH_BYTES", 2 * sizes.pop())
    replies = list(recp_groups.aggregate_groups(conn, plan([1]), items, "CITY", 7))
    assert [r.request_index for r in replies] == [7] * 4
    assert [len(r.groups.groups) for r in replies] == [2, 2, 2, 1]
    assert [g for r in replies for g in r.groups.groups] == list(whole.groups.groups)


def test_a_float_directory_attribute_leaving_a_double_is_refused_naming_what_it_gives(
        ) -> None:
    """Moving records by a float directory attribute whose arithmetic leaves a double's
    range: refused, naming the infinity it gives, and nothing is written."""
    [schema] = parse_definition(
        "files:\n  F:\n    attributes: {X: float}\n"
        "    directory:\n      X: {type: A, ranges: [[0, 10]]}\n")
    conn = sqlite3.connect(":memory:")
    Store._create_file_table(conn, schema)
    recp_write.insert(conn, schema, [pb.PlacedRecord(cluster_id=1, values=[to_pb(2.0)])])
    m = pb.Modifier(attr="X", source="X", arith="*", value=to_pb(1e308))
    with pytest.raises(recp_write.OutOfRange) as e:
        recp_write.update_moving(conn, FilePlan(schema, [1], []), m, lambda f, v: 1)
    assert str(e.value) == ("F.X = X * 1e+308 gives inf for a record, out of the range of "
                            "float; nothing was updated")
    assert list(conn.execute('SELECT "X" FROM r_F')) == [(2.0,)]
