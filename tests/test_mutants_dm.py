"""DM's descriptor search, cluster search, address generation and lock sets on the census
database, in process, for the mutants the other tests let live (docs/mutation.md)."""

from __future__ import annotations

import json
import sqlite3

from backend import dm, recp_read, recp_write
from backend.cc import IX, S, X
from backend.plancache import PlanCache
from backend.store import Store
from mbds.proto import mbds_pb2 as pb
from mbds.values import from_pb, to_pb
from tests.inproc import ROWS, census, plan, unit


def test_a_conjunction_restricts_an_attribute_by_every_predicate_on_it() -> None:
    d, cids = census()
    # < 500 may be in [0, 999] or in none; > 1500 in [1000, 4999] or none: only none is both.
    [rp] = plan(d, "RETRIEVE ((FILE = Census) and (POP < 500) and (POP > 1500)) (CITY)")
    [fp] = rp.files
    assert fp.clusters == [cids["Albany"]] and not fp.every_cluster
    assert rp.clusters_examined == 1
    # The record condition keeps the POP predicates and drops FILE (settled by the file).
    assert fp.conjunctions == [[("POP", "<", 500), ("POP", ">", 1500)]]


def test_retrieve_common_plans_both_sides() -> None:
    d, cids = census()
    text = ("RETRIEVE ((FILE = Census) and (STATE = NY)) (CITY, STATE) COMMON (STATE, CODE) "
            "RETRIEVE ((FILE = States) and (CODE = NY)) (NAME)")
    tu = unit(d, text)
    # Both sides' predicates are searched: FILE and STATE on the left, FILE and CODE on the right.
    assert [p.attr for _, _, p in dm.predicates(tu)] == ["FILE", "STATE", "FILE", "CODE"]
    [rp] = plan(d, text)
    assert [fp.clusters for fp in rp.files] == [[cids["Albany"]]]
    assert [(fp.schema.name, fp.clusters) for fp in rp.right] == [("STATES", [cids["NY"]])]
    assert [fp.conjunctions for fp in rp.right] == [[[("CODE", "=", "NY")]]]
    assert rp.clusters_examined == 2
    assert dm.lock_set([rp]) == {("file", "CENSUS"): "IS", ("cluster", cids["Albany"]): S,
                                 ("file", "STATES"): "IS", ("cluster", cids["NY"]): S}


def test_the_descriptor_search_shares_of_n_backends_add_up_to_the_whole() -> None:
    d, _ = census()
    tu = unit(d, "[RETRIEVE ((FILE = Census) and (POP > 1500)) (CITY); "
                 "RETRIEVE ((FILE = Census) and (CITY = Carmel) and (AREA = 2.0)) (POP)]")
    whole = dm.descriptor_search(d, tu, 0, 1)
    assert sorted(whole) == [0, 1, 2, 3, 4] and whole[4] is None    # AREA: no directory
    shares = [dm.descriptor_search(d, tu, i, 2) for i in range(2)]
    assert sorted(shares[0]) == [0, 2, 4] and sorted(shares[1]) == [1, 3]
    assert {**shares[0], **shares[1]} == whole


def test_descriptor_results_survive_the_trip_between_backends() -> None:
    """A share as sent (ids sorted, a predicate on no directory attribute unrestricted, one
    that found nothing empty) is, once received and checked, the share as searched."""
    d, _ = census()
    tu = unit(d, "RETRIEVE ((POP > 1500) and (AREA = 2.0) and (CITY = Nowhere)) (POP)")
    found = dm.descriptor_search(d, tu, 0, 1)
    assert found[1] is None and found[2] == set() and len(found[0] or ()) > 1
    msg = pb.DescriptorIds(epoch="e", seq=1)
    dm.add_pb_results(msg, found)
    assert [(m.predicate_index, list(m.descriptor_ids), m.unrestricted)
            for m in msg.results] == [(0, sorted(found[0] or ()), False), (1, [], True),
                                      (2, [], False)]
    wire = pb.DescriptorIds.FromString(msg.SerializeToString())
    cache = PlanCache(d, "b0")
    assert cache.peer_share(cache.checked(tu), tu, 0, 1, list(wire.results)) == found


def test_type_c_attributes_are_those_the_predicates_read() -> None:
    d, _ = census()
    tu = unit(d, "[RETRIEVE ((FILE = Census) and (CITY = Carmel) and (POP > 1)) (STATE); "
                 "RETRIEVE ((FILE = States) and (NAME = x)) (CODE); "
                 "RETRIEVE ((FILE = Census) and (STATE = CA)) (CITY)]")
    assert dm.type_c_attributes(d, tu) == {("CENSUS", "CITY")}
    tu = unit(d, "RETRIEVE ((FILE = States) and (CODE = CA)) (NAME)")
    assert dm.type_c_attributes(d, tu) == {("STATES", "CODE")}
    assert dm.type_c_attributes(d, unit(d, "RETRIEVE (POP > 1) (CITY)")) == set()


def insert_request(clusters: list[int]) -> pb.Request:
    return pb.Request(op=pb.INSERT, file="CENSUS",
                      records=[pb.PlacedRecord(cluster_id=c) for c in clusters])


def test_an_insert_examines_and_locks_the_clusters_it_adds_to() -> None:
    d, cids = census()
    ins = insert_request([4, 9, 4])
    [rp] = dm.plan_requests(d, pb.TrafficUnit(requests=[ins]), {})
    assert rp.clusters_examined == 2 and rp.files == [] and rp.right == []
    assert dm.lock_set([rp]) == {("cluster", 4): X, ("cluster", 9): X, ("file", "CENSUS"): IX}
    # A request after the insert in the same traffic unit adds its own locks.
    tu = pb.TrafficUnit(requests=[insert_request([99]), *unit(
        d, "RETRIEVE ((FILE = States) and (CODE = CA)) (NAME)").requests])
    plans = dm.plan_requests(d, tu, dm.descriptor_search(d, tu, 0, 1))
    assert dm.lock_set(plans) == {("cluster", 99): X, ("file", "CENSUS"): IX,
                                  ("file", "STATES"): "IS", ("cluster", cids["CA"]): S}


def test_a_whole_file_side_does_not_hide_the_other_sides_locks() -> None:
    d, cids = census()
    [rp] = plan(d, "RETRIEVE (FILE = Census) (CITY, STATE) COMMON (STATE, CODE) "
                   "RETRIEVE ((FILE = States) and (CODE = NY)) (NAME)")
    assert dm.lock_set([rp]) == {("file", "CENSUS"): S, ("file", "STATES"): "IS",
                                 ("cluster", cids["NY"]): S}


def test_a_plan_knows_whether_its_request_writes() -> None:
    d, _ = census()
    for text, writes in (("RETRIEVE (FILE = Census) (CITY)", False),
                         ("RETRIEVE (FILE = Census) (CITY) COMMON (STATE, CODE) "
                          "RETRIEVE (FILE = States) (NAME)", False),
                         ("DELETE ((FILE = Census) and (POP > 1))", True),
                         ("UPDATE ((FILE = Census) and (POP > 1)) <AREA = 2.5>", True)):
        [rp] = plan(d, text)
        assert rp.writes is writes, text
    [rp] = dm.plan_requests(d, pb.TrafficUnit(requests=[insert_request([4])]), {})
    assert rp.writes


def test_recp_reads_the_targets_the_plan_names() -> None:
    """The plan of a retrieve is what RECP runs: its rows are the request's targets, its
    groups the request's aggregates."""
    d, cids = census()
    schema = d.files["CENSUS"]
    conn = sqlite3.connect(":memory:")
    Store._create_file_table(conn, schema)
    recp_write.insert(conn, schema, [pb.PlacedRecord(
        cluster_id=cids[city], values=[to_pb(v) for v in (city, pop, 1.5, state)])
        for city, pop, state in ROWS])
    [rp] = plan(d, "RETRIEVE ((FILE = Census) and (STATE = CA)) (POP, CITY)")
    assert sorted(r for b in recp_read.read(conn, 0, rp) for r in json.loads(b.rows.rows_json)
                  ) == [[25, "Monterey"], [2000, "Carmel"]]
    [rp] = plan(d, "RETRIEVE (FILE = Census) (SUM(POP), MAX(CITY)) BY STATE")
    got = {from_pb(g.key): ((g.sums[0].i << 32) + g.sum_lows[0].i, from_pb(g.maxs[1]))
           for r in recp_read.read(conn, 0, rp) for g in r.groups.groups}
    assert got == {"CA": (2025, "Monterey"), "NY": (9000, "Albany")}
