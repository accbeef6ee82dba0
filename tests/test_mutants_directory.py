"""The directory's descriptor search and cluster search on the census database, in process,
for the mutants tests/test_directory.py lets live (docs/mutation.md)."""

from __future__ import annotations

import pytest

from mbds.directory import Directory
from tests.inproc import census


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
