"""Bad input gets a clear error naming what is wrong, and changes no data."""

from __future__ import annotations

import pytest

from mbds.client import ClientError
from tests.conftest import CENSUS_YAML, Running, module_cluster

NASTY = ["x'); DROP TABLE \"r_CENSUS\"; --", 'Robert"); DELETE FROM descriptors; --',
         "1 OR 1=1", "%_*", "\\", "' OR ''='"]


def _twenty_cities(r: Running) -> None:
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i * 100}>, <STATE, CA>, <AREA, 1.5>)"
        for i in range(20)) + "]")


census = module_cluster("bad", setup=_twenty_cities)


def snapshot(r: Running) -> list:
    [res] = r.client.execute("RETRIEVE (FILE = Census) (ALL)")
    return sorted(res.records, key=repr)


BAD = [
    ("RETRIEVE (FILE = Census (CITY)", "INVALID_ARGUMENT", "line 1, column"),
    ("INSERT (<FILE, Census>, <CITY, 'unterminated)", "INVALID_ARGUMENT", "line 1"),
    ("DELETE ((FILE = Census) and (POP < 5)", "INVALID_ARGUMENT", "expected"),
    ("RETRIEVE\n  ((FILE = Census) and\n   (POP >> 5)) (CITY)", "INVALID_ARGUMENT", "line 3"),
    ("UPDATE (FILE = Census) <POP = POP + 1> trailing", "INVALID_ARGUMENT", "end of input"),
    ("RETRIEVE (FILE = Nowhere) (CITY)", "INVALID_ARGUMENT", "unknown file NOWHERE"),
    ("RETRIEVE ((FILE = Census) and (PEOPLE > 1)) (CITY)", "INVALID_ARGUMENT",
     "unknown attribute PEOPLE in file CENSUS"),
    ("RETRIEVE (FILE = Census) (CITY, HEIGHT)", "INVALID_ARGUMENT", "unknown attribute HEIGHT"),
    ("INSERT (<FILE, Census>, <CITY, 5>)", "INVALID_ARGUMENT",
     "type mismatch: CENSUS.CITY is string"),
    ("INSERT (<FILE, Census>, <POP, 'many'>)", "INVALID_ARGUMENT", "CENSUS.POP is integer"),
    ("INSERT (<FILE, Census>, <POP, 2.5>)", "INVALID_ARGUMENT", "CENSUS.POP is integer"),
    ("INSERT (<CITY, Carmel>, <FILE, Census>)", "INVALID_ARGUMENT", "first keyword"),
    ("INSERT (<FILE, Census>, <CITY, a>, <CITY, b>)", "INVALID_ARGUMENT", "appears twice"),
    ("INSERT (<FILE, Census>, <MAYOR, x>)", "INVALID_ARGUMENT", "unknown attribute MAYOR"),
    ("RETRIEVE ((FILE = Census) and (POP = 'ten')) (CITY)", "INVALID_ARGUMENT",
     "type mismatch"),
    ("RETRIEVE (FILE = Census) (AVG(CITY))", "INVALID_ARGUMENT", "AVG of string attribute CITY"),
    ("RETRIEVE (FILE = Census) (CITY, AVG(POP))", "INVALID_ARGUMENT", "BY attribute"),
    ("RETRIEVE (FILE = Census) (CITY) BY STATE", "INVALID_ARGUMENT", "needs at least one"),
    ("UPDATE (FILE = Census) <POP = POP / 0>", "INVALID_ARGUMENT", "division by zero"),
    ("UPDATE (FILE = Census) <CITY = CITY + 1>", "INVALID_ARGUMENT", "arithmetic on string"),
    ("UPDATE (FILE = Census) <POP = AREA>", "INVALID_ARGUMENT", "cannot copy float AREA"),
    ("UPDATE (FILE = Census) <POP = POP * 1.5>", "INVALID_ARGUMENT", "is a float"),
    ("UPDATE (FILE = Census) <FILE = Other>", "INVALID_ARGUMENT", "FILE cannot be updated"),
    # A transaction whose last request is bad is rejected whole: its inserts never happen.
    ("[INSERT (<FILE, Census>, <CITY, ghost>); DELETE (FILE = Census); "
     "RETRIEVE (FILE = Census) (NOPE)]", "INVALID_ARGUMENT", "unknown attribute NOPE"),
    ("[]", "INVALID_ARGUMENT", "empty transaction"),
    # A part of a query that reaches no file is refused saying why, the whole request
    # with it, before any backend sees it.
    ("RETRIEVE ((FILE = Census) and (POP = 1)) or ((FILE = Census) and (FILE = States) "
     "and (POP = 2)) (POP)", "INVALID_ARGUMENT",
     "FILE = CENSUS and FILE = STATES select no file"),
    ("DELETE ((FILE = Census) and (POP = 100)) or ((FILE = Census) and (FILE = States))",
     "INVALID_ARGUMENT", "FILE = CENSUS and FILE = STATES select no file"),
    ("UPDATE ((FILE > States) and (POP < 3)) <POP = 5>", "INVALID_ARGUMENT",
     "FILE > STATES selects no file"),
    ("RETRIEVE ((FILE < States) and (POP = 1) and (CODE = x)) (POP)", "INVALID_ARGUMENT",
     "no file that FILE < STATES selects has all of POP, CODE"),
    ("RETRIEVE ((POP = 1) and (CODE = x)) (POP)", "INVALID_ARGUMENT",
     "no file has all of POP, CODE"),
    # A literal a double holds only as 0 (or not at all) is refused, not changed.
    ("INSERT (<FILE, Census>, <CITY, tiny>, <AREA, 1e-400>)", "INVALID_ARGUMENT",
     "number out of range '1e-400'"),
    ("RETRIEVE ((FILE = Census) and (AREA > -2.5e-999)) (CITY)", "INVALID_ARGUMENT",
     "number out of range '-2.5e-999'"),
]


@pytest.mark.parametrize("text,code,message", BAD, ids=[b[0][:40] for b in BAD])
def test_bad_request_is_named_and_changes_nothing(census: Running, text: str, code: str,
                                                  message: str) -> None:
    before = snapshot(census)
    with pytest.raises(ClientError) as err:
        census.client.execute(text)
    assert err.value.code == code
    assert message in str(err.value)
    assert snapshot(census) == before


@pytest.mark.parametrize("value", NASTY)
def test_values_with_quotes_and_sql_are_only_values(census: Running, value: str) -> None:
    quoted = value.replace("\\", "\\\\").replace("'", "\\'")
    before = len(snapshot(census))
    census.client.execute(f"INSERT (<FILE, Census>, <CITY, '{quoted}'>, <POP, 7>)")
    [res] = census.client.execute(f"RETRIEVE ((FILE = Census) and (CITY = '{quoted}')) (CITY)")
    assert res.records == [{"CITY": value}]
    census.client.execute(f"DELETE ((FILE = Census) and (CITY = '{quoted}'))")
    assert len(snapshot(census)) == before


GAUGE = """
files:
  GAUGE:
    attributes: {NAME: string, LEVEL: float, SPARE: float}
    directory:
      LEVEL: {type: C}
"""


@pytest.fixture(scope="module")
def gauge(census: Running) -> Running:
    census.client.define(GAUGE)
    census.client.execute("INSERT (<FILE, Gauge>, <NAME, a>, <LEVEL, 1.0e300>, "
                          "<SPARE, 1.0e300>)")
    return census


@pytest.mark.parametrize("modifier, result", [
    ("<LEVEL = LEVEL * 1.0e308>", "inf"),    # a directory attribute: the record would move
    ("<SPARE = SPARE * -1.0e308>", "-inf"),
])
def test_arithmetic_beyond_a_floats_range_is_refused_and_the_cluster_goes_on(
        gauge: Running, modifier: str, result: str) -> None:
    """An UPDATE whose arithmetic overflows would store ±Inf (which no answer can carry)
    or, on a type-C attribute, ask IIG for a descriptor every backend refuses: it is
    refused with what it gives, nothing changes, and every later request is served."""
    census = gauge
    before = census.client.execute("RETRIEVE (FILE = Gauge) (ALL)")[0].records
    with pytest.raises(ClientError) as err:
        census.client.execute(f"UPDATE ((FILE = Gauge) and (NAME = a)) {modifier}")
    assert err.value.code == "ABORTED"
    assert f"gives {result} for a record, out of the range of float; nothing was " \
           "updated" in str(err.value)
    assert census.client.execute("RETRIEVE (FILE = Gauge) (ALL)")[0].records == before
    census.client.execute("INSERT (<FILE, Gauge>, <NAME, b>, <LEVEL, 2.0>, <SPARE, 1.0>)")
    census.client.execute("DELETE ((FILE = Gauge) and (NAME = b))")
    assert census.client.execute("RETRIEVE (FILE = Gauge) (ALL)")[0].records == before


@pytest.mark.parametrize("spec, message", [
    ("{type: C, values: [a, b]}", "type C takes no 'values' (its keys: type)"),
    ("{type: B, values: [a], ranges: [[1, 2]]}", "type B takes no 'ranges' (its keys: type, "
                                                 "values)"),
    ("{type: A, range: [[1, 2]]}", "type A takes no 'range' (its keys: ranges, type)"),
])
def test_a_directory_attribute_given_what_its_kind_does_not_take_is_refused(
        census: Running, spec: str, message: str) -> None:
    """A key a directory attribute's kind does not read is refused, not ignored: a type C
    attribute given values would otherwise look like a type B one and not be."""
    with pytest.raises(ClientError) as err:
        census.client.define(f"files:\n  ODD:\n    attributes: {{K: string}}\n"
                             f"    directory:\n      K: {spec}\n")
    assert err.value.code == "INVALID_ARGUMENT"
    assert f"file ODD, directory attribute K: {message}" in str(err.value)
    with pytest.raises(ClientError, match="unknown file ODD"):
        census.client.execute("RETRIEVE (FILE = Odd) (K)")


def test_an_attribute_typed_differently_by_files_is_checked_in_each(census: Running) -> None:
    """SUM and AVG are refused when the attribute is a string in any file reached, in
    whichever order the files come (SQLite would sum '10' as 10 and 'abc' as 0); an
    UPDATE setting an attribute one reached file lacks is refused naming it, whichever
    file comes first."""
    c = census.client
    c.define("files:\n  MIXA:\n    attributes: {MK: integer, MC: string}\n"
             "  MIXB:\n    attributes: {MK: integer, MC: integer}\n"
             "  MIXC:\n    attributes: {MK: integer}\n")
    c.execute("[INSERT (<FILE, MixA>, <MK, 1>, <MC, '10'>); INSERT (<FILE, MixA>, <MK, 1>, "
              "<MC, abc>); INSERT (<FILE, MixB>, <MK, 1>, <MC, 3>); "
              "INSERT (<FILE, MixC>, <MK, 1>)]")
    def held() -> list[list[str]]:       # each file's records, in no particular order
        return [sorted(map(repr, c.execute(f"RETRIEVE (FILE = {f}) (ALL)")[0].records))
                for f in ("MixA", "MixB", "MixC")]
    before = held()
    for text in ("RETRIEVE (FILE = MixA) or (FILE = MixB) (SUM(MC))",
                 "RETRIEVE (FILE = MixB) or (FILE = MixA) (SUM(MC))",
                 "RETRIEVE (FILE = MixB) or (FILE = MixA) (AVG(MC))"):
        with pytest.raises(ClientError) as err:
            c.execute(text)
        assert err.value.code == "INVALID_ARGUMENT", text
        assert "of string attribute MC (a string in file MIXA)" in str(err.value), text
    with pytest.raises(ClientError) as err:
        c.execute("UPDATE (MK = 1) <MC = 'y'>")
    assert err.value.code == "INVALID_ARGUMENT"
    assert "unknown attribute MC in file MIXC" in str(err.value)
    assert held() == before
