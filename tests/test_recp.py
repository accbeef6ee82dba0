"""RECP's statements: every placeholder gets exactly one bound value."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from backend import recp_groups, recp_read, recp_write
from backend.plan import FilePlan
from backend.recp_sql import where
from backend.store import Store, add_functions, table
from mbds.schema import parse_definition
from tests.conftest import CENSUS_YAML
from tests.inproc import census_iig, prepare

CENSUS = next(s for s in parse_definition(CENSUS_YAML) if s.name == "CENSUS")


@pytest.mark.parametrize("every_cluster", [False, True])
@pytest.mark.parametrize("conjunctions, matches", [
    ([[("POP", "=", 17)]], [17]),
    ([[("POP", "=", 17)], []], [3, 17, 5000]),          # a conjunction with no condition
    ([[], [("POP", ">", 100)]], [3, 17, 5000]),
    ([[("POP", "<", 10)], [("POP", ">", 100), ("POP", "<", 9999)]], [3, 5000]),
])
def test_where_binds_one_value_per_placeholder(conjunctions: list, matches: list[int],
                                               every_cluster: bool) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute('CREATE TABLE r (cluster_id INTEGER, "POP" INTEGER)')
    conn.executemany("INSERT INTO r VALUES (?, ?)", [(1, 3), (1, 17), (2, 5000)])
    clause, params = where(FilePlan(CENSUS, [1, 2], conjunctions, every_cluster))
    assert clause.count("?") == len(params)
    got = sorted(v for (v,) in conn.execute(f'SELECT "POP" FROM r WHERE {clause}', params))
    assert got == matches


def _census_table(rows: list[tuple[int, int, str]]) -> sqlite3.Connection:
    """A real RECP table (the store's own DDL) holding (cluster, POP, CITY) rows."""
    conn = add_functions(sqlite3.connect(":memory:"))
    Store._create_file_table(conn, CENSUS)
    conn.executemany(f'INSERT INTO {table("CENSUS")} (cluster_id, "POP", "CITY", "STATE") '
                     "VALUES (?, ?, ?, 'CA')", rows)
    return conn


def _all(batches: list) -> list:
    return [row for b in batches for row in json.loads(b.rows.rows_json)]


def _row_by_row(conn: sqlite3.Connection, plan: FilePlan) -> list:
    """The reference: every row fetched one by one through the cluster index."""
    select, sparams = recp_read._select_list(plan, ["POP", "CITY"])
    out = recp_read._Batcher(0, 0)
    batches = list(recp_read._rows(conn, plan, plan.clusters, select, sparams, out))
    return batches + [b for b in [out.flush()] if b is not None]


def _statements(conn: sqlite3.Connection) -> list[str]:
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    return seen


def test_a_whole_table_scan_pages_in_sqlite_within_the_batch_bounds(monkeypatch) -> None:
    """SQLite joins a whole-table scan's rows a page at a time: the answer is the same rows
    as row by row, in rowid order, and no batch breaks the row or byte bound (a page
    that comes out too large is read again at half the rows)."""
    monkeypatch.setattr(recp_read, "BATCH_ROWS", 40)
    monkeypatch.setattr(recp_read, "BATCH_BYTES", 3000)
    # Rows of 10 bytes, then some of 2,000 (two to a batch), then small ones again.
    sizes = [10] * 150 + [2000] * 7 + [10] * 100 + [5000] + [10] * 30
    conn = _census_table([(1 + i % 3, i, "c" * n) for i, n in enumerate(sizes)])
    plan = FilePlan(CENSUS, [1, 2, 3], [[("POP", ">=", 5)]], every_cluster=True)
    assert recp_read._pageable(plan)
    paged = list(recp_read.retrieve_batches(conn, plan, ["POP", "CITY"], 0))
    rowwise = _row_by_row(conn, FilePlan(CENSUS, [1, 2, 3], plan.conjunctions))
    expected = [[i, "c" * n] for i, n in enumerate(sizes) if i >= 5]
    assert _all(paged) == expected                 # in rowid order
    assert sorted(_all(rowwise)) == expected       # (cluster by cluster)
    for b in paged:
        assert 0 < b.rows.count == len(json.loads(b.rows.rows_json)) <= 40
        # A batch ends once past the byte bound; a page is at most twice it, unless a
        # single row is larger on its own.
        assert len(b.rows.rows_json) <= 3000 + 2 * 3000 or b.rows.count == 1
    assert len(paged) < len(sizes) / 10            # pages, not rows


def test_a_page_longer_than_sqlite_can_make_is_read_a_row_at_a_time(monkeypatch) -> None:
    """Small rows, then rows so much larger that the page sized from the small ones is
    longer than SQLite's longest string (here lowered to 100 kB): that page is read again
    a row at a time, and the scan gives every row, in order."""
    monkeypatch.setattr(recp_read, "BATCH_ROWS", 40)
    monkeypatch.setattr(recp_read, "BATCH_BYTES", 3000)
    sizes = [10] * 60 + [30_000] * 8 + [10] * 60
    conn = _census_table([(1, i, "c" * n) for i, n in enumerate(sizes)])
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)
    plan = FilePlan(CENSUS, [1], [[("POP", ">=", 0)]], every_cluster=True)
    statements = _statements(conn)
    paged = list(recp_read.retrieve_batches(conn, plan, ["POP", "CITY"], 0))
    assert _all(paged) == [[i, "c" * n] for i, n in enumerate(sizes)]
    assert all(sum(len(r[1]) > 1000 for r in json.loads(b.rows.rows_json)) <= 1
               for b in paged)                 # no two large rows in one batch
    assert len(statements) < 40


def test_a_scan_that_an_index_could_answer_is_not_paged() -> None:
    """With a predicate on an indexed attribute SQLite might sort every page by rowid;
    such a scan stays row by row."""
    indexed = next(s for s in parse_definition(CENSUS_YAML.replace(
        "    directory:\n      POP", "    indexes: [AREA]\n    directory:\n      POP", 1))
        if s.name == "CENSUS")
    assert not recp_read._pageable(FilePlan(indexed, [1], [[("AREA", "<", 5.0)]], True))
    assert recp_read._pageable(FilePlan(indexed, [1], [[("POP", "<", 5)]], True))
    assert recp_read._pageable(FilePlan(indexed, [1], [[("POP", "<", 5)]], False))
    assert not recp_read._pageable(
        FilePlan(indexed, [1], [[("POP", "<", 5)], [("AREA", ">", 1.0)]]))


def test_a_cluster_restricted_scan_pages_through_each_cluster(monkeypatch) -> None:
    """A request over some clusters is read a page at a time per cluster (a range of the
    cluster index, so nothing is sorted): the same rows as row by row, cluster by
    cluster in rowid order, every batch within its bounds, one statement per page."""
    monkeypatch.setattr(recp_read, "BATCH_ROWS", 40)
    monkeypatch.setattr(recp_read, "BATCH_BYTES", 3000)
    # Four clusters, interleaved in rowid order, rows of 10 and of 2,000 bytes.
    sizes = [10] * 200 + [2000] * 9 + [10] * 100
    conn = _census_table([(1 + i % 4, i, "c" * n) for i, n in enumerate(sizes)])
    plan = FilePlan(CENSUS, [1, 2, 4], [[("POP", ">=", 5)], [("POP", "<", 2)]])
    assert recp_read._pageable(plan)
    statements = _statements(conn)
    paged = list(recp_read.retrieve_batches(conn, plan, ["POP", "CITY"], 0))
    pages = len(statements)
    expected = [[i, "c" * n] for c in (1, 2, 4) for i, n in enumerate(sizes)
                if 1 + i % 4 == c and (i >= 5 or i < 2)]
    assert _all(paged) == expected
    assert _all(_row_by_row(conn, plan)) == expected
    for b in paged:
        assert 0 < b.rows.count == len(json.loads(b.rows.rows_json)) <= 40
        assert len(b.rows.rows_json) <= 3000 + 2 * 3000 or b.rows.count == 1
    assert all("group_concat" in s for s in statements[:pages])
    assert pages < len(expected) / 5               # pages, not rows


def test_small_clusters_fall_back_to_row_by_row(monkeypatch) -> None:
    """With clusters of a record or two (a type-C attribute can make one per record) a
    statement per cluster would cost more than it saves: after the probe the rest of
    the clusters are fetched row by row, in one statement, with the same answer."""
    monkeypatch.setattr(recp_read, "PAGE_PROBE_CLUSTERS", 4)
    conn = _census_table([(c, c * 10 + k, "x") for c in range(1, 31) for k in range(2)])
    plan = FilePlan(CENSUS, list(range(1, 31)), [[("POP", ">=", 0)]])
    statements = _statements(conn)
    got = _all(recp_read.retrieve_batches(conn, plan, ["POP", "CITY"], 0))
    assert got == [[c * 10 + k, "x"] for c in range(1, 31) for k in range(2)]
    assert sum("group_concat" in s for s in statements) == 4
    assert sum("json_each" in s for s in statements) == 1



@pytest.mark.parametrize("modifier, after", [
    ("<POP = POP - 7>", [-14, 10, 4993]),
    ("<POP = POP + 7>", [0, 24, 5007]),
    ("<POP = POP * 3>", [-21, 51, 15000]),
    ("<POP = POP / 2>", [-3, 8, 2500]),          # integer division truncates toward zero
    ("<POP = 12>", [12, 12, 12]),
])
def test_an_update_modifier_computes_each_records_new_value(modifier: str,
                                                            after: list[int]) -> None:
    """The modifier as REQP forms it, run by RECP on every record of the file, in one
    statement."""
    conn = _census_table([(1, -7, "a"), (1, 17, "b"), (2, 5000, "c")])
    [p] = prepare(census_iig().directory, f"UPDATE (FILE = Census) {modifier}")
    statements = _statements(conn)
    assert recp_write.update(conn, FilePlan(CENSUS, [1, 2], [[]], True), p.request.modifier) == 3
    # One pass over the records: the range check is part of the UPDATE itself.
    assert [s.split()[0] for s in statements] == ["UPDATE"]
    got = [pop for (pop,) in conn.execute(f'SELECT "POP" FROM {table("CENSUS")} ORDER BY rid')]
    assert got == after


@pytest.mark.parametrize("modifier, result, moving", [
    # SQLite's integer overflow is a float; the refusal names the exact integer.
    ("<POP = POP * 9000000000000000000>", "45000000000000000000000", False),
    ("<POP = POP * 9000000000000000000>", "45000000000000000000000", True),
    ("<POP = POP + 9223372036854775000>", "9223372036854780000", True),
    ("<AREA = AREA * -1.0e308>", "inf", False),                # a float gives ±Inf
    ("<AREA = AREA - 1.0e308>", "-inf", False),
])
def test_arithmetic_that_leaves_its_type_is_refused_before_anything_is_written(
        modifier: str, result: str, moving: bool) -> None:
    """SQLite turns an integer overflow into a float and a float one into ±Inf, which no
    answer's JSON can carry: RECP refuses such an UPDATE, naming what it gives, on the
    path of a directory attribute (records move) and of any other."""
    conn = _census_table([(1, 1, "a"), (2, 5000, "b")])
    conn.execute(f'UPDATE {table("CENSUS")} SET "AREA" = "POP" * -2.0e304')
    before = list(conn.execute(f"SELECT * FROM {table('CENSUS')} ORDER BY rid"))
    [p] = prepare(census_iig().directory, f"UPDATE (FILE = Census) {modifier}")
    plan = FilePlan(CENSUS, [1, 2], [[]], True)
    with pytest.raises(recp_write.OutOfRange, match=rf"^CENSUS\.(POP|AREA) = .* gives "
                             rf"{re.escape(result)} for a record, out of the range of "
                             r"(integer \(integers are signed 64-bit, from "
                             r"-9223372036854775808 to 9223372036854775807\)|float); "
                             r"nothing was updated$"):
        if moving:
            recp_write.update_moving(conn, plan, p.request.modifier, lambda f, v: 1)
        else:
            recp_write.update(conn, plan, p.request.modifier)
    assert list(conn.execute(f"SELECT * FROM {table('CENSUS')} ORDER BY rid")) == before


def test_an_update_copies_another_attribute_of_the_same_record() -> None:
    conn = _census_table([(1, 1, "a"), (2, 2, "b")])
    [p] = prepare(census_iig().directory, "UPDATE ((FILE = Census) and (POP < 2)) <CITY = STATE>")
    plan = FilePlan(CENSUS, [1, 2], [[("POP", "<", 2)]], True)
    assert recp_write.update(conn, plan, p.request.modifier) == 1
    assert list(conn.execute(f'SELECT "CITY" FROM {table("CENSUS")} ORDER BY rid')) == [
        ("CA",), ("b",)]


def test_every_write_records_what_undoes_it_exactly() -> None:
    """INSERT, UPDATE (in place and moving) and DELETE with an undo log: rolled back,
    the table is row for row what it was; the log holds only the rows each write
    touched, and a write that touched nothing records nothing."""
    from backend import undo
    from mbds.proto import mbds_pb2 as pb
    from mbds.values import to_pb

    conn = _census_table([(1, 3, "a"), (1, 17, "b"), (2, 5000, "c")])
    conn.executescript(undo.SCHEMA)
    conn.isolation_level = None
    before = conn.execute(f"SELECT * FROM {table('CENSUS')} ORDER BY rid").fetchall()
    log = undo.UndoLog(conn, ("e", 1))
    nothing = FilePlan(CENSUS, [1], [[("POP", "=", 999)]], False)
    assert recp_write.delete(conn, nothing, log) == 0 and not log.wrote
    records = [pb.PlacedRecord(cluster_id=2, values=[to_pb(v) for v in ("d", 7, None, "CA")])]
    assert recp_write.insert(conn, CENSUS, records, log) == 1 and log.wrote
    raise_pop = pb.Modifier(attr="POP", source="POP", arith="+", value=to_pb(1))
    assert recp_write.update(conn, FilePlan(CENSUS, [1, 2], [[("POP", "<", 10)]], False),
                             raise_pop, log) == 2          # 3 → 4 and the new 7 → 8
    move = pb.Modifier(attr="POP", value=to_pb(4000))
    assert recp_write.update_moving(conn, FilePlan(CENSUS, [1], [[("POP", "=", 17)]], False),
                                    move, lambda file, values: 2, log) == 1
    assert recp_write.delete(conn, FilePlan(CENSUS, [1, 2], [], True), log) == 4
    touched = conn.execute("SELECT COUNT(*) FROM undo WHERE image IS NOT NULL").fetchone()[0]
    assert touched == 2 + 1 + 4                            # the rows each write touched
    assert conn.execute("SELECT lo, hi FROM undo WHERE image IS NULL").fetchall() == [(4, 4)]
    undo.roll_back(conn, log.unit, {"CENSUS": CENSUS})
    assert conn.execute(f"SELECT * FROM {table('CENSUS')} ORDER BY rid").fetchall() == before


def test_a_by_over_many_groups_sends_them_a_message_at_a_time(monkeypatch) -> None:
    """Partial groups travel many to a message, up to BATCH_GROUPS or about a row
    batch's bytes: a BY over 2,500 groups is three messages, not 2,500 (each a bus
    message and a credit); a group larger than the byte bound goes alone."""
    conn = _census_table([(1, i, f"c{i}") for i in range(2500)])
    plan = FilePlan(CENSUS, [1], [[("POP", ">=", 0)]], every_cluster=True)
    replies = list(recp_groups.aggregate_groups(conn, plan, [("POP", "SUM")], "CITY", 0))
    assert [len(r.groups.groups) for r in replies] == [1000, 1000, 500]
    assert sorted((g.sums[0].i << 32) + g.sum_lows[0].i for r in replies
                  for g in r.groups.groups) == list(range(2500))
    monkeypatch.setattr(recp_groups, "GROUP_BATCH_BYTES", 3000)
    conn = _census_table([(1, 1, "a"), (1, 2, "b" * 5000), (1, 3, "c"), (1, 4, "d")])
    replies = list(recp_groups.aggregate_groups(conn, plan, [("CITY", "MAX")], "POP", 0))
    assert [[g.key.i for g in r.groups.groups] for r in replies] == [[1], [2], [3, 4]]
