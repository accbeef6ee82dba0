"""The ABDL parser's errors (controller.abdl): where they point, what they name, and that
they survive pickling; nodes are frozen."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from controller.abdl import AbdlSyntaxError, Pos, parse
from tests.test_abdl_parser import one

P = Pos


# -- errors --------------------------------------------------------------------

ERRORS = [
    ("DELETE ((A = 1) and (B = 2) xyz", 1, 29, "expected ')' or 'and', found 'xyz'"),
    ("", 1, 1, "expected 'INSERT', 'DELETE', 'UPDATE', 'RETRIEVE' or '[', found end of input"),
    ("DELETE (A = 1", 1, 14, "expected ')', found end of input"),
    ("DELETE (A = 1) and (B = 2)", 1, 16, "expected 'or' or end of input, found 'and'"),
    ("RETRIEVE (A = 1) (B) junk", 1, 22, "expected 'BY', 'COMMON' or end of input, found 'junk'"),
    ("RETRIEVE (A = 1) <B>", 1, 18, "expected 'or' or '(', found '<'"),
    ("UPDATE (A = 1) (B)", 1, 16, "expected 'or' or '<', found '('"),
    ("UPDATE (A = 1) <B = C ;", 1, 23, "expected '+', '-', '*', '/' or '>', found ';'"),
    ("INSERT (<A, 1> <B, 2>)", 1, 16, "expected ',' or ')', found '<'"),
    ("INSERT (<A, 1>);", 1, 16, "expected '{' or end of input, found ';'"),
    ("DELETE (5 = A)", 1, 9, "expected attribute name or '(', found '5'"),
    ("DELETE (A == 1)", 1, 12, "expected value, found '='"),
    ("DELETE (A ~ 1)", 1, 11, "bad character '~'"),
    ("DELETE (A ! 1)", 1, 11, "bad character '!'"),
    ("RETRIEVE (A = 1) ()", 1, 19, "expected attribute name, aggregate or 'ALL', found ')'"),
    ("DELETE (A = 'abc)", 1, 13, "unterminated string literal"),
    ('DELETE (A = "ab\nc")', 1, 13, "unterminated string literal"),
    ("INSERT (<A, 1>)\n  {body\n", 2, 3, "unterminated body text (no '}')"),
    ("INSERT (<A, 1>) {ends in escape \\}", 1, 17, "unterminated body text (no '}')"),
    ("DELETE (A = 12abc)", 1, 13, "bad number '12abc'"),
    ("DELETE (A = 1.)", 1, 13, "bad number '1.'"),
    ("DELETE (A = -1e)", 1, 13, "bad number '-1e'"),
    ("DELETE (A = 1e999)", 1, 13, "number out of range '1e999'"),
    (
        "DELETE (A = 'x''); DROP TABLE r; --')",
        1,
        16,
        "expected ')', found \"'); DROP TABLE r; --'\"",
    ),
    ("[]", 1, 1, "empty transaction"),
    ("  [\n ]", 1, 3, "empty transaction"),
    ("[DELETE (A = 1); [DELETE (A = 1)]]", 1, 18, "nested transactions are not allowed"),
    ("[ [DELETE (A = 1)]]", 1, 3, "nested transactions are not allowed"),
    ("[DELETE (A = 1) DELETE (A = 2)]", 1, 17, "expected 'or', ';' or ']', found 'DELETE'"),
    (
        "[DELETE (A = 1); ; ]",
        1,
        18,
        "expected 'INSERT', 'DELETE', 'UPDATE' or 'RETRIEVE', found ';'",
    ),
    ("[DELETE (A = 1)] x", 1, 18, "expected end of input, found 'x'"),
    ("INSERT (<count, 1>)", 1, 10, "'count' is a reserved word and cannot be an attribute name"),
    ("DELETE (or = 1)", 1, 9, "'or' is a reserved word and cannot be an attribute name"),
    (
        "RETRIEVE (A = 1) (B) BY all",
        1,
        25,
        "'all' is a reserved word and cannot be an attribute name",
    ),
    ("UPDATE (A = 1) <SUM = 1>", 1, 17, "'SUM' is a reserved word and cannot be an attribute name"),
    (
        "UPDATE (A = 1) <B = Max + 1>",
        1,
        21,
        "'Max' is a reserved word and cannot be an attribute name",
    ),
    ("RETRIEVE (A = 1) (COUNT)", 1, 24, "expected '(', found ')'"),
    (
        "RETRIEVE (A=1) (B) BY C COMMON (C, D) RETRIEVE (E=1) (F)",
        1,
        25,
        "expected end of input, found 'COMMON'",
    ),
    ("RETRIEVE (A=1) (B) COMMON (C, D) DELETE (E=1)", 1, 34, "expected 'RETRIEVE', found 'DELETE'"),
    (
        "DELETE (A = 1)\n  or\n  ((B = 2) and\n   (C = 3) or (D = 4))",
        4,
        12,
        "expected ')' or 'and', found 'or'",
    ),
    ("RETRIEVE\n  (A = 1)\n  (B,\n   \tC D)", 4, 7, "expected ',' or ')', found 'D'"),
    (
        "-- only a comment\n",
        2,
        1,
        "expected 'INSERT', 'DELETE', 'UPDATE', 'RETRIEVE' or '[', found end of input",
    ),
]


@pytest.mark.parametrize("text, line, column, message", ERRORS)
def test_errors(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(AbdlSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert str(err) == f"line {line}, column {column}: {message}"
    assert isinstance(err, ValueError)


def test_error_attributes_and_pickling() -> None:
    with pytest.raises(AbdlSyntaxError) as info:
        parse("DELETE ((A = 1) and (B = 2)\n  xyz")
    err = info.value
    assert (err.line, err.column, err.expected, err.found) == (2, 3, (")", "and"), "xyz")
    again = pickle.loads(pickle.dumps(err))
    assert (str(again), again.expected, again.found) == (str(err), err.expected, err.found)
    with pytest.raises(AbdlSyntaxError) as info:
        parse("DELETE (A = 1")
    assert info.value.found == "end of input" and info.value.expected == (")",)


def test_nodes_are_frozen() -> None:
    d = one("DELETE (A = 1)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.pos = P(9, 9)  # type: ignore[misc]


def test_an_insert_of_the_papers_width_keeps_every_pair_in_order() -> None:
    # The paper's records have 33 keywords; parse time is the benchmarks' business.
    text = "INSERT (" + ", ".join(f"<STR{i:02d}, X{i}>" for i in range(33)) + ")"
    [ins] = parse(text).requests
    assert [(k.attr, k.value) for k in ins.keywords] == [(f"STR{i:02d}", f"X{i}")
                                                       for i in range(33)]


SEMANTIC = [
    ("RETRIEVE (FILE = Census) (COUNT(CITY)) BY NOPE", 1, 43, "unknown attribute NOPE"),
    ("RETRIEVE (FILE = Census)\n  (COUNT(CITY))\n  BY NOPE", 3, 6, "unknown attribute NOPE"),
    ("RETRIEVE (FILE = Census) (CITY) BY POP", 1, 36, "BY POP needs at least one aggregate"),
    ("RETRIEVE (FILE = Census) (CITY) COMMON (NOPE, CODE) RETRIEVE (FILE = States) (NAME)",
     1, 41, "unknown attribute NOPE in CENSUS"),
    ("RETRIEVE (FILE = Census) (CITY) COMMON (CITY, NOPE) RETRIEVE (FILE = States) (NAME)",
     1, 47, "unknown attribute NOPE in STATES"),
    ("RETRIEVE (FILE = Census) (CITY) COMMON (POP, CODE) RETRIEVE (FILE = States) (NAME)",
     1, 41, "COMMON (POP, CODE) compares integer with string"),
    ("RETRIEVE (FILE = Census) (COUNT(CITY), POP)", 1, 40, "POP must be the BY attribute"),
    ("RETRIEVE (FILE = Census) (COUNT(CITY), ALL)", 1, 40, "FILE must be the BY attribute"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), SEMANTIC)
def test_semantic_errors_point_at_the_item_they_name(text: str, line: int, column: int,
                                                     message: str) -> None:
    """REQP's errors about a BY or COMMON attribute, or a target beside aggregates, give
    that item's line and column, not the request's start."""
    from controller.reqp import Reqp
    from mbds.errors import SemanticError
    from tests.inproc import census_iig

    with pytest.raises(SemanticError) as e:
        Reqp(census_iig().directory).prepare(text)
    assert str(e.value).startswith(f"line {line}, column {column}: {message}"), str(e.value)
