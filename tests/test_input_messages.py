"""What the user wrote, as the user wrote it: a definition's yes/no/on/off are strings,
a syntax error shows an invisible or control character as an escape naming it, and an
UPDATE that overflows integers names the exact integer it gives."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from backend import recp_write
from controller.abdl import AbdlSyntaxError, parse
from controller.abdl.lexer import quote
from mbds.client import ClientError
from mbds.proto import mbds_pb2 as pb
from mbds.schema import DefinitionError, parse_definition
from mbds.values import INT64_MAX, INT64_MIN, from_pb, to_pb
from tests.conftest import Running, module_cluster


def mbds(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbds", *args], capture_output=True,
                          timeout=120)


# -- definitions: YAML 1.2 booleans -------------------------------------------

COUNTRIES = """
files:
  CTRY:
    attributes: {NAME: string, CODE: string, ON: integer}
    directory:
      CODE: {type: B, values: [SE, NO, DK, ON, yes, Off, y, n]}
"""


def test_yes_no_on_off_in_a_definition_are_the_strings_written() -> None:
    [f] = parse_definition(COUNTRIES)
    assert [d.value for d in f.descriptor_specs["CODE"]] == [
        "SE", "NO", "DK", "ON", "yes", "Off", "y", "n"]
    assert [a.name for a in f.attributes] == ["NAME", "CODE", "ON"]


@pytest.mark.parametrize("written, read", [("true", "true"), ("FALSE", "false"), ("~", "null")])
def test_true_and_false_are_still_booleans(written: str, read: str) -> None:
    with pytest.raises(Exception, match=f"{read} is not a string value for CODE"):
        parse_definition(COUNTRIES.replace("SE,", f"{written},"))


YAML_NUMBERS = """
files:
  N:
    attributes: {I: integer, F: float, S: string}
    directory:
      I: {type: B, values: [%s]}
      F: {type: A, ranges: [[0, %s]]}
"""


@pytest.mark.parametrize("written, value", [("010", 10), ("0o10", 8), ("0x1F", 31),
                                            ("-7", -7), ("+3", 3)])
def test_integers_in_a_definition_are_read_as_yaml_1_2_reads_them(written: str,
                                                                   value: int) -> None:
    [f] = parse_definition(YAML_NUMBERS % (written, "1"))
    assert [d.value for d in f.descriptor_specs["I"]] == [value]


@pytest.mark.parametrize("written, value", [("1e5", 1e5), ("2.5E-3", 2.5e-3), (".5", 0.5),
                                            ("5.", 5.0)])
def test_floats_in_a_definition_are_read_as_yaml_1_2_reads_them(written: str,
                                                                 value: float) -> None:
    [f] = parse_definition(YAML_NUMBERS % ("1", written))
    assert [d.high for d in f.descriptor_specs["F"]] == [value]


@pytest.mark.parametrize("written", ["1:30", "1_000", "2024-01-01"])
def test_what_yaml_1_1_took_for_a_number_or_a_date_is_a_string(written: str) -> None:
    with pytest.raises(DefinitionError, match=f"'{written}' is not an integer value for I"):
        parse_definition(YAML_NUMBERS % (written, "1"))


@pytest.mark.parametrize("text, where, key", [
    ("files:\n  A:\n    attributes: {X: integer, Y: string, X: string}\n", "3, column 41",
     "X"),
    ("files:\n  A:\n    attributes: {X: integer}\n  A:\n    attributes: {X: string}\n",
     "4, column 3", "A"),
    ("files:\n  A:\n    attributes: {X: integer}\n    directory:\n"
     "      X: {type: A, ranges: [[0, 1]], ranges: [[2, 3]]}\n", "5, column 38", "ranges"),
])
def test_a_key_written_twice_in_a_definition_is_refused_naming_where(text: str, where: str,
                                                                     key: str) -> None:
    with pytest.raises(DefinitionError) as e:
        parse_definition(text)
    assert str(e.value) == f"line {where}: key '{key}' appears twice in a mapping"


cluster = module_cluster("messages")


def test_mbds_define_takes_no_as_a_type_b_value(cluster: Running, tmp_path: Path) -> None:
    path = tmp_path / "countries.yaml"
    path.write_text(COUNTRIES)
    r = mbds("define", "--controller", cluster.cluster.address, str(path))
    assert r.returncode == 0 and r.stdout.decode().strip() == "created CTRY", r.stderr
    values = {from_pb(d.value) for d in cluster.client.status("CTRY").descriptors
              if d.attr == "CODE"}
    assert {"NO", "ON", "yes", "Off"} <= values
    cluster.client.execute("INSERT (<FILE, Ctry>, <NAME, Norway>, <CODE, NO>, <ON, 1>)")
    [res] = cluster.client.execute("RETRIEVE ((FILE = Ctry) and (CODE = NO)) (NAME, ON)")
    assert res.records == [{"NAME": "Norway", "ON": 1}]


# -- ABDL: characters a terminal would not show ---------------------------------

@pytest.mark.parametrize("ch, shown", [
    ("\u00a0", r"'\u00a0' (NO-BREAK SPACE)"),
    ("\u200b", r"'\u200b' (ZERO WIDTH SPACE)"),
    ("\u2028", r"'\u2028' (LINE SEPARATOR)"),
    ("\ufeff", r"'\ufeff' (ZERO WIDTH NO-BREAK SPACE)"),
    ("\U000e0001", r"'\U000e0001' (LANGUAGE TAG)"),
    ("\x1b", r"'\x1b'"),
    ("\x00", r"'\x00'"),
    ("\x7f", r"'\x7f'"),
    ("\x85", r"'\u0085'"),
    ("~", "'~'"),
    ("é", "'é'"),
])
def test_a_bad_character_is_shown_as_an_escape_naming_it(ch: str, shown: str) -> None:
    with pytest.raises(AbdlSyntaxError) as err:
        parse(f"RETRIEVE{ch}(FILE = X) (A)")
    assert str(err.value) == f"line 1, column 9: bad character {shown}"


def test_a_quoted_token_keeps_no_control_character() -> None:
    with pytest.raises(AbdlSyntaxError) as err:
        parse("RETRIEVE (FILE = X) (A) 'a\x1b[2J\tb'")
    assert str(err.value).endswith("found \"'a\\x1b[2J\\tb'\"")
    assert quote("it's\u00a0") == r'''"it's\u00a0"'''
    assert quote("x" * 50 + "\x1b") == "'" + "x" * 37 + "...'"


def test_no_syntax_error_carries_a_character_a_terminal_would_not_show() -> None:
    """Every character that is not printable (or is whitespace but the plain space), in
    each place a request can put it, comes out of the parser escaped."""
    rng = random.Random(7)
    chars = [chr(c) for c in range(0x3000) if not chr(c).isprintable() or chr(c).isspace()]
    chars += [chr(rng.randrange(0x3000, 0x110000)) for _ in range(2000)]
    chars = [c for c in chars if c != " " and not 0xD800 <= ord(c) <= 0xDFFF]
    places = ["RETRIEVE{c}(FILE = X) (A)", "RETRIEVE (FILE = X) (A) 'q{c}'",
              "RETRIEVE (FILE = X) (A) \"q'{c}\"", "INSERT (<FILE, X>, <A, 'v{c}'> 'w{c}')",
              "RETRIEVE (FILE = X) (A) {c}"]
    for c in chars:
        for place in places:
            text = place.format(c=c)
            try:
                parse(text)
            except AbdlSyntaxError as e:
                message = str(e)
            else:
                continue    # whitespace the lexer skips
            assert all(x == " " or (x.isprintable() and not x.isspace()) for x in message), \
                (text, message)


def test_mbds_exec_names_an_invisible_character_and_writes_no_escape(
        cluster: Running) -> None:
    for ch, shown in [("\u00a0", r"'\u00a0' (NO-BREAK SPACE)"), ("\x1b", r"'\x1b'")]:
        r = mbds("exec", "--controller", cluster.cluster.address,
                 f"RETRIEVE{ch}(FILE = X) (A)")
        err = r.stderr.decode()
        assert r.returncode == 1
        assert err.strip() == ("error: syntax error: line 1, column 9: "
                               f"bad character {shown}"), err
        assert "\x1b" not in err and "\u00a0" not in err


# -- UPDATE overflow: the integer it gives ---------------------------------------

NUMBERS = """
files:
  NUMS:
    attributes: {K: string, I: integer, D: integer}
    directory:
      D: {type: C}
"""


@pytest.fixture(scope="module")
def numbers(cluster: Running) -> Running:
    cluster.client.define(NUMBERS)
    cluster.client.execute(f"[INSERT (<FILE, Nums>, <K, max>, <I, {INT64_MAX}>, "
                           f"<D, {INT64_MAX}>); INSERT (<FILE, Nums>, <K, min>, "
                           f"<I, {INT64_MIN}>, <D, {INT64_MIN}>)]")
    return cluster


@pytest.mark.parametrize("attr", ["I", "D"])   # D is a directory attribute: records move
@pytest.mark.parametrize("key, arith, gives", [
    ("max", "+ 1", INT64_MAX + 1),
    ("max", "* 3", INT64_MAX * 3),
    ("min", "- 2", INT64_MIN - 2),
    ("min", "* -1", -INT64_MIN),
    ("min", "/ -1", -INT64_MIN),
    ("max", "* -9223372036854775808", INT64_MAX * INT64_MIN),
])
def test_an_update_beyond_64_bits_names_the_exact_integer(
        numbers: Running, attr: str, key: str, arith: str, gives: int) -> None:
    def records() -> list:
        [res] = numbers.client.execute("RETRIEVE (FILE = Nums) (ALL)")
        return sorted(res.records, key=lambda r: r["K"])

    before = records()
    with pytest.raises(ClientError) as err:
        numbers.client.execute(f"UPDATE ((FILE = Nums) and (K = {key})) "
                               f"<{attr} = {attr} {arith}>")
    assert err.value.code == "ABORTED"
    assert f"NUMS.{attr} = {attr} {arith} gives {gives} for a record, out of the range " \
           "of integer" in str(err.value), str(err.value)
    assert records() == before


def test_the_exact_integer_is_what_sqlite_gives_when_it_fits() -> None:
    """Integer arithmetic as SQLite does it (division truncates toward zero)."""
    conn = sqlite3.connect(":memory:")
    rng = random.Random(11)
    edges = [0, 1, -1, 2, -2, 7, -7, INT64_MAX, INT64_MIN, 3037000499, -3037000500]
    for _ in range(3000):
        a = rng.choice(edges) if rng.random() < 0.3 else rng.randint(-10**12, 10**12)
        b = rng.choice(edges) if rng.random() < 0.3 else rng.randint(-10**6, 10**6)
        for arith in "+-*/":
            if arith == "/" and b == 0:
                continue
            [(got,)] = conn.execute(f"SELECT ? {arith} ?", (a, b))
            m = pb.Modifier(attr="I", source="I", arith=arith)
            to_pb(b, m.value)
            exact = recp_write._exact(m, a, got)
            assert isinstance(exact, int) and not isinstance(exact, bool)
            if isinstance(got, int):
                assert exact == got, (a, arith, b)
            else:
                assert not INT64_MIN <= exact <= INT64_MAX, (a, arith, b, got)
    # Only integers are worked out again; anything else stays what SQLite gave.
    m = pb.Modifier(attr="I", source="I", arith="+")
    to_pb(1.5, m.value)
    assert recp_write._exact(m, 2, 3.5) == 3.5
