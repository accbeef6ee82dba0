"""A backend's checks of the units and directory updates it is sent, in process, on the
census directory: what each refuses, with an error naming what is wrong, and what
each lets through (docs/mutation.md)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from backend import check
from backend.check import BadMessage
from mbds import columns, traffic
from mbds.proto import mbds_pb2 as pb
from mbds.values import Value, to_pb
from tests.inproc import census, unit

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
