"""The directory's descriptor search and cluster search on the census database, in process,
for the mutants tests/test_directory.py lets live (docs/mutation.md)."""

from __future__ import annotations

import pytest

from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from tests.inproc import census, census_iig


def did(d: Directory, file: str, attr: str, label: object) -> int:
    """The id of a descriptor: "N" is the no-descriptor class, a pair a range, else a value."""
    for x in d.descriptors.values():
        if (x.file, x.attr) != (file, attr):
            continue
        if (label == "N" and x.kind == "N") or (isinstance(label, tuple) and x.kind == "A"
                                                and (x.low, x.high) == label) or (
                x.kind in "BC" and x.value == label):
            return x.id
    raise KeyError(label)


def test_value_descriptors_answer_inequalities() -> None:
    d, _ = census()
    state = d.at[("CENSUS", "STATE")]
    n = did(d, "CENSUS", "STATE", "N")
    # Type B: the values that satisfy it, and the no-descriptor class (any other state).
    assert state.search("<", "MA") == {did(d, "CENSUS", "STATE", "CA"), n}
    assert state.search(">=", "NY") == {did(d, "CENSUS", "STATE", "NY"), n}
    assert state.search("!=", "CA") == {did(d, "CENSUS", "STATE", "NY"), n}
    # Type C: every value has its own descriptor, so there is no other class to search.
    city = d.at[("CENSUS", "CITY")]
    assert city.search("!=", "Carmel") == {did(d, "CENSUS", "CITY", "Monterey"),
                                           did(d, "CENSUS", "CITY", "Albany")}
    assert city.search(">", "Carmel") == {did(d, "CENSUS", "CITY", "Monterey")}


def test_a_file_predicate_finds_only_file_descriptors() -> None:
    d, _ = census()
    census_file = did(d, "CENSUS", "FILE", "CENSUS")
    assert d.descriptor_search(["CENSUS"], "FILE", "!=", "STATES") == {census_file}
    assert d.descriptor_search(["CENSUS"], "FILE", "=", "STATES") == set()
    # Over two files: the union of what each file's descriptors allow.
    assert d.descriptor_search(["CENSUS", "STATES"], "FILE", "=", "CENSUS") == {census_file}
    assert d.descriptor_search(["STATES", "CENSUS"], "FILE", "!=", "X") == {
        census_file, did(d, "STATES", "FILE", "STATES")}


def test_descriptor_search_of_an_attribute_no_file_indexes_is_unrestricted() -> None:
    d, _ = census()
    assert d.descriptor_search(["CENSUS"], "AREA", "=", 1.5) is None
    assert d.descriptor_search(["CENSUS", "STATES"], "NAME", "=", "x") is None
    # In one of two files only: that file's descriptors.
    assert d.descriptor_search(["STATES", "CENSUS"], "POP", ">", 1500) == {
        did(d, "CENSUS", "POP", (1000, 4999)), did(d, "CENSUS", "POP", "N")}


def test_cluster_search_filters_on_every_restricted_attribute() -> None:
    d, cids = census()
    everything = {cids["Monterey"], cids["Carmel"], cids["Albany"]}
    assert d.cluster_search("CENSUS", {}) == everything
    assert d.cluster_search("STATES", {}) == {cids["CA"], cids["NY"]}
    assert d.cluster_search("NOSUCHFILE", {}) == set()
    ca = {did(d, "CENSUS", "STATE", "CA")}
    low = {did(d, "CENSUS", "POP", (0, 999))}
    census_file = {did(d, "CENSUS", "FILE", "CENSUS")}
    assert d.cluster_search("CENSUS", {"STATE": ca}) == {cids["Monterey"], cids["Carmel"]}
    assert d.cluster_search("CENSUS", {"FILE": census_file}) == everything
    # Two restrictions, given in either order: only the clusters both allow.
    assert d.cluster_search("CENSUS", {"STATE": ca, "POP": low}) == {cids["Monterey"]}
    assert d.cluster_search("CENSUS", {"POP": low, "STATE": ca}) == {cids["Monterey"]}
    assert d.cluster_search("CENSUS", {"FILE": census_file, "STATE": ca, "POP": low}) == {
        cids["Monterey"]}
    # Two descriptors of one attribute: either will do.
    high = {did(d, "CENSUS", "POP", (1000, 4999))}
    assert d.cluster_search("CENSUS", {"POP": low | high}) == {cids["Monterey"], cids["Carmel"]}
    # The attribute with the fewest clusters (STATE = NY: Albany) is filtered by the rest
    # (Albany's POP is in no range).
    ny = {did(d, "CENSUS", "STATE", "NY")}
    assert d.cluster_search("CENSUS", {"POP": low | high, "STATE": ny}) == set()
    assert d.cluster_search("CENSUS", {"FILE": census_file, "POP": low | high,
                                       "STATE": ny}) == set()
    # A descriptor no cluster has yet (no record of another state).
    no_state = {did(d, "CENSUS", "STATE", "N")}
    assert d.cluster_search("CENSUS", {"STATE": ny | no_state}) == {cids["Albany"]}
    assert d.cluster_search("CENSUS", {"STATE": no_state, "POP": low}) == set()


def test_a_record_key_must_have_a_value_per_directory_attribute() -> None:
    d, _ = census()
    assert d.descriptor_key("CENSUS", ["CENSUS", "Carmel", 25, "NY"]) == [
        did(d, "CENSUS", "FILE", "CENSUS"), did(d, "CENSUS", "CITY", "Carmel"),
        did(d, "CENSUS", "POP", (0, 999)), did(d, "CENSUS", "STATE", "NY")]
    with pytest.raises(ValueError):
        d.descriptor_key("CENSUS", ["CENSUS", "Carmel", 25])
    with pytest.raises(ValueError):
        d.descriptor_key("CENSUS", ["CENSUS", "Carmel", 25, "NY", "extra"])


# CENSUS with a non-clustered index it did not have, and a new file named like one of
# CENSUS's directory attributes (names of files and of attributes are apart).
REDEFINED = """
files:
  CENSUS:
    attributes: {CITY: string, POP: integer, AREA: float, STATE: string}
    directory:
      POP: {type: A, ranges: [[0, 999], [1000, 4999]]}
      STATE: {type: B, values: [CA, NY]}
      CITY: {type: C}
    indexes: [AREA]
  STATE:
    attributes: {K: integer, V: string}
    directory:
      K: {type: A, ranges: [[0, 9], [10, 99]]}
      V: {type: C}
"""


def searches(d: Directory) -> list[object]:
    """What descriptor search and cluster search find in CENSUS and STATES."""
    ca = d.descriptor_search(["CENSUS"], "STATE", "=", "CA")
    small = d.descriptor_search(["CENSUS"], "POP", "<", 1000)
    city = d.descriptor_search(["CENSUS"], "CITY", "=", "Albany")
    code = d.descriptor_search(["STATES"], "CODE", "=", "NY")
    return [ca, small, city, code, d.cluster_search("CENSUS", {"STATE": ca or set()}),
            d.cluster_search("CENSUS", {"POP": small or set(), "CITY": city or set()}),
            d.cluster_search("STATES", {"CODE": code or set()})]


def test_files_taken_back_leave_the_directory_as_it_was() -> None:
    """A definition not adopted everywhere is taken back: the re-indexed file gets its old
    schema, the new one goes with its descriptors and clusters, the rest is untouched."""
    iig = census_iig()
    d = iig.directory
    iig.cluster_of("STATES", ["STATES", "NY"], pb.DirectoryUpdate())
    files, digest, found = dict(d.files), d.digest(), searches(d)
    before = {"CENSUS": d.files["CENSUS"], "STATE": None}
    out = iig.define(parse_definition(REDEFINED))
    assert (out.reindexed, out.created) == (["CENSUS"], ["STATE"])
    iig.cluster_of("STATE", ["STATE", 5, "x"], pb.DirectoryUpdate())
    assert d.digest() != digest
    d.restore_files(before)
    assert d.files == files and d.files["CENSUS"] is files["CENSUS"]
    assert d.digest() == digest
    assert searches(d) == found
    d.restore_files({"STATE": None, "NOWHERE": None})   # not there (or no more): no-op
    assert d.files == files and searches(d) == found
    # Defined again, the new file starts empty.
    iig.define(parse_definition(REDEFINED))
    assert d.cluster_search("STATE", {}) == set()


def test_every_change_to_the_directory_starts_a_generation_never_seen_before() -> None:
    """Plans are kept per generation: one seen twice would reuse a plan of another
    directory."""
    iig = census_iig()
    d = iig.directory
    seen = [d.generation]

    def changed(expected: bool) -> None:
        assert (d.generation != seen[-1]) is expected
        seen.append(d.generation)

    d.apply(d.to_update())                 # nothing new
    changed(False)
    before = {"CENSUS": d.files["CENSUS"], "STATE": None}
    out = iig.define(parse_definition(REDEFINED))
    changed(True)
    d.restore_files(before)
    changed(True)
    copy = Directory()                     # a backend's copy: files, descriptors, clusters
    g = copy.generation
    copy.apply(pb.DirectoryUpdate(files=out.update.files))
    assert copy.generation != g
    g = copy.generation
    copy.apply(pb.DirectoryUpdate(descriptors=out.update.descriptors))
    assert copy.generation != g
    update = pb.DirectoryUpdate()
    iig.define(parse_definition(REDEFINED))
    changed(True)
    iig.cluster_of("STATE", ["STATE", 5, "x"], update)
    changed(True)
    g = copy.generation
    copy.apply(pb.DirectoryUpdate(clusters=update.clusters))
    assert copy.generation != g
    # Re-indexing alone (a file at a newer revision, nothing else) is a change too.
    reindexed = iig.define(parse_definition(REDEFINED.replace("[AREA]", "[AREA, CITY]")))
    changed(True)
    g = copy.generation
    assert copy.apply(pb.DirectoryUpdate(files=reindexed.update.files)).files
    assert copy.generation != g
    d.restore_files({"STATE": None})
    changed(True)
    assert len(set(seen)) == len(seen) - 1        # only the update with nothing new
