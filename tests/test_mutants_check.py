"""A backend's checks of the units and directory updates it is sent, in process, on the
census directory: what each refuses, with an error naming what is wrong, and what
each lets through (docs/mutation.md)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from backend import check
from backend.check import BadMessage
from controller.iig import Iig
from mbds import columns, traffic
from mbds.descriptors import Descriptor
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import Value, to_pb
from tests.inproc import census, census_key, census_placed, unit

DIRECTORY, CIDS = census()
Tamper = Callable[[pb.Request], object]


@pytest.fixture(autouse=True)
def no_cached_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the check's attributes-as-compared not yet made, as a new
    backend does; else one made by an earlier test stands in for this one's."""
    monkeypatch.setattr(check, "_AS_COMPARED", {})


def tampered(text: str, change: Tamper | None = None) -> pb.TrafficUnit:
    """The unit REQP forms for `text`, its request then changed by `change`."""
    tu = unit(DIRECTORY, text)
    if change is not None:
        change(tu.requests[0])
    return tu


def refused(tu: pb.TrafficUnit) -> str:
    with pytest.raises(BadMessage) as e:
        check.traffic_unit(DIRECTORY, tu)
    return str(e.value)


def record(cid: int, *values: Value) -> pb.PlacedRecord:
    return pb.PlacedRecord(cluster_id=cid, values=[to_pb(v) for v in values])


def insert(*records: pb.PlacedRecord) -> pb.Request:
    return pb.Request(op=pb.INSERT, file="CENSUS", records=records)


SEL = "RETRIEVE ((FILE = CENSUS) and (POP > 1)) (CITY)"
LONG = "F" * 64


def predicate(req: pb.Request) -> pb.Predicate:
    return req.retrieval.query.conjunctions[0].predicates[1]


def _set(**fields: object) -> Tamper:
    """A change of the request's fields (`m__x`: its modifier's, `p__x`: its predicate
    after FILE's)."""
    def change(req: pb.Request) -> None:
        for name, value in fields.items():
            obj, _, attr = name.rpartition("__")
            target = req.modifier if obj == "m" else predicate(req) if obj == "p" else req
            if attr == "value":
                target.value.CopyFrom(to_pb(value))  # type: ignore[arg-type]
            else:
                setattr(target, attr, value)
    return change


@pytest.mark.parametrize("text, change, message", [
    (SEL, lambda r: r.retrieval.query.conjunctions[0].files.__setitem__(0, LONG),
     f"unknown file '{LONG}'"),
    (SEL, lambda r: r.retrieval.query.conjunctions[0].files.__setitem__(0, LONG + "G"),
     f"unknown file '{LONG}…'"),
    (SEL, _set(p__op=len(traffic.RELOPS)), "unknown comparison 6"),
    (SEL, _set(p__attr="FILE", p__value=3), "FILE compared with something other than a name"),
    (SEL, _set(p__attr="NOPE"), "no file of the query has attribute 'NOPE'"),
    (SEL, _set(p__attr="CITY"), "predicate: CITY is string, got int"),
    (SEL, _set(p__value=math.inf), "predicate: inf is not a finite number"),
    (SEL, lambda r: setattr(r.retrieval.targets[0], "agg", "MEDIAN"),
     "unknown aggregate 'MEDIAN'"),
    (SEL, _set(op=99), "unknown operation 99"),
    ("UPDATE (FILE = CENSUS) <AREA = 1.5>", _set(m__attr="NOPE"),
     "file CENSUS has no attribute 'NOPE'"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA>", _set(m__source="NOPE"),
     "file CENSUS has no attribute 'NOPE'"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 2>", _set(m__arith="%"),
     "unknown arithmetic '%'"),
    ("UPDATE (FILE = CENSUS) <AREA = 1.5>", _set(moves_records=True),
     "an UPDATE of 'AREA' that says records move"),
    ("UPDATE (FILE = CENSUS) <POP = 5>", _set(moves_records=False),
     "an UPDATE of 'POP' that says records stay"),
    ("UPDATE (FILE = CENSUS) <AREA = 1.5>", _set(m__value="x"),
     "modifier: AREA is float, got str"),
    ("UPDATE (FILE = CENSUS) <AREA = 1.5>", _set(m__value=-math.inf),
     "modifier: -inf is not a finite number"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA>", _set(m__source="CITY"),
     "modifier: cannot copy string CITY into float AREA"),
    ("UPDATE (FILE = CENSUS) <POP = POP>", _set(m__source="AREA"),
     "modifier: cannot copy float AREA into integer POP"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 2>", _set(m__source="CITY"),
     "modifier: arithmetic on AREA needs numbers"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 2>", _set(m__value="x"),
     "modifier: arithmetic on AREA needs numbers"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 2>", _set(m__value=None),
     "modifier: arithmetic on AREA needs numbers"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 2>", _set(m__value=math.inf),
     "modifier: inf is not a finite number"),
    ("UPDATE (FILE = CENSUS) <POP = POP * 2>", _set(m__value=1.5),
     "modifier: POP is integer, POP * 1.5 a float"),
    ("UPDATE (FILE = CENSUS) <POP = POP + 2>", _set(m__source="AREA"),
     "modifier: POP is integer, AREA + 2 a float"),
    ("UPDATE (FILE = CENSUS) <AREA = AREA / 2>", _set(m__value=0),
     "modifier: division by zero"),
])
def test_a_refused_request_is_named_by_what_is_wrong(text: str, change: Tamper,
                                                     message: str) -> None:
    """Each fault of a request, alone in it, refused with its own words (a name longer
    than 64 characters cut to 64 and an ellipsis)."""
    assert refused(tampered(text, change)) == message


@pytest.mark.parametrize("text, change", [
    ("RETRIEVE ((FILE = CENSUS) and (AREA > 1)) (CITY)", None),
    ("RETRIEVE ((FILE = CENSUS) and (CITY = x)) (CITY)", None),
    (SEL, _set(p__value=1.5)),                    # any number for a number attribute
    (SEL, _set(p__op=5)),
    (SEL, lambda r: setattr(r.retrieval.targets[0], "agg", "MAX")),
    ("UPDATE (FILE = CENSUS) <AREA = AREA>", None),
    ("UPDATE (FILE = CENSUS) <AREA = POP>", None),      # an integer copied into a float
    ("UPDATE (FILE = CENSUS) <AREA = 2>", None),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 1.5>", None),
    ("UPDATE (FILE = CENSUS) <AREA = POP * 1.5>", None),
    ("UPDATE (FILE = CENSUS) <AREA = AREA * 0>", None),
    ("UPDATE (FILE = CENSUS) <AREA = AREA / 2>", None),
    ("UPDATE (FILE = CENSUS) <POP = POP + 1>", None),
    ("UPDATE (FILE = CENSUS) <CITY = STATE>", None),
    ("UPDATE (FILE = CENSUS) <AREA = AREA>", _set(m__value=None)),   # a copy: no value
])
def test_a_request_that_fits_is_let_through(text: str, change: Tamper | None) -> None:
    check.traffic_unit(DIRECTORY, tampered(text, change))


@pytest.mark.parametrize("records, message", [
    ([record(CIDS["CA"], "x", 1, 1.0, "CA")],          # a cluster of STATES
     f"cluster {CIDS['CA']} is not a cluster of CENSUS"),
    ([record(10**6, "x", 1, 1.0, "CA")], "cluster 1000000 is not a cluster of CENSUS"),
    ([record(1, "x", 1, 1.0)], "a record of CENSUS has 3 values for 4 attributes"),
    ([record(1, "x", 1, 1.0, "CA"), record(1, "x", "1", 1.0, "CA")],
     "inserted value: POP is integer, got str"),
    ([record(1, "x", 1, math.nan, "CA")], "inserted value: nan is not a finite number"),
])
def test_a_refused_insert_names_its_bad_record(records: list[pb.PlacedRecord],
                                               message: str) -> None:
    assert refused(pb.TrafficUnit(requests=[insert(*records)])) == message


def test_an_insert_of_records_that_fit_is_let_through() -> None:
    check.traffic_unit(DIRECTORY, pb.TrafficUnit(requests=[insert(
        record(CIDS["Monterey"], "Monterey", 1, 2.5, "CA"),
        record(CIDS["Carmel"], "Carmel", 4999, None, "CA"),
        record(CIDS["Monterey"], "Monterey", 999, 2.5, "CA"),
        # Albany's POP is of no range: values below, between none, and above them.
        record(CIDS["Albany"], "Albany", -5, 1.0, "NY"),
        record(CIDS["Albany"], "Albany", 9000, 1.0, "NY"),
        record(CIDS["Albany"], "Albany", 5000, 1.0, "NY"))]))


@pytest.mark.parametrize("records, message", [
    ([record(CIDS["Albany"], "Monterey", 25, 1.0, "CA")],
     f"inserted record 1 is not of cluster {CIDS['Albany']}: its CITY 'Monterey', POP 25, "
     "STATE 'CA' describe another cluster"),
    ([record(CIDS["Monterey"], "Monterey", 25, 1.0, "CA"),
      record(CIDS["Monterey"], "Monterey", 1000, 1.0, "CA")],
     f"inserted record 2 is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP "
     "1000, STATE 'CA' describe another cluster"),
    ([record(CIDS["Albany"], "Albany", -5, 1.0, "NY"),
      record(CIDS["Albany"], "Albany", 500, 1.0, "NY"),
      record(CIDS["Albany"], "Albany", 6000, 1.0, "NY")],
     f"inserted record 2 is not of cluster {CIDS['Albany']}: its CITY 'Albany', POP 500, "
     "STATE 'NY' describe another cluster"),
    ([record(CIDS["Monterey"], "Monterey", None, 1.0, "CA")],
     f"inserted record 1 is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP "
     "None, STATE 'CA' describe another cluster"),
    ([record(CIDS["Monterey"], "M" * 50, 25, 1.0, "CA")],
     f"inserted record 1 is not of cluster {CIDS['Monterey']}: its CITY '{'M' * 39}…, POP "
     "25, STATE 'CA' describe another cluster"),
])
def test_an_inserted_record_not_of_its_cluster_is_refused(records: list[pb.PlacedRecord],
                                                          message: str) -> None:
    """A record filed in a cluster its directory values do not describe would be where
    no search by those values finds it: refused, naming the record and its values."""
    assert refused(pb.TrafficUnit(requests=[insert(*records)])) == message


def test_every_request_after_an_insert_is_checked_too() -> None:
    """An INSERT's checks end its own request, not the unit's."""
    bad = tampered(SEL, _set(p__attr="CITY")).requests[0]
    tu = pb.TrafficUnit(requests=[insert(record(CIDS["Monterey"], "Monterey", 1, 2.5, "CA")),
                                  bad])
    assert refused(tu) == "predicate: CITY is string, got int"


def test_a_common_retrieve_checks_both_its_sides() -> None:
    left = tampered(SEL).requests[0].retrieval
    right = tampered("RETRIEVE ((FILE = STATES) and (CODE = CA)) (CODE)").requests[0].retrieval
    req = pb.Request(op=pb.RETRIEVE_COMMON, retrieval=left, right=right)
    check.traffic_unit(DIRECTORY, pb.TrafficUnit(requests=[req]))
    req.right.query.conjunctions[0].predicates[1].attr = "NOPE"
    assert refused(pb.TrafficUnit(requests=[req])) == (
        "no file of the query has attribute 'NOPE'")
    # A RETRIEVE's empty `right` is no second side to check.
    plain = pb.Request(op=pb.RETRIEVE, retrieval=left, right=req.right)
    check.traffic_unit(DIRECTORY, pb.TrafficUnit(requests=[plain]))


def test_a_load_batch_that_does_not_parse_is_named() -> None:
    req = pb.Request(op=pb.INSERT, file="CENSUS", load_columns=b"\xff\xff\xff")
    assert refused(pb.TrafficUnit(requests=[req])) == "a load batch that does not parse"


ROWS: list[list[Value]] = [["Monterey", 1, 1.5, "CA"], ["Carmel", 2000, None, "CA"],
                           ["Monterey", 3, 2.0, "CA"], ["Carmel", 4000, 0.5, "CA"]]


def batch(bodies: list[str | None] | None = None) -> pb.LoadColumns:
    b = columns.encode_batch(ROWS, 4, 11, bodies)
    b.cluster_ids.extend([CIDS["Monterey"], CIDS["Carmel"], CIDS["Monterey"], CIDS["Carmel"]])
    return b


def loading(b: pb.LoadColumns) -> pb.TrafficUnit:
    return pb.TrafficUnit(requests=[pb.Request(op=pb.INSERT, file="CENSUS", columns=b)])


def test_a_load_batch_with_bodies_that_fits_is_let_through() -> None:
    """Bodies as plain strings, by dictionary, with nulls, or none at all."""
    cases: list[list[str | None] | None] = [
        ["x", "y", "z", "w"], ["x", "y", "x", "y"], ["x", None, "y", None], None]
    for bodies in cases:
        check.traffic_unit(DIRECTORY, loading(batch(bodies)))


def _bodies_as_ints(b: pb.LoadColumns) -> None:
    b.bodies.Clear()
    b.bodies.kind = pb.INTEGERS
    b.bodies.ints.extend([1, 2, 3, 4])


def _short_bodies(b: pb.LoadColumns) -> None:
    del b.bodies.strings[3]


@pytest.mark.parametrize("change, message", [
    (lambda b: b.cluster_ids.append(1),
     "a batch of 4 records of CENSUS has 5 cluster ids and 4 columns for 4 attributes"),
    (lambda b: b.columns.add(),
     "a batch of 4 records of CENSUS has 4 cluster ids and 5 columns for 4 attributes"),
    (lambda b: b.columns[1].ints.append(5),
     "record 15: inserted value: CENSUS.POP: 5 values for 4 records"),
    (_bodies_as_ints, "record 11: inserted value: type mismatch: CENSUS.BODY is string, "
                      "got integer 1"),
    (_short_bodies, "record 14: inserted value: CENSUS.BODY: 3 values for 4 records"),
])
def test_a_refused_load_batch_names_what_is_wrong(change: Callable[[pb.LoadColumns], object],
                                                  message: str) -> None:
    b = batch(["x", "y", "z", "w"])
    change(b)
    assert refused(loading(b)) == message


def test_a_bad_dictionary_reference_is_left_for_the_batchs_decoding() -> None:
    """References are range-checked once, as RECP decodes the batch (`load.insert`
    names the record): the check lets a batch through whose only fault is one, outside
    the directory attributes' columns, which the check decodes itself."""
    b = batch(["x", "y", "x", "y"])
    assert b.columns[0].kind == pb.STRING_REFS and b.bodies.kind == pb.STRING_REFS
    b.bodies.refs[2] = 9
    check.traffic_unit(DIRECTORY, loading(b))
    b.columns[0].refs[1] = 9
    assert refused(loading(b)) == ("a directory attribute's dictionary reference beyond "
                                   "its column's values")


def test_a_load_batch_record_not_of_its_cluster_is_refused_naming_it() -> None:
    b = batch()
    b.cluster_ids[3] = CIDS["Monterey"]
    assert refused(loading(b)) == (
        f"record 14 is not of cluster {CIDS['Monterey']}: its CITY 'Carmel', POP 4000, "
        "STATE 'CA' describe another cluster")


def test_a_directory_update_naming_an_unknown_file_is_refused_naming_it() -> None:
    """An update with entries is checked entry by entry; one with none has nothing to
    check."""
    check.directory_update(DIRECTORY, pb.DirectoryUpdate())
    bad = pb.DirectoryUpdate(descriptors=[pb.Descriptor(id=99, file="NOPE", attr="K",
                                                        kind="A")])
    with pytest.raises(BadMessage) as e:
        check.directory_update(DIRECTORY, bad)
    assert str(e.value) == "descriptor 99: unknown file 'NOPE'"


# ------------------------------------------------- placement by directory values --
@pytest.mark.parametrize("records, message", [
    # A value below the cluster's range (the range's neighbour above does not hold it).
    ([record(CIDS["Monterey"], "Monterey", -5, 1.0, "CA")],
     f"inserted record 1 is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP -5, "
     "STATE 'CA' describe another cluster"),
    # Records of one cluster from both ranges: the second range's low, and its high.
    ([record(CIDS["Carmel"], "Carmel", 4999, 1.0, "CA"),
      record(CIDS["Carmel"], "Carmel", 999, 1.0, "CA")],
     f"inserted record 2 is not of cluster {CIDS['Carmel']}: its CITY 'Carmel', POP 999, "
     "STATE 'CA' describe another cluster"),
    # Only the last attribute wrong, in a later record of the cluster: another value of
    # its list, a null, or (type C) another city.
    ([record(CIDS["Monterey"], "Monterey", 25, 1.0, "CA"),
      record(CIDS["Monterey"], "Monterey", 30, 1.0, "NY")],
     f"inserted record 2 is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP 30, "
     "STATE 'NY' describe another cluster"),
    ([record(CIDS["Monterey"], "Monterey", 25, 1.0, "CA"),
      record(CIDS["Monterey"], "Monterey", 30, 1.0, None)],
     f"inserted record 2 is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP 30, "
     "STATE None describe another cluster"),
    ([record(CIDS["Monterey"], "Monterey", 25, 1.0, "CA"),
      record(CIDS["Monterey"], "Carmel", 30, 1.0, "CA")],
     f"inserted record 2 is not of cluster {CIDS['Monterey']}: its CITY 'Carmel', POP 30, "
     "STATE 'CA' describe another cluster"),
    # Only the second attribute wrong: a null in a range cluster.
    ([record(CIDS["Monterey"], "Monterey", 25, 1.0, "CA"),
      record(CIDS["Monterey"], "Monterey", None, 1.0, "CA")],
     f"inserted record 2 is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP "
     "None, STATE 'CA' describe another cluster"),
    # A value shown whole up to 40 characters, and cut there past them.
    ([record(CIDS["Monterey"], "M" * 38, 25, 1.0, "CA")],
     f"inserted record 1 is not of cluster {CIDS['Monterey']}: its CITY '{'M' * 38}', POP "
     "25, STATE 'CA' describe another cluster"),
    ([record(CIDS["Monterey"], "M" * 39, 25, 1.0, "CA")],
     f"inserted record 1 is not of cluster {CIDS['Monterey']}: its CITY '{'M' * 39}…, POP "
     "25, STATE 'CA' describe another cluster"),
])
def test_a_record_off_its_cluster_in_any_one_attribute_is_refused(
        records: list[pb.PlacedRecord], message: str) -> None:
    """Every value of every record counts, whether or not the others of its cluster fit:
    a range's neighbour bounds, a second distinct value of an equality cluster, a null."""
    assert refused(pb.TrafficUnit(requests=[insert(*records)])) == message


def test_records_of_a_states_no_descriptor_class_are_let_through_with_any_value_off_the_list(
        ) -> None:
    """A type-B value not in its list is of the attribute's no-descriptor class: any such
    values share its cluster, and a listed value is not of it."""
    iig, cids = census_placed()
    austin = iig.cluster_of("CENSUS", census_key(iig, "Austin", 9000, "TX"),
                            pb.DirectoryUpdate())
    tu = pb.TrafficUnit(requests=[insert(record(austin, "Austin", 9000, 1.0, "TX"),
                                         record(austin, "Austin", 6000, 1.0, "WA"),
                                         record(austin, "Austin", 5000, 1.0, "TX"))])
    check.traffic_unit(iig.directory, tu)
    tu.requests[0].records.append(record(austin, "Austin", 9000, 1.0, "CA"))
    with pytest.raises(BadMessage) as e:
        check.traffic_unit(iig.directory, tu)
    assert str(e.value) == (f"inserted record 4 is not of cluster {austin}: its CITY "
                            "'Austin', POP 9000, STATE 'CA' describe another cluster")


def interleaved(first: int) -> pb.LoadColumns:
    """A batch whose clusters interleave (Carmel, Monterey, Carmel, Monterey), its first
    record of Monterey's POP range in Carmel's cluster, its second and fourth of
    Carmel's in Monterey's."""
    rows: list[list[Value]] = [["Carmel", 25, 1.0, "CA"], ["Monterey", 2000, 1.0, "CA"],
                               ["Carmel", 2000, 1.0, "CA"], ["Monterey", 3000, 1.0, "CA"]]
    b = columns.encode_batch(rows, 4, first)
    b.cluster_ids.extend([CIDS["Carmel"], CIDS["Monterey"]] * 2)
    return b


@pytest.mark.parametrize("first, who", [
    (11, "record 12"), (0, "record 2 of this backend's share of its batch")])
def test_a_batch_is_checked_cluster_by_cluster_naming_the_lowest_clusters_first_bad_record(
        first: int, who: str) -> None:
    """Records are taken by cluster, lowest id first, however the batch orders them: of
    several bad records the one named is the first of the lowest cluster holding one,
    not the batch's first. A record is named by its number in the load, or by its place
    in a backend's share of a split batch (which has no `first`)."""
    assert CIDS["Monterey"] < CIDS["Carmel"]
    assert refused(loading(interleaved(first))) == (
        f"{who} is not of cluster {CIDS['Monterey']}: its CITY 'Monterey', POP 2000, "
        "STATE 'CA' describe another cluster")
    good = interleaved(first)
    good.cluster_ids[:] = [CIDS["Monterey"], CIDS["Carmel"], CIDS["Carmel"], CIDS["Carmel"]]
    good.columns[0].Clear()
    columns.encode(["Monterey", "Carmel", "Carmel", "Carmel"], good.columns[0])
    check.traffic_unit(DIRECTORY, loading(good))


# A float directory attribute (type C) and an integer one of type A, whose ranges leave
# room for the ones a directory update may add (a definition refuses ranges that touch
# or overlap; a backend's entry check takes each descriptor alone).
LEVELS = ("files:\n  LEVELS:\n    attributes: {F: float, K: integer, T: string}\n"
          "    directory:\n      F: {type: C}\n      K: {type: A, ranges: [[0, 10], [30, 40]]}\n")


class Levels:
    """The LEVELS directory, with K ranges added as a directory update carries them."""

    def __init__(self, *ranges: tuple[int, int]) -> None:
        self.iig = Iig(Directory())
        self.iig.define(parse_definition(LEVELS))
        self.directory = self.iig.directory
        self.added = [100 + n for n in range(len(ranges))]
        self.directory.apply(pb.DirectoryUpdate(descriptors=[
            Descriptor(did, "LEVELS", "K", "A", low=low, high=high).to_pb()
            for did, (low, high) in zip(self.added, ranges, strict=True)]))

    def cluster(self, f: Value, k: int, k_descriptor: int | None = None) -> int:
        """The cluster of F = f and K = k (or of K's descriptor `k_descriptor`)."""
        if k_descriptor is None:
            return self.iig.cluster_of("LEVELS", ["LEVELS", f, k], pb.DirectoryUpdate())
        f_did = self.iig.cluster_of("LEVELS", ["LEVELS", f, 0], pb.DirectoryUpdate())
        ids = self.directory.clusters[f_did][1]
        return self.iig.cluster_of_ids("LEVELS", (ids[0], ids[1], k_descriptor),
                                       pb.DirectoryUpdate())

    def inserted(self, *records: pb.PlacedRecord) -> str | None:
        """The check's refusal of an ABDL INSERT of `records`, or None if it passes."""
        return self.checked(pb.Request(op=pb.INSERT, file="LEVELS", records=records))

    def loaded(self, rows: list[list[Value]], cids: list[int], first: int = 1) -> str | None:
        b = columns.encode_batch(rows, 3, first)
        b.cluster_ids.extend(cids)
        return self.checked(pb.Request(op=pb.INSERT, file="LEVELS", columns=b))

    def checked(self, req: pb.Request) -> str | None:
        try:
            check.traffic_unit(self.directory, pb.TrafficUnit(requests=[req]))
        except BadMessage as e:
            return str(e)
        return None


BIG = 2 ** 53       # 2**53 + 1 is no float: its float is 2**53


def test_integers_of_a_float_attribute_are_placed_as_the_floats_stored() -> None:
    """An integer inserted or loaded into a float attribute is stored, so placed, as its
    float: 2**53 + 1 is of the cluster of 2**53; 2**53 + 2 (a float itself) is not, and
    is shown as stored. A null is of the null's cluster."""
    lv = Levels()
    big, three, null = lv.cluster(float(BIG), 5), lv.cluster(3.0, 5), lv.cluster(None, 5)
    assert lv.inserted(record(big, BIG + 1, 5, "a"), record(big, BIG, 5, "b"),
                       record(big, float(BIG), 5, "c"), record(three, 3, 5, "d"),
                       record(null, None, 5, "e")) is None
    assert lv.inserted(record(big, BIG + 1, 5, "a"), record(big, BIG + 2, 5, "b")) == (
        f"inserted record 2 is not of cluster {big}: its F 9007199254740994.0, K 5 "
        "describe another cluster")
    for rows in ([[BIG + 1, 5, "a"], [BIG + 1, 5, "b"], [3, 5, "c"]],     # one constant
                 [[BIG + 1, 5, "a"], [BIG, 5, "b"], [3, 5, "c"]],         # integers
                 [[BIG + 1, 5, "a"], [float(BIG), 5, "b"], [3, 5, "c"]],  # of both types
                 [[float(BIG), 5, "a"], [float(BIG), 5, "b"], [3.0, 5, "c"]]):
        assert lv.loaded(rows, [big, big, three]) is None, rows
    assert lv.loaded([[BIG + 1, 5, "a"], [None, 5, "b"], [3.0, 5, "c"]],
                     [big, null, three]) is None
    assert lv.loaded([[BIG + 1, 5, "a"], [BIG + 2, 5, "b"]], [big, big], first=7) == (
        f"record 8 is not of cluster {big}: its F 9007199254740994.0, K 5 describe "
        "another cluster")


def test_ranges_that_touch_place_their_shared_bound_in_the_upper_one() -> None:
    """K's ranges [0, 10] and [10, 20] (a directory update's) share 10, which the
    directory finds in the upper one: a 10 in the lower one's cluster is refused, there
    alone or with values of the range."""
    lv = Levels((10, 20))
    lower, upper = lv.cluster(1.0, 5), lv.cluster(1.0, 15)
    assert lower != upper
    assert lv.inserted(record(lower, 1.0, 0, "a"), record(lower, 1.0, 9, "b"),
                       record(upper, 1.0, 10, "c"), record(upper, 1.0, 20, "d")) is None
    for ks in ([10], [0, 10], [5, 15]):
        assert lv.inserted(*(record(lower, 1.0, k, "x") for k in ks)) == (
            f"inserted record {len(ks)} is not of cluster {lower}: its F 1.0, K {ks[-1]} "
            "describe another cluster"), ks
    assert lv.loaded([[1.0, 3, "a"], [1.0, 10, "b"]], [lower, lower]) == (
        f"record 2 is not of cluster {lower}: its F 1.0, K 10 describe another cluster")


def test_ranges_of_one_low_place_their_values_in_the_one_the_directory_finds() -> None:
    """K's ranges [0, 10] and [0, 5] (a directory update's) both start at 0; the
    directory finds every value of them in [0, 10], so a record is let through there and
    refused in [0, 5]'s cluster (not failing the check itself)."""
    lv = Levels((0, 5))
    found, shadowed = lv.cluster(1.0, 3), lv.cluster(1.0, 3, k_descriptor=lv.added[0])
    assert found != shadowed
    assert lv.inserted(record(found, 1.0, 3, "a"), record(found, 1.0, 0, "b"),
                       record(found, 1.0, 10, "c")) is None
    assert lv.loaded([[1.0, 3, "a"], [1.0, 4, "b"]], [found, found]) is None
    assert lv.inserted(record(shadowed, 1.0, 3, "a")) == (
        f"inserted record 1 is not of cluster {shadowed}: its F 1.0, K 3 describe "
        "another cluster")
