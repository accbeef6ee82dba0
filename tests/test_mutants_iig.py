"""IIG's definitions, id allocation and placement on the census database, in process, for
the mutants tests/test_directory.py lets live (docs/mutation.md)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from controller.iig import Iig
from controller.reqp import Reqp
from mbds import metrics
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
                       r"\(its indexes can\)$"):
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
    """Places records (cluster id, backends then) and checks each goes where SPEC says: to
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
