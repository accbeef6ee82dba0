"""PP's merges in process: partial aggregates from several backends finished into one
answer, RETRIEVE-COMMON's join, and row batches (docs/mutation.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import pp
from controller.reqp import Prepared, Reqp
from mbds.proto import mbds_pb2 as pb
from mbds.values import to_pb
from tests.inproc import census

AGGS = "AVG(POP), SUM(POP), COUNT(POP), MIN(CITY), MAX(POP)"

# (STATE, CITY, POP) rows; None is a missing value.
ROWS = [("CA", "Monterey", 25), ("CA", "Carmel", 2000), ("NY", "Albany", 9000),
        ("CA", None, None), (None, "Nowhere", 7), ("NY", "Buffalo", None),
        ("TX", None, None)]


def prepared(text: str) -> Prepared:
    d, _ = census()
    return Reqp(d).prepare(text)[0][0]


def partial(rows: list[tuple], by: bool) -> list[pb.PartialGroup]:
    """A backend's partial groups (what RECP sends): SUM, COUNT, MIN, MAX per item."""
    groups: dict[Any, list[tuple]] = {}
    for r in rows:
        groups.setdefault(r[0] if by else None, []).append(r)
    out = []
    for key, rs in groups.items():
        g = pb.PartialGroup(records=len(rs))
        to_pb(key, g.key)
        for col in (2, 2, 2, 1, 2):          # POP, POP, POP, CITY, POP
            vals = [r[col] for r in rs if r[col] is not None]
            # SQLite's SUM counts a string as 0 (and PP never reads the SUM of a string)
            to_pb(sum(v if col == 2 else 0.0 for v in vals) if vals else None, g.sums.add())
            g.counts.append(len(vals))
            to_pb(min(vals) if vals else None, g.mins.add())
            to_pb(max(vals) if vals else None, g.maxs.add())
        out.append(g)
    return out


def expected(rows: list[tuple], by: bool) -> list[list]:
    groups: dict[Any, list[tuple]] = {}
    for r in rows:
        groups.setdefault(r[0] if by else None, []).append(r)
    if not by and not groups:
        groups = {None: []}
    out = []
    for key in sorted(groups, key=lambda k: (k is not None, k)):
        pops = [r[2] for r in groups[key] if r[2] is not None]
        cities = [r[1] for r in groups[key] if r[1] is not None]
        row = [sum(pops) / len(pops) if pops else None, sum(pops) if pops else None,
               len(pops), min(cities) if cities else None, max(pops) if pops else None]
        out.append(([key] if by else []) + row)
    return out


@pytest.mark.parametrize("by", [True, False])
@pytest.mark.parametrize("split", [
    [ROWS], [ROWS[:3], ROWS[3:]], [ROWS[::2], ROWS[1::2]], [ROWS[::-1][:4], [], ROWS[::-1][4:]],
    [ROWS[2:3], ROWS[:2]], [ROWS[1:2], ROWS[0:1]],
])
def test_partial_aggregates_from_any_split_give_the_whole_answer(by: bool,
                                                                   split: list) -> None:
    p = prepared(f"RETRIEVE (FILE = Census) ({AGGS})" + (" BY STATE" if by else ""))
    merged = pp._Aggregates(p)
    for backend_rows in split:
        for g in partial(backend_rows, by):
            merged.add(g)
    assert merged.rows() == expected([r for part in split for r in part], by)


@pytest.mark.parametrize("by", [True, False])
def test_aggregates_of_no_records(by: bool) -> None:
    p = prepared(f"RETRIEVE (FILE = Census) ({AGGS})" + (" BY STATE" if by else ""))
    assert pp._Aggregates(p).rows() == ([] if by else [[None, None, 0, None, None]])


def test_the_by_column_keeps_its_place_among_the_targets() -> None:
    p = prepared("RETRIEVE (FILE = Census) (COUNT(POP), STATE) BY STATE")
    merged = pp._Aggregates(p)
    for g in partial(ROWS, True):
        merged.add(g)
    assert p.columns == ["COUNT(POP)", "STATE"]
    assert merged.rows() == [[1, None], [2, "CA"], [1, "NY"], [0, "TX"]]


COMMON = ("RETRIEVE (FILE = Census) (CITY, POP) COMMON (STATE, CODE) "
          "RETRIEVE (FILE = States) (NAME, REGION)")


def test_retrieve_common_joins_every_pair_with_equal_values() -> None:
    p = prepared(COMMON)
    # Each side's rows end with the hidden join value (STATE on the left, CODE on the right).
    left = [["Monterey", 25, "CA"], ["Albany", 9000, "NY"], ["Carmel", 2000, "CA"],
            ["Nowhere", None, None], [None, "NY", "TX"], ["Austin", None, "TX"]]
    right = [["New York", "East", "NY"], ["California", "West", "CA"], ["Texas", None, "TX"],
             ["Nothing", "CA", None], ["Calif.", "NY", "CA"]]
    assert pp._join(p, left, right) == [
        ["Albany", 9000, "New York", "East"],
        ["Monterey", 25, "California", "West"], ["Carmel", 2000, "California", "West"],
        [None, "NY", "Texas", None], ["Austin", None, "Texas", None],
        ["Monterey", 25, "Calif.", "NY"], ["Carmel", 2000, "Calif.", "NY"]]
    assert pp._join(p, left, []) == [] and pp._join(p, [], right) == []


def test_rows_go_out_in_batches_of_at_most_batch_rows() -> None:
    rows = [[i, f"r{i}", None] for i in range(2 * pp.REPLY_BATCH_ROWS + 5)]
    batches = pp._batches(3, rows)
    assert [b.request_index for b in batches] == [3, 3, 3]
    assert [b.rows.count for b in batches] == [pp.REPLY_BATCH_ROWS, pp.REPLY_BATCH_ROWS, 5]
    assert [r for b in batches for r in json.loads(b.rows.rows_json)] == rows
    assert pp._batches(0, []) == []
    [one] = pp._batches(1, [[1, "a"]])
    assert (one.request_index, one.rows.count, json.loads(one.rows.rows_json)) == (
        1, 1, [[1, "a"]])
