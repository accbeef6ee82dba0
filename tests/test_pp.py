"""PP's merges of the backends' partial results, in process: aggregates are finished from
every backend's partial SUM, COUNT, MIN and MAX, never from the backends' own answers."""

from __future__ import annotations

from controller import aggregates
from mbds.proto import mbds_pb2 as pb
from mbds.values import Value, to_pb
from tests.inproc import census_iig, prepare

AGGREGATES = "(AVG(POP), SUM(POP), COUNT(POP), MIN(POP), MAX(POP))"


def partial(key: Value, pops: list[int]) -> pb.PartialGroup:
    """What one backend sends for one group of POP values (each aggregate item alike)."""
    g = pb.PartialGroup()
    to_pb(key, g.key)
    for _ in range(5):
        to_pb(sum(pops) if pops else None, g.sums.add())
        g.counts.append(len(pops))
        to_pb(min(pops, default=None), g.mins.add())
        to_pb(max(pops, default=None), g.maxs.add())
    return g


def merged(text: str, backends: list[list[tuple[Value, list[int]]]]) -> list[list]:
    [p] = prepare(census_iig().directory, text)
    aggs = aggregates.Aggregates(p)
    for groups in backends:
        for key, pops in groups:
            aggs.add(partial(key, pops))
    return aggs.rows()


def test_a_whole_file_average_weighs_each_backend_by_its_count() -> None:
    # One backend holds two records, the other one: the average is over three records
    # (4.0), not the mean of the two backends' averages (5.5).
    rows = merged(f"RETRIEVE (FILE = Census) {AGGREGATES}", [[(None, [1, 9])], [(None, [2])]])
    assert rows == [[4.0, 12, 3, 1, 9]]


def test_groups_merge_across_backends_and_a_backend_without_records_changes_nothing() -> None:
    rows = merged("RETRIEVE (FILE = Census) (STATE, AVG(POP), COUNT(POP), MAX(POP)) BY STATE",
                  [[("CA", [10, 20, 30]), ("NY", [7])], [("NY", [1, 4])], []])
    assert rows == [["CA", 20.0, 3, 30], ["NY", 4.0, 3, 7]]


def test_an_aggregate_over_no_records_is_null_and_counts_zero() -> None:
    assert merged(f"RETRIEVE (FILE = Census) {AGGREGATES}", [[], []]) == [
        [None, None, 0, None, None]]
