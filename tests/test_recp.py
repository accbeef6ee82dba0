"""RECP's statements: every placeholder gets exactly one bound value."""

from __future__ import annotations

import sqlite3

import pytest

from backend.recp import FilePlan, _where
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
