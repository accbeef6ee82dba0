"""IIG's definitions, id allocation and placement on the census database, in process, for
the mutants tests/test_directory.py lets live (docs/mutation.md)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from controller import load
from controller.iig import Iig
from controller.reqp import Reqp
from mbds import columns, metrics
from mbds.directory import Directory
from mbds.errors import DefinitionError
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema, parse_definition
from mbds.values import from_pb, to_pb
from tests.conftest import CENSUS_YAML
from tests.inproc import census_iig, census_key

CENSUS, STATES = parse_definition(CENSUS_YAML)


def descriptors_of(d: Directory, file: str) -> set[tuple]:
    return {(x.attr, x.kind, x.low, x.high, x.value) for x in d.descriptors.values()
            if x.file == file}


def key(iig: Iig, city: str, pop: int, state: str) -> list:
    rec = {"FILE": "CENSUS", "CITY": city, "POP": pop, "STATE": state}
    return [rec[a] for a in iig.directory.files["CENSUS"].directory_attributes]


def test_a_definition_creates_every_directory_attributes_descriptors() -> None:
    iig = Iig(Directory())
    out = iig.define([CENSUS])
    assert out.created == ["CENSUS"]
    # FILE is a type-B attribute; each directory attribute has its no-descriptor class;
    # AREA (not a directory attribute) has nothing, and STATE comes after it.
    assert descriptors_of(iig.directory, "CENSUS") == {
        ("FILE", "B", None, None, "CENSUS"),
        ("CITY", "N", None, None, None),
        ("POP", "N", None, None, None), ("POP", "A", 0, 999, None),
        ("POP", "A", 1000, 4999, None),
        ("STATE", "N", None, None, None), ("STATE", "B", None, None, "CA"),
        ("STATE", "B", None, None, "NY")}


def test_a_stored_file_in_a_definition_does_not_stop_the_files_after_it() -> None:
    iig = Iig(Directory())
    iig.define([CENSUS])
    out = iig.define([CENSUS, STATES])
    assert out.unchanged == ["CENSUS"] and out.created == ["STATES"]
    assert set(iig.directory.files) == {"CENSUS", "STATES"}


def test_redefining_a_file_differently_names_what_may_change() -> None:
    iig = Iig(Directory())
    iig.define([CENSUS])
    other = parse_definition(CENSUS_YAML.replace("[0, 999]", "[0, 99]"))
    with pytest.raises(DefinitionError, match=r"^file CENSUS is already defined differently; "
                       r"a stored file's template and directory cannot be changed "
                       r"\(its indexes can\); to start over, stop the cluster and start "
                       r"it on an empty --data-dir \(compose: `down -v` first\)$"):
        iig.define(other)


def test_a_new_type_c_value_gets_a_type_c_descriptor() -> None:
    iig = Iig(Directory())
    iig.define([CENSUS])
    update = pb.DirectoryUpdate()
    cid = iig.cluster_of("CENSUS", key(iig, "Carmel", 25, "CA"), update)
    [new] = update.descriptors
    assert (new.attr, new.kind) == ("CITY", "C")
    assert ("CITY", "C", None, None, "Carmel") in descriptors_of(iig.directory, "CENSUS")
    assert [c.id for c in update.clusters] == [cid]


def test_a_cluster_definition_teaches_another_directory_the_cluster() -> None:
    iig = Iig(Directory())
    iig.define([CENSUS])
    cid = iig.cluster_of("CENSUS", key(iig, "Carmel", 25, "CA"), pb.DirectoryUpdate())
    other = Directory()
    other.apply(pb.DirectoryUpdate(files=iig.directory.to_update().files,
                                   descriptors=[d.to_pb() for d in iig.directory.descriptors
                                                .values() if d.attr != "CITY"]))
    definition = iig.cluster_definition(cid)
    assert [c.id for c in definition.clusters] == [cid]
    other.apply(definition)
    assert other.clusters[cid] == iig.directory.clusters[cid]
    assert other.descriptor_key("CENSUS", key(iig, "Carmel", 25, "CA")) == list(
        iig.directory.clusters[cid][1])
    assert other.cluster_search("CENSUS", {}) == {cid}


def test_resync_allocates_after_ids_another_iig_added() -> None:
    d = Directory()
    mine, theirs = Iig(d), Iig(d)
    theirs.define([CENSUS])                      # ids mine has not allocated
    for city in ("Carmel", "Albany"):
        theirs.cluster_of("CENSUS", key(theirs, city, 25, "CA"), pb.DirectoryUpdate())
    before_d, before_c = set(d.descriptors), set(d.clusters)
    mine.resync()
    update = pb.DirectoryUpdate()
    cid = mine.cluster_of("CENSUS", key(mine, "Monterey", 25, "CA"), update)
    [new] = update.descriptors
    assert new.id not in before_d and cid not in before_c
    assert d.descriptor_key("CENSUS", key(mine, "Monterey", 25, "CA")) == list(d.clusters[cid][1])
    # Resync never goes back over ids it has handed out itself.
    mine.resync()
    cid2 = mine.cluster_of("CENSUS", key(mine, "Monterey", 2000, "CA"), pb.DirectoryUpdate())
    assert cid2 not in before_c | {cid}


def placements(iig: Iig, records: list[tuple[int, list[str]]]) -> None:
    """Places records (cluster id, backends then) and checks each goes where docs/spec.md says: to
    the backend with the fewest records of its cluster, then the fewest records overall,
    then the first; counting what the coordinator read from the backends at admission."""
    per = {c: dict(n) for c, n in iig.counts.items()}
    total = dict(iig.totals)
    for cid, backends in records:
        want = min(range(len(backends)), key=lambda i: (
            per.get(cid, {}).get(backends[i], 0), total.get(backends[i], 0), i))
        assert iig.choose_backend(cid, backends) == want
        name = backends[want]
        per.setdefault(cid, {})[name] = per.get(cid, {}).get(name, 0) + 1
        total[name] = total.get(name, 0) + 1


B2 = ["b0", "b1"]


def test_placement_of_a_fresh_cluster_prefers_the_emptier_backend() -> None:
    placements(Iig(Directory()), [(1, B2), (2, B2), (3, B2), (4, ["b0", "b1", "b2"])])


@pytest.mark.parametrize("counts, totals, records", [
    # b1 joins with many records of other clusters, none of cluster 7
    ({7: {"b0": 1}}, {"b0": 1, "b1": 4}, [(7, B2)] * 4),
    ({7: {"b0": 2}}, {"b0": 2, "b1": 10}, [(7, B2)] * 6),
    # b1 joins empty: single-record clusters go to it until it catches up
    ({1: {"b0": 5}}, {"b0": 5}, [(c, B2) for c in range(2, 10)]),
])
def test_placement_continues_from_the_counts_read_at_admission(
        counts: dict, totals: dict, records: list) -> None:
    iig = Iig(Directory())
    for cid, per in counts.items():               # as the coordinator admits backends
        iig.counts[cid] = dict(per)
    iig.totals.update(totals)
    placements(iig, records)


def test_a_schema_built_in_code_needs_no_descriptor_specs() -> None:
    iig = Iig(Directory())
    schema = FileSchema("G", [Attribute("K", "string", "C"), Attribute("V", "integer")])
    assert iig.define([schema]).created == ["G"]
    assert descriptors_of(iig.directory, "G") == {("FILE", "B", None, None, "G"),
                                                  ("K", "N", None, None, None)}


# ------------------------------------------------- placing a traffic unit's inserts --

def census_load(rows: list[tuple[str, int, str, str | None]]) -> pb.LoadRequest:
    """A bulk-load chunk of census records (CITY, POP, STATE, body); AREA left null."""
    chunk = pb.LoadRequest(file="CENSUS", attributes=["CITY", "POP", "STATE"])
    for city, pop, state, body in rows:
        row = chunk.records.add(values=[to_pb(city), to_pb(pop), to_pb(state)])
        if body is not None:
            row.body = body
    return chunk


def census_cluster(d: Directory, city: str, pop: int, state: str) -> int:
    rec = {"FILE": "CENSUS", "CITY": city, "POP": pop, "STATE": state}
    values = [rec[a] for a in d.files["CENSUS"].directory_attributes]
    return d.cluster_ids[("CENSUS", tuple(d.descriptor_key("CENSUS", values)))]


def placed(tu: pb.TrafficUnit) -> list[list[tuple]]:
    """Per request of a backend's traffic unit: its records (cluster, values, body)."""
    return [[(r.cluster_id, [from_pb(v) for v in r.values],
              r.body if r.HasField("body") else None) for r in req.records]
            for req in tu.requests]


def place_seen() -> float:
    labels = {"process": "IIG", "handler": "place", "backend": ""}
    return REGISTRY.get_sample_value("mbds_handler_seconds_count", labels) or 0.0


def test_inserts_go_to_their_clusters_on_the_backend_with_fewest() -> None:
    """A bulk load of four records, a RETRIEVE and an INSERT with a body, on two backends:
    each record goes, with its cluster, values and body, to the backend holding the fewest
    of its cluster's records (then the fewest overall, then the first); every backend's
    unit has every request's record count; a new type-C value's descriptor and cluster
    travel in the update once."""
    iig = census_iig()
    d = iig.directory
    reqp = Reqp(d)
    prepared = [reqp.prepare_load(census_load([
        ("Monterey", 25, "CA", None), ("Monterey", 25, "CA", "a {body}"),
        ("Salinas", 40, "CA", None), ("Carmel", 2000, "CA", "")]))]
    more, _ = reqp.prepare("[RETRIEVE (FILE = CENSUS) (CITY); "
                           "INSERT (<FILE, Census>, <CITY, 'Salinas'>, <POP, 40>, "
                           "<STATE, CA>, <AREA, 1.5>) {second}]")
    prepared += more
    backends = ["b0", "b1"]
    units = {b: pb.TrafficUnit(requests=[p.request for p in prepared]) for b in (0, 1)}
    update = pb.DirectoryUpdate()
    timing = metrics.internal_timing()
    metrics.set_internal_timing(True)
    seen = place_seen()
    try:
        counts = iig.place_inserts(prepared, backends, update, units)
    finally:
        metrics.set_internal_timing(timing)
    assert counts == [3, 0, 1]
    assert place_seen() - seen == 5                  # one IIG "place" per inserted record
    m, c = census_cluster(d, "Monterey", 25, "CA"), census_cluster(d, "Carmel", 2000, "CA")
    s = census_cluster(d, "Salinas", 40, "CA")
    assert len({m, c, s}) == 3
    salinas = ["Salinas", 40, None, "CA"]
    assert placed(units[0]) == [
        [(m, ["Monterey", 25, None, "CA"], None), (s, salinas, None)], [], []]
    assert placed(units[1]) == [
        [(m, ["Monterey", 25, None, "CA"], "a {body}"), (c, ["Carmel", 2000, None, "CA"], "")],
        [], [(s, ["Salinas", 40, 1.5, "CA"], "second")]]
    for tu in units.values():
        assert [r.record_count for r in tu.requests] == [4, 0, 1]
    [new] = update.descriptors
    assert (new.file, new.attr, new.kind, from_pb(new.value)) == ("CENSUS", "CITY", "C",
                                                                  "Salinas")
    assert [(x.id, x.file, list(x.descriptor_ids)) for x in update.clusters] == [
        (s, "CENSUS", list(d.clusters[s][1]))]
    assert new.id in d.clusters[s][1]
    assert iig.counts[s] == {"b0": 1, "b1": 1} and iig.totals == {"b0": 2, "b1": 3}


def test_three_backends_spread_a_requests_records() -> None:
    iig = census_iig()
    reqp = Reqp(iig.directory)
    prepared = [reqp.prepare_load(census_load([("Albany", 3000, "NY", None)] * 4))]
    units = {b: pb.TrafficUnit(requests=[prepared[0].request]) for b in range(3)}
    assert iig.place_inserts(prepared, ["b0", "b1", "b2"], pb.DirectoryUpdate(), units) == [1]
    a = census_cluster(iig.directory, "Albany", 3000, "NY")
    assert [[r.cluster_id for r in units[b].requests[0].records] for b in range(3)] == [
        [a, a], [a], [a]]
    assert [units[b].requests[0].record_count for b in range(3)] == [4, 4, 4]


def test_a_moved_record_gets_its_cluster_and_what_was_allocated_for_it() -> None:
    iig = census_iig()
    d = iig.directory
    cid, update = iig.place_moved("CENSUS", census_key(iig, "Carmel", 2000, "CA"))
    assert cid == census_cluster(d, "Carmel", 2000, "CA") and update == pb.DirectoryUpdate()
    cid, update = iig.place_moved("CENSUS", census_key(iig, "Carmel", 25, "CA"))
    assert cid == census_cluster(d, "Carmel", 25, "CA") and cid not in (
        census_cluster(d, "Carmel", 2000, "CA"), census_cluster(d, "Monterey", 25, "CA"))
    assert not update.descriptors
    assert [(x.id, x.file, list(x.descriptor_ids)) for x in update.clusters] == [
        (cid, "CENSUS", list(d.clusters[cid][1]))]
    with pytest.raises(DefinitionError, match=r"^unknown file NOPE$"):
        iig.place_moved("NOPE", ["NOPE"])


def test_a_moved_record_with_the_wrong_directory_values_is_refused() -> None:
    """Place is called by backends, but checks what it gets: the file's directory values,
    as many as it has directory attributes, the first the file's name, each of its type
    (a null is allowed: the record lacks the keyword)."""
    iig = census_iig()
    before = (dict(iig.directory.clusters), dict(iig.directory.descriptors))
    key = census_key(iig, "Carmel", 25, "CA")
    counts = r"^a record of CENSUS has 4 directory values, FILE, CITY, POP, STATE, the first"
    for wrong in (key[:-1], [*key, "extra"], ["STATES", *key[1:]]):
        with pytest.raises(DefinitionError, match=counts):
            iig.place_moved("CENSUS", wrong)
    for at, value, message in ((1, 7, "CENSUS.CITY is string, got int"),
                               (2, "many", "CENSUS.POP is integer, got str"),
                               (2, 2.5, "CENSUS.POP is integer, got float")):
        wrong = list(key)
        wrong[at] = value
        with pytest.raises(DefinitionError, match=f"^{message}$"):
            iig.place_moved("CENSUS", wrong)
    assert (iig.directory.clusters, iig.directory.descriptors) == before   # nothing allocated
    gauges = Iig(Directory())
    gauges.define(parse_definition(
        "files:\n  GAUGE:\n    attributes: {LEVEL: float}\n    directory:\n"
        "      LEVEL: {type: C}\n"))
    for level in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(DefinitionError, match=rf"^GAUGE.LEVEL: {level} is not a finite"):
            gauges.place_moved("GAUGE", ["GAUGE", level])
    assert not gauges.directory.clusters
    with_null = list(key)
    with_null[3] = None
    cid, _ = iig.place_moved("CENSUS", with_null)
    assert iig.directory.clusters[cid][0] == "CENSUS"


# ----------------------------------------- a traffic unit with a columnar load batch --

def census_batch(rows: list[list], bodies: list[str | None] | None = None) -> pb.LoadRequest:
    """A columnar bulk-load chunk of census records (CITY, POP, AREA, STATE)."""
    return pb.LoadRequest(file="CENSUS", attributes=["CITY", "POP", "AREA", "STATE"],
                          columns=columns.encode_batch(rows, 4, 1, bodies))


def batch_placed(tu: pb.TrafficUnit, i: int) -> list[tuple[int, list, Any]]:
    """A backend's records of request i, a load batch: (cluster, values, body)."""
    got = pb.LoadColumns.FromString(tu.requests[i].load_columns)
    if not got.count:
        return []
    values = [columns.decode(c, got.count) for c in got.columns]
    bodies = columns.decode(got.bodies, got.count)
    return [(cid, list(rec), body) for cid, rec, body in zip(
        got.cluster_ids, zip(*values, strict=True), bodies, strict=True)]


def nonzero(counts: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    """Placement counts without the zeros (a cluster or backend with no records)."""
    out = {cid: {b: n for b, n in per.items() if n} for cid, per in counts.items()}
    return {cid: per for cid, per in out.items() if per}


def place_batch_seen() -> float:
    labels = {"process": "IIG", "handler": "place_batch", "backend": ""}
    return REGISTRY.get_sample_value("mbds_handler_seconds_count", labels) or 0.0


def test_a_unit_with_a_load_batch_gets_one_copy_per_backend_with_its_records() -> None:
    """A load batch, an INSERT and a RETRIEVE in one traffic unit on two backends: each
    backend's copy has every request, the batch's records dealt out per cluster and the
    insert's record where it goes, the directory update and the predicate count; taken
    back, the placement counts are as before."""
    iig = census_iig()
    d = iig.directory
    albany = ["Albany", 3000, 1.5, "NY"]
    batch = load.prepare(d, census_batch([albany, albany, ["Salinas", 40, None, "CA"], albany],
                                         bodies=[None, "b", "", None]))
    more, _ = Reqp(d).prepare("[INSERT (<FILE, Census>, <CITY, Carmel>, <POP, 2000>, "
                              "<STATE, CA>); RETRIEVE ((FILE = Census) and (POP > 10)) (CITY)]")
    prepared = [batch, *more]
    backends = ["b0", "b1"]
    before = ({c: dict(n) for c, n in iig.counts.items()}, dict(iig.totals))
    update = pb.DirectoryUpdate()
    timing = metrics.internal_timing()
    metrics.set_internal_timing(True)
    seen = place_batch_seen()
    try:
        units, touched = iig.place_unit(prepared, True, backends, update, 2)
    finally:
        metrics.set_internal_timing(timing)
    assert place_batch_seen() - seen == 1            # one IIG "place_batch" per batch
    assert touched == [2, 1, 0]
    a, c = census_cluster(d, "Albany", 3000, "NY"), census_cluster(d, "Carmel", 2000, "CA")
    s = census_cluster(d, "Salinas", 40, "CA")
    assert batch_placed(units[0], 0) == [(a, albany, None), (a, albany, None)]
    assert batch_placed(units[1], 0) == [(a, albany, "b"),
                                         (s, ["Salinas", 40, None, "CA"], "")]
    assert placed(units[0])[1] == [(c, ["Carmel", 2000, None, "CA"], None)]
    assert placed(units[1])[1] == []
    [new] = update.descriptors
    assert (new.attr, from_pb(new.value)) == ("CITY", "Salinas")
    assert [x.id for x in update.clusters] == [s]
    for tu in units.values():
        assert tu.transaction and tu.directory == update
        assert [r.op for r in tu.requests] == [p.request.op for p in prepared]
        assert [r.record_count for r in tu.requests] == [4, 1, 0]
        assert (tu.predicate_count, tu.split_search) == (2, True)
    iig.unplace(backends, units)
    assert nonzero(iig.counts) == nonzero(before[0])
    assert {b: n for b, n in iig.totals.items() if n} == {b: n for b, n in before[1].items()
                                                          if n}
    # Fewer predicates than the split threshold: searched whole on each backend.
    units, touched = iig.place_unit(more[1:], False, backends, pb.DirectoryUpdate(), 3)
    assert touched == [0]
    assert [(tu.transaction, tu.predicate_count, tu.split_search) for tu in units.values()
            ] == [(False, 2, False)] * 2


def test_a_joining_backends_counts_steer_placement() -> None:
    """A backend that joins reports its records per cluster: the next records of a
    cluster go to the backend with fewer of it, then with fewer records overall."""
    iig = census_iig()
    d = iig.directory
    a = census_cluster(d, "Albany", 3000, "NY")
    m = census_cluster(d, "Monterey", 25, "CA")
    iig.count_backend("b0", [pb.ClusterCount(cluster_id=a, records=2),
                             pb.ClusterCount(cluster_id=m, records=1)])
    iig.count_backend("b1", [pb.ClusterCount(cluster_id=a, records=1)])
    iig.count_backend("b2", [])
    assert iig.totals == {"b0": 3, "b1": 1, "b2": 0}
    assert iig.choose_backend(a, ["b0", "b1"]) == 1        # 1 of it against 2
    assert iig.choose_backend(a, ["b0", "b1"]) == 1        # 2 each: 2 records against 3
    assert iig.choose_backend(a, ["b0", "b1"]) == 0        # 2 of it against 3
    fresh = census_cluster(d, "Carmel", 2000, "CA")
    assert iig.choose_backend(fresh, ["b1", "b2"]) == 1    # none of it; b2 has none at all
    assert iig.choose_backend(fresh, ["b2", "b0"]) == 1    # b2 has one of it now


def dealt(iig: Iig, rows: list[list], backends: list[str], first: int = 1,
          attributes: list[str] | None = None) -> tuple[list[str], list[pb.TrafficUnit]]:
    """Place one columnar batch (each record's body names it: r0, r1, ...): which backend
    each record went to, in load order, and every backend's copy."""
    attrs = attributes or ["CITY", "POP", "AREA", "STATE"]
    chunk = pb.LoadRequest(file="CENSUS", attributes=attrs, columns=columns.encode_batch(
        rows, len(attrs), first, [f"r{i}" for i in range(len(rows))]))
    units = {b: pb.TrafficUnit(requests=[pb.Request(op=pb.INSERT)]) for b in range(len(backends))}
    iig.place_inserts([load.prepare(iig.directory, chunk)], backends, pb.DirectoryUpdate(),
                      units)
    where = {body: backends[b] for b, tu in units.items() for _, _, body in batch_placed(tu, 0)}
    return [where[f"r{i}"] for i in range(len(rows))], [units[b] for b in sorted(units)]


def one_by_one(iig: Iig, rows: list[list], backends: list[str]) -> list[str]:
    """Where `choose_backend` sends the same records one at a time (one cluster each)."""
    return [backends[iig.choose_backend(census_cluster(iig.directory, r[0], r[1], r[3]),
                                        backends)] for r in rows]


ALBANY = ["Albany", 3000, None, "NY"]


@pytest.mark.parametrize("reports, rows, backends, expected", [
    # b0 has one Albany record: the next two go to the others, the third to b0 (all have
    # one then, and b0 no more records overall than they).
    ({"b0": [("Albany", 1)]}, [ALBANY] * 3, ["b0", "b1", "b2"], ["b1", "b2", "b0"]),
    # b0 reports none of Albany but 5 of Monterey: none of Albany either way, fewer overall.
    ({"b0": [("Albany", 0), ("Monterey", 5)]}, [ALBANY], ["b0", "b1"], ["b1"]),
    # b1 joined with no records; b0 never reported: a tie, to the first.
    ({"b1": []}, [ALBANY], ["b0", "b1"], ["b0"]),
])
def test_a_batch_deals_each_cluster_as_records_placed_one_by_one_would_go(
        reports: dict[str, list[tuple[str, int]]], rows: list[list], backends: list[str],
        expected: list[str]) -> None:
    twins = census_iig(), census_iig()
    for iig in twins:
        cids = {c: census_cluster(iig.directory, *k) for c, k in (
            ("Albany", ("Albany", 3000, "NY")), ("Monterey", ("Monterey", 25, "CA")))}
        for name, counts in reports.items():
            iig.count_backend(name, [pb.ClusterCount(cluster_id=cids[c], records=n)
                                     for c, n in counts])
    assert dealt(twins[0], rows, backends)[0] == expected
    assert one_by_one(twins[1], rows, backends) == expected


def test_a_batch_keeps_its_record_numbers_and_values_however_it_is_split() -> None:
    """Whether the client's columns go on as they came, are rebuilt in the file's order,
    or are split (one backend getting a single record), each backend's records keep
    their values and bodies, and the batch's first record number while they are a run
    of the load (a share of a split batch is not: its first is 0)."""
    salinas, carmel = ["Salinas", 40, 2.5, "CA"], ["Carmel", 2000, None, "CA"]
    rows: list[list[Any]] = [ALBANY, salinas, carmel]
    # In the file's order, on one backend: the client's columns as they came.
    where, [tu] = dealt(census_iig(), rows, ["b0"], first=101)
    assert where == ["b0"] * 3
    got = pb.LoadColumns.FromString(tu.requests[0].load_columns)
    assert got.first == 101
    assert [(r, b) for _, r, b in batch_placed(tu, 0)] == [
        (ALBANY, "r0"), (salinas, "r1"), (carmel, "r2")]
    # Another order, without STATE (a directory attribute, all null): rebuilt.
    iig = census_iig()
    where, [tu] = dealt(iig, [[r[1], r[0]] for r in rows], ["b0"], first=7,
                        attributes=["POP", "CITY"])
    got = pb.LoadColumns.FromString(tu.requests[0].load_columns)
    assert got.first == 7
    assert [(r, b) for _, r, b in batch_placed(tu, 0)] == [
        ([r[0], r[1], None, None], f"r{i}") for i, r in enumerate(rows)]
    no_state: Any = None
    assert {cid for cid, _, _ in batch_placed(tu, 0)} == {
        census_cluster(iig.directory, r[0], r[1], no_state) for r in rows}
    # Split: three clusters of one record over two backends, b1 getting one of them.
    where, units = dealt(census_iig(), rows, ["b0", "b1"], first=50)
    assert sorted(where) == ["b0", "b0", "b1"]
    for b, tu in enumerate(units):
        assert pb.LoadColumns.FromString(tu.requests[0].load_columns).first == 0
        assert sorted((body, r) for _, r, body in batch_placed(tu, 0)) == [
            (f"r{i}", rows[i]) for i in range(3) if where[i] == f"b{b}"]
