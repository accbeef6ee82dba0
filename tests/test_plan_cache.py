"""DM's plan cache (backend/plancache.py): a repeated traffic unit reuses its checks and
plans only while the directory is the one they were made from. Every directory change
(a new descriptor, cluster or file, a definition taken back) must be seen by the next
unit of the same requests, on one backend and on several."""

from __future__ import annotations

import pytest

from backend.check import BadMessage
from backend.plancache import KEY_BYTES, PlanCache
from mbds import metrics
from mbds.directory import file_schema_to_pb
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from tests.conftest import CENSUS_YAML, Running
from tests.inproc import census_iig, census_key, unit
from tests.test_metrics import scrape, series

RETRIEVE = "RETRIEVE ((FILE = Census) and (CITY = Newtown)) (CITY, POP)"


def test_a_repeated_unit_gets_its_shape_until_the_directory_changes() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")
    first = cache.checked(unit(iig.directory, RETRIEVE))
    again = unit(iig.directory, RETRIEVE)
    assert cache.checked(again) is first
    found = cache.search(first, again, 0, 1)
    assert found == {0: {iig.directory.at[("CENSUS", "FILE")].eq["CENSUS"]}, 1: set()}
    plans, _ = cache.plan(first, again, found)
    assert plans[0].files[0].clusters == []          # no Newtown cluster yet
    assert cache.plan(first, again, found)[0] is plans
    # A new cluster (with a new type-C descriptor for Newtown) starts a new generation.
    generation = iig.directory.generation
    iig.cluster_of("CENSUS", census_key(iig, "Newtown", 5, "CA"), pb.DirectoryUpdate())
    assert iig.directory.generation > generation
    assert cache.plan(first, again, found)[0] is not plans       # made anew, not kept
    shape = cache.checked(unit(iig.directory, RETRIEVE))
    assert shape is not first
    found = cache.search(shape, again, 0, 1)
    plans, locks = cache.plan(shape, again, found)
    [cid] = plans[0].files[0].clusters
    assert locks[("cluster", cid)] == "S"


def test_other_shares_and_other_ids_are_planned_apart() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")
    text = "RETRIEVE ((FILE = Census) and (STATE = CA)) or ((FILE = Census) and (POP < 10)) (CITY)"
    tu = unit(iig.directory, text)
    shape = cache.checked(tu)
    assert cache.search(shape, tu, 0, 2).keys() == {0, 2}
    assert cache.search(shape, tu, 1, 2).keys() == {1, 3}
    whole = cache.search(shape, tu, 0, 1)
    plans, _ = cache.plan(shape, tu, whole)
    narrower = dict(whole) | {1: set()}    # a peer that found no STATE = CA descriptor
    other, _ = cache.plan(shape, tu, narrower)
    assert other is not plans and len(other[0].files[0].clusters) < len(
        plans[0].files[0].clusters)


def test_bad_units_and_inserts_are_never_kept() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")
    bad = unit(iig.directory, "RETRIEVE ((FILE = Census) and (POP = 5)) (CITY)")
    bad.requests[0].retrieval.query.conjunctions[0].predicates[1].value.s = "five"
    for _ in range(2):
        with pytest.raises(BadMessage, match="POP is integer"):
            cache.checked(bad)
    assert not cache.shapes
    insert = pb.TrafficUnit(requests=[pb.Request(op=pb.INSERT, file="CENSUS")])
    cache.checked(insert)
    assert not cache.shapes


def test_the_cache_keeps_the_most_recently_used_shapes() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t", size=2)
    texts = [f"RETRIEVE ((FILE = Census) and (POP = {i})) (CITY)" for i in range(3)]
    shapes = [cache.checked(unit(iig.directory, t)) for t in texts[:2]]
    assert cache.checked(unit(iig.directory, texts[0])) is shapes[0]   # now the newest
    cache.checked(unit(iig.directory, texts[2]))
    assert len(cache.shapes) == 2
    assert cache.checked(unit(iig.directory, texts[0])) is shapes[0]
    assert cache.checked(unit(iig.directory, texts[1])) is not shapes[1]


def test_the_generation_counts_changes_only() -> None:
    iig = census_iig()
    directory = iig.directory
    g = directory.generation
    directory.apply(directory.to_update())          # nothing new
    assert directory.generation == g
    [schema] = parse_definition("files:\n  EXTRA:\n    attributes: {K: integer}\n"
                                "    directory:\n      K: {type: C}\n")
    before = {"EXTRA": None}
    directory.apply(pb.DirectoryUpdate(files=[file_schema_to_pb(schema)]))
    assert directory.generation == g + 1
    directory.restore_files(before)
    assert directory.generation == g + 2 and "EXTRA" not in directory.files


@pytest.mark.parametrize("n", [1, 2])
def test_repeated_requests_see_every_new_cluster_through_the_real_system(
        cluster_factory, n: int) -> None:
    r: Running = cluster_factory(n, metrics_port=0)
    c = r.client
    c.define(CENSUS_YAML)
    ranged = "RETRIEVE ((FILE = Census) and (POP > 1000) and (STATE = NY)) (CITY)"
    for _ in range(3):                      # planned once, then taken from the cache
        assert c.execute(RETRIEVE)[0].records == []
        assert c.execute(ranged)[0].records == []
    # A new type-C value and a new cluster: the same requests must find them.
    c.execute("INSERT (<FILE, Census>, <CITY, Newtown>, <POP, 3000>, <STATE, NY>)")
    assert c.execute(RETRIEVE)[0].records == [{"CITY": "Newtown", "POP": 3000}]
    assert c.execute(ranged)[0].records == [{"CITY": "Newtown"}]
    # A record moved into another cluster by an UPDATE of a directory attribute.
    c.execute("UPDATE ((FILE = Census) and (CITY = Newtown)) <POP = 20>")
    assert c.execute(ranged)[0].records == []
    assert c.execute(RETRIEVE)[0].records == [{"CITY": "Newtown", "POP": 20}]
    status = c.status()
    hits = series(scrape([b.metrics_url for b in status.backends]), "mbds_plan_cache_total")
    by_result: dict[str, float] = {}
    for labels, v in hits.items():
        by_result[dict(labels)["result"]] = by_result.get(dict(labels)["result"], 0) + v
    assert by_result["hit"] >= 4 * n and by_result["miss"] >= 4 * n


def test_a_shape_keeps_no_share_or_plans_over_its_bound() -> None:
    iig = census_iig()
    whole = "RETRIEVE (FILE = Census) (CITY)"          # every cluster of the file
    cache = PlanCache(iig.directory, "t", items=len(iig.directory.file_clusters["CENSUS"]) - 1)
    tu = unit(iig.directory, whole)
    shape = cache.checked(tu)
    found = cache.search(shape, tu, 0, 1)
    assert found and shape.shares                       # one FILE descriptor: kept
    plans, _ = cache.plan(shape, tu, found)
    assert len(plans[0].files[0].clusters) > cache.items
    assert shape.planned is None and cache.plan(shape, tu, found)[0] is not plans
    roomy = PlanCache(iig.directory, "t")
    shape = roomy.checked(tu)
    plans, _ = roomy.plan(shape, tu, roomy.search(shape, tu, 0, 1))
    assert roomy.plan(shape, tu, roomy.search(shape, tu, 0, 1))[0] is plans


def _count(result: str) -> float:
    return metrics.PLAN_CACHE.labels(result, "counted").value


def test_a_shape_holds_the_units_type_c_attributes_and_did_groups_and_counts() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "counted")
    hits, misses = _count("hit"), _count("miss")
    shape = cache.checked(unit(iig.directory, RETRIEVE))
    assert shape.attrs == {("CENSUS", "CITY")}                 # CITY is type C, FILE not
    assert shape.groups == {("didgroup", "CENSUS", "FILE"): "S",
                            ("didgroup", "CENSUS", "CITY"): "S"}
    assert (_count("hit"), _count("miss")) == (hits, misses + 1)
    assert cache.checked(unit(iig.directory, RETRIEVE)) is shape
    assert (_count("hit"), _count("miss")) == (hits + 1, misses + 1)


@pytest.mark.parametrize("part", ["files", "descriptors", "clusters"])
def test_a_unit_with_any_directory_update_is_never_kept(part: str) -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")
    tu = unit(iig.directory, RETRIEVE)
    getattr(tu.directory, part).add()
    cache.checked(tu)
    assert not cache.shapes


def test_a_stale_shape_searches_and_plans_the_directory_as_it_is() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")
    tu = unit(iig.directory, RETRIEVE)
    shape = cache.checked(tu)
    before = cache.search(shape, tu, 0, 1)
    assert cache.search(shape, tu, 0, 1) is before            # kept while it holds
    iig.cluster_of("CENSUS", census_key(iig, "Newtown", 5, "CA"), pb.DirectoryUpdate())
    newtown = iig.directory.at[("CENSUS", "CITY")].eq["Newtown"]
    halves = [cache.search(shape, tu, i, 2) for i in range(2)]
    assert halves[1] == {1: {newtown}} and halves[0].keys() == {0}
    assert not shape.shares.keys() - {(0, 1)}                 # nothing kept of a stale one


def test_a_share_and_plans_of_exactly_the_bound_are_kept() -> None:
    iig = census_iig()
    # Monterey: one FILE and one CITY descriptor id, one cluster.
    text = "RETRIEVE ((FILE = Census) and (CITY = Monterey)) (POP)"
    cache = PlanCache(iig.directory, "t", items=2)
    tu = unit(iig.directory, text)
    shape = cache.checked(tu)
    found = cache.search(shape, tu, 0, 1)
    assert sum(len(d) for d in found.values() if d) == 2
    assert cache.search(shape, tu, 0, 1) is found
    plans, _ = cache.plan(shape, tu, found)
    assert cache.plan(shape, tu, found)[0] is plans
    whole = "RETRIEVE (FILE = Census) (CITY)"             # one id, three clusters
    cache = PlanCache(iig.directory, "t", items=3)
    tu = unit(iig.directory, whole)
    shape = cache.checked(tu)
    plans, _ = cache.plan(shape, tu, cache.search(shape, tu, 0, 1))
    assert len(plans[0].files[0].clusters) == 3
    assert cache.plan(shape, tu, cache.search(shape, tu, 0, 1))[0] is plans


def test_a_unit_whose_requests_are_over_the_key_bound_is_not_kept() -> None:
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")

    def named(k: int) -> pb.TrafficUnit:
        return unit(iig.directory, f"RETRIEVE ((FILE = Census) and (CITY = '{'x' * k}')) (POP)")

    # The key grows a byte per character while the length's varint keeps its two bytes.
    base = len(named(200).requests[0].SerializeToString())
    at_bound = KEY_BYTES - base + 200
    assert len(named(at_bound).requests[0].SerializeToString()) == KEY_BYTES
    cache.checked(named(at_bound))
    assert len(cache.shapes) == 1
    cache.checked(named(at_bound + 1))
    assert len(cache.shapes) == 1


# Predicates 0 (FILE), 1 (POP, ranges), 2 (AREA, no descriptors) of one unit.
SPLIT = "RETRIEVE ((FILE = Census) and (POP > 1000) and (AREA = 2.5)) (CITY)"


def test_a_split_unit_must_count_its_requests_predicates() -> None:
    """Who sends ids and who waits for them is worked out from the unit's m: a unit whose
    m is not its requests' own is refused, checked anew or found in the cache."""
    iig = census_iig()
    cache = PlanCache(iig.directory, "t")
    for m, split in ((3, True), (3, False), (5, False)):
        tu = unit(iig.directory, SPLIT)
        tu.predicate_count, tu.split_search = m, split
        for _ in range(2):                   # a miss, then a hit
            assert cache.checked(tu).predicates == 3
    for m in (2, 4):
        tu = unit(iig.directory, SPLIT)
        tu.predicate_count, tu.split_search = m, True
        for _ in range(2):
            with pytest.raises(BadMessage) as e:
                cache.checked(tu)
            assert str(e.value) == f"the unit counts {m} predicates; its requests have 3"


def test_a_peers_share_is_checked_and_trusted_again_only_while_the_directory_lasts() -> None:
    iig = census_iig()
    d = iig.directory
    cache = PlanCache(d, "t")
    tu = unit(d, SPLIT)
    shape = cache.checked(tu)
    file_did = d.at[("CENSUS", "FILE")].eq["CENSUS"]
    pop = sorted(d.descriptor_search(["CENSUS"], "POP", ">", 1000) or ())
    share0 = [pb.PredicateDescriptors(predicate_index=0, descriptor_ids=[file_did]),
              pb.PredicateDescriptors(predicate_index=2, unrestricted=True)]
    share1 = [pb.PredicateDescriptors(predicate_index=1, descriptor_ids=pop)]
    for _ in range(2):                       # checked, then the same share again
        assert cache.peer_share(shape, tu, 0, 2, share0) == {0: {file_did}, 2: None}
        assert cache.peer_share(shape, tu, 1, 2, share1) == {1: set(pop)}
    with pytest.raises(BadMessage, match=r"^a predicate's ids sent twice$"):
        cache.peer_share(shape, tu, 0, 2, [*share0, share0[0]])
    # Another share from the same sender is checked, though one of its passed before.
    bad = [pb.PredicateDescriptors(predicate_index=1, descriptor_ids=[*pop, 10**6])]
    with pytest.raises(BadMessage, match="1000000 is not one of its attribute's descriptors"):
        cache.peer_share(shape, tu, 1, 2, bad)
    with pytest.raises(BadMessage, match=r"^predicate 2 on 'AREA' sent with ids"):
        cache.peer_share(shape, tu, 0, 2, [share0[0], pb.PredicateDescriptors(
            predicate_index=2, descriptor_ids=[file_did])])
    with pytest.raises(BadMessage, match=r"^no ids for predicate 1"):
        cache.peer_share(shape, tu, 1, 2, [])


def test_a_share_that_passed_on_an_older_directory_is_checked_again() -> None:
    """A share checked after the directory moved on is not kept: the next change (here a
    definition taken back) may make it wrong."""
    iig = census_iig()
    d = iig.directory
    [schema] = parse_definition("files:\n  EXTRA:\n    attributes: {K: integer}\n"
                                "    directory:\n      K: {type: C}\n")
    d.apply(pb.DirectoryUpdate(files=[file_schema_to_pb(schema)]))
    iig.resync()
    iig.cluster_of("EXTRA", ["EXTRA", 5], pb.DirectoryUpdate())
    cache = PlanCache(d, "t")
    tu = unit(d, "RETRIEVE ((FILE = Extra) and (K = 5)) (K)")
    shape = cache.checked(tu)
    iig.cluster_of("EXTRA", ["EXTRA", 6], pb.DirectoryUpdate())      # a newer directory
    five = sorted(d.descriptor_search(["EXTRA"], "K", "=", 5) or ())
    share = [pb.PredicateDescriptors(predicate_index=1, descriptor_ids=five)]
    for _ in range(2):
        assert cache.peer_share(shape, tu, 1, 2, share) == {1: set(five)}
    d.restore_files({"EXTRA": None})
    with pytest.raises(BadMessage, match=r"^predicate 1 on 'K' sent with ids"):
        cache.peer_share(shape, tu, 1, 2, share)
