"""PP's merges in process: partial aggregates from several backends finished into one
answer, RETRIEVE-COMMON's join, and row batches (docs/mutation.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller import aggregates, pp
from controller.reqp import Prepared, Reqp
from mbds.errors import TrafficUnitAborted
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
    merged = aggregates.Aggregates(p)
    for backend_rows in split:
        for g in partial(backend_rows, by):
            merged.add(g)
    assert merged.rows() == expected([r for part in split for r in part], by)


@pytest.mark.parametrize("by", [True, False])
def test_aggregates_of_no_records(by: bool) -> None:
    p = prepared(f"RETRIEVE (FILE = Census) ({AGGS})" + (" BY STATE" if by else ""))
    assert aggregates.Aggregates(p).rows() == ([] if by else [[None, None, 0, None, None]])


def test_the_by_column_keeps_its_place_among_the_targets() -> None:
    p = prepared("RETRIEVE (FILE = Census) (COUNT(POP), STATE) BY STATE")
    merged = aggregates.Aggregates(p)
    for g in partial(ROWS, True):
        merged.add(g)
    assert p.columns == ["COUNT(POP)", "STATE"]
    assert merged.rows() == [[1, None], [2, "CA"], [1, "NY"], [0, "TX"]]


COMMON = ("RETRIEVE (FILE = Census) (CITY, POP) COMMON (STATE, CODE) "
          "RETRIEVE (FILE = States) (NAME, REGION)")


def joined(left: list[list[Any]], right: list[list[Any]]) -> list[list[Any]]:
    """A join's rows as the client decodes them."""
    return [json.loads(row) for row in pp._Join(left, right).rows()]


def pp_batches(request_index: int, rows: list[list[Any]]) -> list[pb.ExecuteReply]:
    """PP's own row batches of `rows`."""
    return [reply for reply, _ in pp._encoded_batches(request_index, map(pp._dumps, rows))]


def test_retrieve_common_joins_every_pair_with_equal_values() -> None:
    # Each side's rows end with the hidden join value (STATE on the left, CODE on the right).
    left: list[list[Any]] = [["Monterey", 25, "CA"], ["Albany", 9000, "NY"],
                             ["Carmel", 2000, "CA"], ["Nowhere", None, None],
                             [None, "NY", "TX"], ["Austin", None, "TX"]]
    right: list[list[Any]] = [["New York", "East", "NY"], ["California", "West", "CA"],
                              ["Texas", None, "TX"], ["Nothing", "CA", None],
                              ["Calif.", "NY", "CA"]]
    assert joined(left, right) == [
        ["Albany", 9000, "New York", "East"],
        ["Monterey", 25, "California", "West"], ["Carmel", 2000, "California", "West"],
        [None, "NY", "Texas", None], ["Austin", None, "Texas", None],
        ["Monterey", 25, "Calif.", "NY"], ["Carmel", 2000, "Calif.", "NY"]]
    assert joined(left, []) == [] and joined([], right) == []


def test_rows_go_out_in_batches_of_at_most_batch_rows() -> None:
    rows = [[i, f"r{i}", None] for i in range(2 * pp.REPLY_BATCH_ROWS + 5)]
    batches = pp_batches(3, rows)
    assert [b.request_index for b in batches] == [3, 3, 3]
    assert [b.rows.count for b in batches] == [pp.REPLY_BATCH_ROWS, pp.REPLY_BATCH_ROWS, 5]
    assert [r for b in batches for r in json.loads(b.rows.rows_json)] == rows
    assert pp_batches(0, []) == []
    [one] = pp_batches(1, [[1, "a"]])
    assert (one.request_index, one.rows.count, json.loads(one.rows.rows_json)) == (
        1, 1, [[1, "a"]])


# --------------------------------------------------- what PP refuses to merge --

def group(sums: list, counts: list[int], records: int, key: Any = None,
          mins: int | None = None, maxs: int | None = None) -> pb.PartialGroup:
    """A partial group as a backend sends it; `mins` / `maxs` default to one per sum."""
    g = pb.PartialGroup(records=records, counts=counts)
    for s in sums:
        to_pb(s, g.sums.add())
    for _ in range(len(sums) if mins is None else mins):
        g.mins.add()
    for _ in range(len(sums) if maxs is None else maxs):
        g.maxs.add()
    to_pb(key, g.key)
    return g


SUM_AVG = "RETRIEVE (FILE = Census) (SUM(POP), AVG(AREA))"


@pytest.mark.parametrize("by", [True, False])
def test_every_group_a_backend_computes_is_fit_to_merge(by: bool) -> None:
    p = prepared(f"RETRIEVE (FILE = Census) ({AGGS})" + (" BY STATE" if by else ""))
    merged = aggregates.Aggregates(p)
    for g in partial(ROWS, by) + partial(ROWS[:1], by):
        assert merged.fault(g) == ""
    # A count may equal the group's records (every record has the attribute).
    p = prepared(SUM_AVG + (" BY STATE" if by else ""))
    key = "CA" if by else None
    assert aggregates.Aggregates(p).fault(group([7, 2.5], [3, 3], 3, key)) == ""
    assert aggregates.Aggregates(p).fault(group([None, None], [0, 0], 1, key)) == ""


@pytest.mark.parametrize("sums, counts, mins, maxs", [
    (1, 2, 2, 2), (2, 1, 2, 2), (2, 2, 1, 2), (2, 2, 2, 1), (3, 3, 3, 3), (0, 0, 0, 0),
])
def test_a_group_of_the_wrong_shape_is_refused_naming_its_shape(
        sums: int, counts: int, mins: int, maxs: int) -> None:
    g = group([1] * sums, [1] * counts, 1, mins=mins, maxs=maxs)
    assert aggregates.Aggregates(prepared(SUM_AVG)).fault(g) == (
        f"a partial group of {sums} sums, {counts} counts, {mins} mins and {maxs} maxs "
        "for 2 aggregates")


def test_a_group_counting_more_than_its_records_is_refused() -> None:
    a = aggregates.Aggregates(prepared(SUM_AVG))
    assert a.fault(group([7, 2.5], [3, 4], 3)) == \
        "a partial group counting more than its 3 records"
    assert a.fault(group([7, 2.5], [3, 3], 3)) == ""


@pytest.mark.parametrize("bad, shown", [
    ("many", "string 'many'"), (float("inf"), "float inf"), (float("-inf"), "float -inf"),
    (float("nan"), "float nan"),
])
def test_a_sum_that_is_no_finite_number_is_refused_naming_it(bad: object,
                                                             shown: str) -> None:
    a = aggregates.Aggregates(prepared(SUM_AVG))
    for sums in ([bad, 2.5], [7, bad]):
        assert a.fault(group(sums, [1, 1], 1)) == f"a partial group whose sum is {shown}"
    assert a.fault(group([-7, 1e308], [1, 1], 1)) == ""


def test_a_key_is_refused_only_for_a_request_without_by() -> None:
    without = aggregates.Aggregates(prepared(SUM_AVG))
    by = aggregates.Aggregates(prepared(SUM_AVG + " BY CITY"))
    keyed = group([7, 2.5], [1, 1], 1, "Monterey")
    assert without.fault(keyed) == "a partial group with a BY key for a request without BY"
    assert by.fault(keyed) == ""
    # A key that is there but holds no value (as an empty message on the wire) is no key.
    empty = group([7, 2.5], [1, 1], 1)
    empty.key.SetInParent()
    assert empty.HasField("key")
    assert without.fault(empty) == "" and by.fault(empty) == ""


def test_a_sum_beyond_64_bit_integers_aborts_the_unit_naming_its_item() -> None:
    big = 2**63 - 1
    p = prepared("RETRIEVE (FILE = Census) (COUNT(POP), SUM(POP)) BY STATE")
    for parts in ([big, 1], [-big, -2]):
        merged = aggregates.Aggregates(p)
        for s in parts:
            merged.add(group([None, s], [1, 1], 1, "CA"))
        with pytest.raises(TrafficUnitAborted) as e:
            merged.rows()
        assert str(e.value) == "SUM(POP): a sum beyond 64-bit integers"
    # The bounds themselves fit.
    for parts, total in (([big - 1, 1], big), ([-big, -1], -big - 1)):
        merged = aggregates.Aggregates(p)
        for s in parts:
            merged.add(group([None, s], [1, 1], 1, "CA"))
        assert merged.rows() == [["CA", 2, total]]


def test_an_average_of_a_total_beyond_64_bits_is_still_an_average() -> None:
    """Only a SUM must fit in 64 bits: an AVG is a float, whatever its total."""
    p = prepared("RETRIEVE (FILE = Census) (AVG(POP), COUNT(POP))")
    merged = aggregates.Aggregates(p)
    for s in (2**63 - 1, 2**63 - 1):
        merged.add(group([s, None], [1, 1], 1))
    assert merged.rows() == [[float(2**63 - 1), 2]]


# ------------------------------------------------- a COMMON's rows, checked --

WIDE_LEFT = ("RETRIEVE (FILE = Census) (CITY, POP, AREA) COMMON (STATE, CODE) "
             "RETRIEVE (FILE = States) (NAME)")


def side(n: int, rows: object, raw: bytes | None = None) -> pb.RowBatch:
    return pb.RowBatch(side=n, rows_json=raw if raw is not None else json.dumps(rows).encode())


def test_a_commons_rows_are_as_wide_as_their_sides_targets_and_the_join_value() -> None:
    p = prepared(WIDE_LEFT)        # three targets on the left, one on the right
    left: list[list[Any]] = [["Monterey", 25, 8.5, "CA"], ["Nowhere", None, None, None],
                             [None, 1, 2.0, 7], ["Odd", 1, 2.0, 1.5]]
    right: list[list[Any]] = [["California", "CA"], [None, None]]
    assert pp._side(p, side(0, left)) == left
    assert pp._side(p, side(1, right)) == right
    assert pp._side(p, side(0, [])) == [] and pp._side(p, side(1, [])) == []
    for n, rows, width in ((0, right, 4), (1, left, 2), (0, [left[0] + ["x"]], 4),
                           (0, [left[0][1:]], 4), (1, [["California", [1], "CA"]], 2)):
        with pytest.raises(ValueError) as e:
            pp._side(p, side(n, rows))
        assert str(e.value) == (f"rows of side {n} of a COMMON that are not rows of "
                                f"{width} plain values ending with the join value")


@pytest.mark.parametrize("rows", [
    {}, {"a": 1}, 5, "CA", None, [["California", ["CA"]]], [["California", {"v": 1}]],
    ["ab"], [5], [None], [[]],
])
def test_a_commons_rows_that_are_not_rows_of_plain_values_are_refused(rows: object) -> None:
    with pytest.raises(ValueError) as e:
        pp._side(prepared(WIDE_LEFT), side(1, rows))
    assert str(e.value) == ("rows of side 1 of a COMMON that are not rows of 2 plain values "
                            "ending with the join value")


def test_a_commons_rows_of_another_side_or_not_json_are_refused() -> None:
    p = prepared(COMMON)
    for n in (2, 7):
        with pytest.raises(ValueError) as e:
            pp._side(p, side(n, [["a", "b", "CA"]]))
        assert str(e.value) == f"rows of side {n} of a COMMON"
    with pytest.raises(ValueError) as e:
        pp._side(p, side(0, None, b"[[1, 2, "))
    assert str(e.value).startswith("rows of side 0 of a COMMON that are not JSON (")


# ------------------------------------- a join's rows and count, and their batches --

def test_a_joins_count_is_its_rows_known_before_any_is_made() -> None:
    left: list[list[Any]] = [["Monterey", "CA"], ["Albany", "NY"], ["Carmel", "CA"],
                             ["Nowhere", None]]
    right: list[list[Any]] = [["California", "CA"], ["New York", "NY"], ["Texas", "TX"],
                              ["Calif.", "CA"], ["Nothing", None]]
    join = pp._Join(left, right)
    assert join.count == 5
    assert [json.loads(r) for r in join.rows()] == [
        ["Monterey", "California"], ["Carmel", "California"], ["Albany", "New York"],
        ["Monterey", "Calif."], ["Carmel", "Calif."]]
    assert pp._Join(left, []).count == pp._Join([], right).count == 0
    # 3,000 records joining 3,000 on one value: 9 million rows, counted, none made.
    many = [[i, "CA"] for i in range(3000)]
    assert pp._Join(many, many).count == 9_000_000


def test_a_side_with_only_the_join_value_adds_no_column() -> None:
    """A row of a side with no targets is the join value alone: each pair's row is then
    the other side's targets (the merge takes sides of any width)."""
    bare: list[list[Any]] = [["CA"], ["NY"], ["CA"]]
    wide: list[list[Any]] = [["California", "West", "CA"], ["Texas", None, "TX"]]
    assert joined(bare, wide) == [["California", "West"], ["California", "West"]]
    assert joined(wide, bare) == [["California", "West"], ["California", "West"]]
    assert joined(bare, bare[:1]) == [[], []]


def test_a_batch_is_the_rows_compact_json_and_its_size_is_its_bytes() -> None:
    [one] = pp_batches(2, [[1, "a b", None, 2.5], ["x", [3, 4]]])
    assert one.rows.rows_json == b'[[1,"a b",null,2.5],["x",[3,4]]]'
    pairs = pp._Join([["Carmel", 2000, "CA"]], [["California", "West", "CA"]]).rows()
    batches = list(pp._encoded_batches(4, pairs))
    assert [(b.request_index, b.rows.count, b.rows.rows_json, size) for b, size in batches] \
        == [(4, 1, b'[["Carmel",2000,"California","West"]]', 37)]


def row(n: int) -> str:
    """An encoded row of exactly n bytes."""
    return '["' + "x" * (n - 4) + '"]'


def boundaries(rows: list[str]) -> list[int]:
    """The rows in each batch, checking that each batch is its rows in order."""
    out, at = [], 0
    for reply, size in pp._encoded_batches(0, iter(rows)):
        n = reply.rows.count
        assert reply.rows.rows_json == ("[" + ",".join(rows[at:at + n]) + "]").encode()
        assert size == len(reply.rows.rows_json)
        out.append(n)
        at += n
    assert at == len(rows)
    return out


def test_a_batch_holds_rows_up_to_batch_bytes_between_its_brackets() -> None:
    """A batch's rows, with the commas between them, are at most REPLY_BATCH_BYTES (a
    single row may be more): the next row starts a batch when it would pass that."""
    b = pp.REPLY_BATCH_BYTES
    assert boundaries([row(100), row(b - 101)]) == [2]          # exactly b
    assert boundaries([row(100), row(b - 100)]) == [1, 1]       # one byte more
    assert boundaries([row(100), row(200), row(b - 302)]) == [3]
    assert boundaries([row(100), row(200), row(b - 301)]) == [2, 1]
    # After a cut the next batch counts from nothing.
    assert boundaries([row(b), row(100), row(b - 101), row(5)]) == [1, 2, 1]
    assert boundaries([row(b + 10), row(b + 10), row(5), row(6)]) == [1, 1, 2]
    # Rows cut first by count, then by bytes.
    small = [row(10)] * (pp.REPLY_BATCH_ROWS + 1)
    assert boundaries(small + [row(b - 10)]) == [pp.REPLY_BATCH_ROWS, 1, 1]


def test_a_row_no_message_can_carry_is_refused_naming_its_size() -> None:
    from mbds.service import MAX_MESSAGE, MESSAGE_BUDGET

    # A row of exactly the budget is taken: the refusal is the next row's, one byte over.
    rows = iter([row(10), row(MESSAGE_BUDGET), row(MESSAGE_BUDGET + 1)])
    with pytest.raises(TrafficUnitAborted) as e:
        list(pp._encoded_batches(5, rows))
    assert str(e.value) == (
        f"a row of request 5's answer is {MESSAGE_BUDGET + 1:,} bytes, more than a message "
        f"may carry ({MESSAGE_BUDGET:,} bytes of the {MAX_MESSAGE >> 20} MiB gRPC message "
        "limit, MAX_MESSAGE)")


def halves(values: list[int]) -> tuple[int, int]:
    """An integer SUM's part as a backend sends it: the sums of the high and the low 32
    bits of its values."""
    return sum(v >> 32 for v in values), sum(v & 0xFFFFFFFF for v in values)


def with_lows(g: pb.PartialGroup, lows: list[int | None]) -> pb.PartialGroup:
    for low in lows:
        to_pb(low, g.sum_lows.add())
    return g


def test_an_integer_sum_in_halves_joins_exactly_and_only_the_total_must_fit() -> None:
    """One backend's part beyond 64 bits (2^63 - 1 and 1) and another's (-2) make a
    total that fits: answered, whatever the parts; a total beyond is refused."""
    big = 2**63 - 1
    p = prepared("RETRIEVE (FILE = Census) (COUNT(POP), SUM(POP)) BY STATE")
    for parts, total in (([[big, 1], [-2]], big - 1), ([[-big - 1], [-1, -2, 2]], -big - 2)):
        merged = aggregates.Aggregates(p)
        for values in parts:
            high, low = halves(values)
            g = with_lows(group([None, high], [len(values)] * 2, len(values), "CA"),
                          [None, low])
            assert merged.fault(g) == ""
            merged.add(g)
        if -2**63 <= total < 2**63:
            assert merged.rows() == [["CA", sum(map(len, parts)), total]]
        else:
            with pytest.raises(TrafficUnitAborted) as e:
                merged.rows()
            assert str(e.value) == "SUM(POP): a sum beyond 64-bit integers"


@pytest.mark.parametrize("sums, lows, counts, why", [
    ([7, 2.5], [0], [1, 1], "a partial group of 1 low sums for 2 aggregates"),
    ([0, 2.5], [-1, None], [1, 1],
     "a partial group whose low sum is integer -1 beside a sum of integer 0 over 1 values"),
    ([0, 2.5], [0xFFFFFFFF + 1, None], [1, 1],
     "a partial group whose low sum is integer 4294967296 beside a sum of integer 0 over "
     "1 values"),
    ([2.5, 2.5], [3, None], [1, 1],
     "a partial group whose low sum is integer 3 beside a sum of float 2.5 over 1 values"),
    ([None, 2.5], [3, None], [1, 1],
     "a partial group whose low sum is integer 3 beside a sum of null over 1 values"),
    ([3, 2.5], [None, 3], [1, 1],
     "a partial group whose low sum is integer 3 beside a sum of float 2.5 over 1 values"),
    ([3, 2.5], [2.5, None], [1, 1],
     "a partial group whose low sum is float 2.5 beside a sum of integer 3 over 1 values"),
    ([0, 2.5], [0xFFFFFFFF, None], [1, 1], ""),
    ([-1, 2.5], [2 * 0xFFFFFFFF, None], [2, 2], ""),
    ([None, 2.5], [None, None], [0, 1], ""),
])
def test_a_low_sum_that_does_not_fit_its_sum_is_refused(
        sums: list, lows: list, counts: list[int], why: str) -> None:
    a = aggregates.Aggregates(prepared(SUM_AVG))
    assert a.fault(with_lows(group(sums, counts, 2), lows)) == why


@pytest.mark.parametrize("text, item", [(SUM_AVG, "AVG(AREA)"),
                                        ("RETRIEVE (FILE = Census) (SUM(AREA))", "SUM(AREA)")])
def test_a_float_sum_beyond_a_double_is_refused_naming_its_item(text: str, item: str) -> None:
    """Each backend's part fits a double, their total not: refused (as PostgreSQL does),
    never answered as infinity."""
    merged = aggregates.Aggregates(prepared(text))
    sums = [None, 1.5e308] if text == SUM_AVG else [1.5e308]
    for _ in range(2):
        g = group(sums, [1] * len(sums), 1)
        assert merged.fault(g) == ""
        merged.add(g)
    with pytest.raises(TrafficUnitAborted) as e:
        merged.rows()
    assert str(e.value) == f"{item}: a sum beyond the range of a double"


@pytest.mark.parametrize("first", [1, 1.0])
def test_equal_numbers_of_two_types_merge_alike_whichever_part_comes_first(
        first: float) -> None:
    """Files typing an attribute differently send 1 and 1.0 for one group: its key is
    shown as the float, and of equal MIN and MAX candidates MIN takes the integer and MAX
    the float, in whatever order the backends' parts come."""
    second = 1.0 if type(first) is int else 1
    merged = aggregates.Aggregates(prepared("RETRIEVE (FILE = Census) (MIN(POP), MAX(POP)) BY POP"))
    for v in (first, second):
        g = group([None, None], [1, 1], 1, v)
        to_pb(v, g.mins[0])
        to_pb(v, g.maxs[1])
        merged.add(g)
    [[key, least, most]] = merged.rows()
    assert (key, type(key), least, type(least), most, type(most)) == (
        1.0, float, 1, int, 1.0, float)


@pytest.mark.parametrize("parts", [(2.0, 5), (5, 2.0), (2, 5.0), (5.0, 2)])
def test_min_and_max_over_numbers_of_two_types_order_them_by_value(parts: tuple) -> None:
    merged = aggregates.Aggregates(prepared("RETRIEVE (FILE = Census) (MIN(POP), MAX(POP))"))
    for v in parts:
        g = group([None, None], [1, 1], 1)
        to_pb(v, g.mins[0])
        to_pb(v, g.maxs[1])
        merged.add(g)
    assert merged.rows() == [[min(parts), max(parts)]]


def test_a_row_pp_encodes_is_strict_json() -> None:
    """Every sum is checked finite before its row is made: were one not, encoding it
    fails rather than sending JSON no strict reader takes (`Infinity`)."""
    assert pp._dumps([1, 2.5, "a", None]) == '[1,2.5,"a",null]'
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError):
            pp._dumps([bad])
