"""Directory and placement without the network: clusters of the paper database and IIG's
even spread of every cluster's records over the backends."""

from collections import Counter

import pytest

from controller.iig import Iig
from loadgen import paper_db as P
from mbds.directory import Directory
from mbds.errors import DefinitionError
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition


def paper_iig(scale: int = 1) -> Iig:
    iig = Iig(Directory())
    iig.define(parse_definition(P.definition_yaml(scale)))
    return iig


def place_paper(iig: Iig, n: int, scale: int = 1, multi: int = 1) -> Counter:
    placed: Counter = Counter()
    for values, _ in P.records(scale, multi):
        cid = iig.cluster_of(P.FILE, [P.FILE, values[0], values[1]], pb.DirectoryUpdate())
        placed[(cid, iig.choose_backend(cid, [f"b{i}" for i in range(n)]))] += 1
    return placed


@pytest.mark.parametrize("scale", [1, 3])
def test_paper_database_has_24_clusters(scale: int) -> None:
    iig = paper_iig(scale)
    placed = place_paper(iig, 1, scale)
    sizes = sorted(placed.values())
    assert len(sizes) == 24
    assert sizes == [40 * scale] * 23 + [80 * scale]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_each_cluster_is_split_evenly_over_the_backends(n: int) -> None:
    iig = paper_iig()
    placed = place_paper(iig, n, multi=2)
    clusters = {cid for cid, _ in placed}
    for cid in clusters:
        per_backend = [placed[(cid, b)] for b in range(n)]
        assert max(per_backend) - min(per_backend) <= 1, per_backend
        assert sum(per_backend) in (80, 160)


def test_type_c_values_get_sub_descriptors_and_none_class() -> None:
    iig = Iig(Directory())
    iig.define(parse_definition("""
files:
  CENSUS:
    attributes: {CITY: string, POP: integer}
    directory:
      CITY: {type: C}
      POP: {type: A, ranges: [[0, 9], [10, 19]]}
"""))
    upd = pb.DirectoryUpdate()
    a = iig.cluster_of("CENSUS", ["CENSUS", "Monterey", 5], upd)
    b = iig.cluster_of("CENSUS", ["CENSUS", "Monterey", 7], upd)
    c = iig.cluster_of("CENSUS", ["CENSUS", "Carmel", 50], upd)   # POP in no range
    d = iig.cluster_of("CENSUS", ["CENSUS", None, None], upd)     # both no-descriptor
    assert a == b and len({a, c, d}) == 3
    assert [x.value.s for x in upd.descriptors] == ["Monterey", "Carmel"]
    # The copy a backend builds from the update is identical to IIG's.
    copy = Directory()
    copy.apply(iig.directory.to_update())
    assert copy.digest() == iig.directory.digest()
    # Descriptor search: POP >= 15 may be in [10,19] or in the no-descriptor class.
    pop = iig.directory.at[("CENSUS", "POP")]
    assert pop.search(">=", 15) == {pop.range_ids[1], pop.none_id}
    assert iig.directory.at[("CENSUS", "CITY")].search("=", "Nowhere") == set()


def test_entries_allocated_for_a_refused_unit_are_taken_back() -> None:
    """A new type-C value's descriptor and cluster, retracted, leave the directory as it
    was: the value is new again, and what a search finds is unchanged."""
    iig = Iig(Directory())
    iig.define(parse_definition("files: {F: {attributes: {K: string}, directory: {K: {type: C}}}}"))
    kept = iig.cluster_of("F", ["F", "kept"], pb.DirectoryUpdate())
    digest, generation = iig.directory.digest(), iig.directory.generation
    update = pb.DirectoryUpdate()
    iig.cluster_of("F", ["F", "gone"], update)
    assert len(update.descriptors) == len(update.clusters) == 1
    iig.directory.retract(update)
    d = iig.directory
    assert d.digest() == digest and d.generation > generation
    # Nothing of them is left in the indexes cluster search reads either.
    fresh = Iig(Directory())
    fresh.define(parse_definition("files: {F: {attributes: {K: string}, directory: {K: "
                                  "{type: C}}}}"))
    fresh.cluster_of("F", ["F", "kept"], pb.DirectoryUpdate())
    f = fresh.directory
    assert d.file_clusters == f.file_clusters
    assert {k: v for k, v in d.by_did.items() if v} == {k: v for k, v in f.by_did.items() if v}
    assert d.at[("F", "K")].eq == f.at[("F", "K")].eq
    assert d.descriptor_key("F", ["F", "gone"])[1] is None
    assert d.cluster_search("F", {"K": d.descriptor_search(["F"], "K", ">=", "a")}) == {kept}
    with pytest.raises(ValueError, match="only type-C"):
        d.retract(pb.DirectoryUpdate(descriptors=[d.descriptors[1].to_pb()]))


@pytest.mark.parametrize("text,message", [
    ("files: {}", "non-empty 'files'"),
    ("files: {F: {attributes: {A: text}}}", "has type 'text'"),
    ("files: {F: {attributes: {A: integer}, directory: {A: {type: A, ranges: [[0, 5], [5, 9]]}}}}",
     "overlap"),
    ("files: {F: {attributes: {A: integer}, directory: {B: {type: C}}}}", "not an attribute"),
    ("files: {F: {attributes: {FILE: integer}}}", "reserved"),
    ("files: {F: {attributes: {A: integer}, directory: {A: {type: B, values: [x]}}}}",
     "not an integer"),
    ("files: [", "not valid YAML"),
    ("files:\n  X:\n    attributes: {A: integer\n",       # where, without PyYAML's name
     r"^definition is not valid YAML: while parsing a flow mapping\n  line 3, column 17:"),
    ("files: {F: {attributes: {A: integer, b: string, a: string}}}",
     r"^file F: attribute A is named twice \(names are case-insensitive\)$"),
    ("files: {F: {attributes: {9A: integer}}}",
     r"^file F: attribute '9A' is not an identifier \(a letter or _, then letters, digits "
     r"or _\)$"),
    ("files: {dup: {attributes: {A: integer}}, DUP: {attributes: {B: integer}}}",
     r"^file names repeat \(case-insensitively\): DUP$"),
    ("files: {F: {attributes: {}}}", r"^file F: needs a non-empty 'attributes' mapping$"),
    ("files: {F: {attributes: {rid: integer}}}",
     "^file F: attribute RID is a name the backends' storage uses$"),
    ("files: {F: {attributes: {A: integer, Cluster_Id: integer}}}",
     "attribute CLUSTER_ID is a name"),
    ("files: {F: {attributes: {_body: string}}}", "attribute _BODY is a name"),
])
def test_bad_definitions_are_named(text: str, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        parse_definition(text)


def test_redefining_a_file_differently_is_refused() -> None:
    iig = paper_iig()
    out = iig.define(parse_definition(P.definition_yaml()))
    assert out.created == [] and out.unchanged == [P.FILE] and out.reindexed == []
    with pytest.raises(DefinitionError, match="already defined differently"):
        iig.define(parse_definition(P.definition_yaml(2)))


def test_single_record_clusters_still_spread_over_all_backends() -> None:
    iig = Iig(Directory())
    iig.define(parse_definition("files: {F: {attributes: {K: string}, directory: {K: {type: C}}}}"))
    names = ["b0", "b1", "b2"]
    chosen = Counter(iig.choose_backend(iig.cluster_of("F", ["F", f"k{i}"], pb.DirectoryUpdate()),
                                        names) for i in range(30))
    assert chosen == {0: 10, 1: 10, 2: 10}


INDEXED = "files: {F: {attributes: {K: integer, V: string, W: float}, indexes: %s}}"


@pytest.mark.parametrize("indexes, message", [
    ("V", "'indexes' must be a list"),
    ("[X]", "index attribute X is not an attribute"),
    ("[V, v]", "index attributes repeat"),
    ("[1]", "index attribute 1 is not an identifier"),
])
def test_bad_indexes_are_named(indexes: str, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        parse_definition(INDEXED % indexes)


def test_indexes_may_change_but_nothing_else() -> None:
    iig = Iig(Directory())
    first = iig.define(parse_definition(INDEXED % "[V]"))
    assert first.created == ["F"] and iig.directory.files["F"].indexes == ["V"]
    digest = iig.directory.digest()
    again = iig.define(parse_definition(INDEXED % "[v]"))
    assert again.unchanged == ["F"] and not again.update.files
    more = iig.define(parse_definition(INDEXED % "[W, V]"))
    assert more.reindexed == ["F"] and not more.update.descriptors
    assert iig.directory.files["F"].indexes == ["V", "W"]
    assert iig.directory.digest() != digest        # backends that missed it get resynced
    # A template change is refused even when the indexes change with it: nothing applied.
    with pytest.raises(DefinitionError, match="already defined differently"):
        iig.define(parse_definition(
            "files: {F: {attributes: {K: integer, V: string}, indexes: []}}"))
    assert iig.directory.files["F"].indexes == ["V", "W"]


def test_a_backend_copy_applies_an_index_change_once() -> None:
    iig = Iig(Directory())
    copy = Directory()
    copy.apply(iig.define(parse_definition(INDEXED % "[]")).update)
    change = iig.define(parse_definition(INDEXED % "[K]")).update
    assert [f.name for f in copy.apply(change).files] == ["F"]   # new here: persist it
    assert copy.apply(change).files == []                        # idempotent
    assert copy.files["F"].indexes == ["K"] and copy.digest() == iig.directory.digest()
    # A lagging copy's older definition (say, from a backend that rejoins) never wins.
    stale = Directory()
    stale.apply(Iig(Directory()).define(parse_definition(INDEXED % "[]")).update)
    assert copy.apply(stale.to_update()).files == [] and copy.files["F"].indexes == ["K"]
    assert [f.revision for f in copy.to_update().files] == [1]


# Descriptor search at the ends of the ranges [0, 999] and [1000, 4999]: a value on a
# range's end is inside it, one past it is not.
@pytest.mark.parametrize("op,value,ranges", [
    ("=", 999, [0]), ("=", 1000, [1]), ("=", 0, [0]), ("=", 4999, [1]), ("=", 5000, []),
    (">=", 999, [0, 1]), (">=", 1000, [1]), (">=", 4999, [1]), (">=", 5000, []),
    (">", 998, [0, 1]), (">", 999, [1]), (">", 4998, [1]), (">", 4999, []),
    ("<=", 1000, [0, 1]), ("<=", 999, [0]), ("<=", 0, [0]), ("<=", -1, []),
    ("<", 1001, [0, 1]), ("<", 1000, [0]), ("<", 1, [0]), ("<", 0, []),
    ("!=", 500, [0, 1]),
])
def test_range_descriptors_at_their_boundaries(op: str, value: int, ranges: list[int]) -> None:
    iig = paper_iig()
    iig.define(parse_definition("""
files:
  CENSUS:
    attributes: {POP: integer}
    directory:
      POP: {type: A, ranges: [[0, 999], [1000, 4999]]}
"""))
    pop = iig.directory.at[("CENSUS", "POP")]
    # Equality finds the one descriptor the value is in; any other comparison also
    # includes the no-descriptor class (values outside every range may match).
    found = {pop.range_ids[i] for i in ranges} or {pop.none_id}
    if op != "=":
        found.add(pop.none_id)
    assert pop.search(op, value) == found
    # …and a record with that value falls in the range its value is in.
    inside = [i for i, (lo, hi) in enumerate([(0, 999), (1000, 4999)]) if lo <= value <= hi]
    assert pop.find(value) == (pop.range_ids[inside[0]] if inside else pop.none_id)


def test_each_cluster_spreads_over_the_backends_when_inserts_alternate() -> None:
    """Records of two clusters inserted alternately on two backends: each cluster's
    records are split evenly, not each cluster kept whole on one backend (which an even
    spread of the backends' totals alone would allow)."""
    iig = paper_iig()
    names = ["b0", "b1"]
    first, second = (iig.cluster_of(P.FILE, [P.FILE, v, 1], pb.DirectoryUpdate())
                     for v in (1, 201))
    assert first != second
    placed: Counter = Counter()
    for _ in range(10):
        for cid in (first, second):
            placed[(cid, iig.choose_backend(cid, names))] += 1
    assert placed == {(first, 0): 5, (first, 1): 5, (second, 0): 5, (second, 1): 5}


def test_a_cluster_goes_to_the_backend_with_fewest_of_it_then_fewest_overall() -> None:
    iig = paper_iig()
    a, b = (iig.cluster_of(P.FILE, [P.FILE, v, 1], pb.DirectoryUpdate()) for v in (1, 201))
    names = ["b0", "b1", "b2"]
    # Three records of cluster a: one per backend, in index order on ties.
    assert [iig.choose_backend(a, names) for _ in range(3)] == [0, 1, 2]
    # b0 then takes two more of a; cluster b's first record goes where the fewest are.
    assert [iig.choose_backend(a, names) for _ in range(2)] == [0, 1]
    assert iig.choose_backend(b, names) == 2


def test_a_failed_units_placement_is_taken_back() -> None:
    """The records of a unit that failed are stored nowhere: IIG's counts forget them,
    so the next record of their cluster goes where the failed one was meant to."""
    iig = paper_iig()
    names = ["b0", "b1"]
    cid = iig.cluster_of(P.FILE, [P.FILE, 1, 1], pb.DirectoryUpdate())
    assert iig.choose_backend(cid, names) == 0            # a stored record on b0
    failed = pb.TrafficUnit(requests=[pb.Request(records=[pb.PlacedRecord(cluster_id=cid)])])
    assert iig.choose_backend(cid, names) == 1            # the failed unit's, on b1
    iig.unplace(names, {1: failed, 0: pb.TrafficUnit(requests=[pb.Request()])})
    assert iig.counts[cid] == {"b0": 1, "b1": 0} and iig.totals == {"b0": 1, "b1": 0}
    assert iig.choose_backend(cid, names) == 1
