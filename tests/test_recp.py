"""RECP's statements: every placeholder gets exactly one bound value."""

from __future__ import annotations

import json
import sqlite3

import pytest

from backend import recp
from backend.recp import FilePlan, _where
from backend.store import Store, table
from mbds.schema import parse_definition
from tests.conftest import CENSUS_YAML

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
    where, params = _where(FilePlan(CENSUS, [1, 2], conjunctions, every_cluster))
    assert where.count("?") == len(params)
    got = sorted(v for (v,) in conn.execute(f'SELECT "POP" FROM r WHERE {where}', params))
    assert got == matches


def _census_table(rows: list[tuple[int, int, str]]) -> sqlite3.Connection:
    """A real RECP table (the store's own DDL) holding (cluster, POP, CITY) rows."""
    conn = sqlite3.connect(":memory:")
    Store._create_file_table(conn, CENSUS)
    conn.executemany(f'INSERT INTO {table("CENSUS")} (cluster_id, "POP", "CITY", "STATE") '
                     "VALUES (?, ?, ?, 'CA')", rows)
    return conn


def _all(batches: list) -> list:
    return [row for b in batches for row in json.loads(b.rows.rows_json)]


def test_a_whole_table_scan_pages_in_sqlite_within_the_batch_bounds(monkeypatch) -> None:
    """SQLite joins a whole-table scan's rows a page at a time: the answer is the same rows
    as row by row, in rowid order, and no batch breaks the row or byte bound (a page
    that comes out too large is read again at half the rows)."""
    monkeypatch.setattr(recp, "BATCH_ROWS", 40)
    monkeypatch.setattr(recp, "BATCH_BYTES", 3000)
    # Rows of 10 bytes, then some of 2,000 (two to a batch), then small ones again.
    sizes = [10] * 150 + [2000] * 7 + [10] * 100 + [5000] + [10] * 30
    conn = _census_table([(1 + i % 3, i, "c" * n) for i, n in enumerate(sizes)])
    plan = FilePlan(CENSUS, [1, 2, 3], [[("POP", ">=", 5)]], every_cluster=True)
    assert recp._pageable(plan)
    paged = list(recp.retrieve_batches(conn, plan, ["POP", "CITY"], 0))
    rowwise = list(recp.retrieve_batches(
        conn, FilePlan(CENSUS, [1, 2, 3], plan.conjunctions), ["POP", "CITY"], 0))
    expected = [[i, "c" * n] for i, n in enumerate(sizes) if i >= 5]
    assert _all(paged) == expected                 # in rowid order
    assert sorted(_all(rowwise)) == expected       # (cluster by cluster)
    for b in paged:
        assert 0 < b.rows.count == len(json.loads(b.rows.rows_json)) <= 40
        # A batch ends once past the byte bound; a page is at most twice it, unless a
        # single row is larger on its own.
        assert len(b.rows.rows_json) <= 3000 + 2 * 3000 or b.rows.count == 1
    assert len(paged) < len(sizes) / 10            # pages, not rows


def test_a_scan_that_an_index_could_answer_is_not_paged() -> None:
    """With a predicate on an indexed attribute SQLite might sort every page by rowid;
    such a scan stays row by row."""
    indexed = next(s for s in parse_definition(CENSUS_YAML.replace(
        "    directory:\n      POP", "    indexes: [AREA]\n    directory:\n      POP", 1))
        if s.name == "CENSUS")
    assert not recp._pageable(FilePlan(indexed, [1], [[("AREA", "<", 5.0)]], True))
    assert recp._pageable(FilePlan(indexed, [1], [[("POP", "<", 5)]], True))
    assert not recp._pageable(FilePlan(indexed, [1], [[("POP", "<", 5)]], False))
