"""The ABDL lexer through `parse`: error messages and attributes, and record bodies in
transactions, for the mutants tests/test_abdl_parser.py lets live (docs/mutation.md)."""

from __future__ import annotations

import pytest

from controller.abdl import AbdlSyntaxError, parse

AFTER_TARGETS = "RETRIEVE (A = 1) (B) "    # column 22: BY, COMMON or the end must follow


def error(text: str) -> AbdlSyntaxError:
    with pytest.raises(AbdlSyntaxError) as info:
        parse(text)
    return info.value


@pytest.mark.parametrize("found, shown", [
    ("w" * 40, "'" + "w" * 40 + "'"),               # up to 40 characters: as written
    ("w" * 41, "'" + "w" * 37 + "...'"),            # longer: shortened to 37 and "..."
    ("x" * 38 + "yyy", "'" + "x" * 37 + "...'"),
    ("'a\"b'", "''a\"b''"),                         # both quotes inside: single quotes
    ("'ab'", "\"'ab'\""),                           # only single quotes: double quotes
])
def test_error_messages_quote_what_was_found(found: str, shown: str) -> None:
    e = error(AFTER_TARGETS + found)
    assert str(e) == f"line 1, column 22: expected 'BY', 'COMMON' or end of input, found {shown}"
    assert e.found == found


@pytest.mark.parametrize("text, column", [
    ("RETRIEVE (AND = 1) (B)", 11), ("RETRIEVE (A = 1) (AND)", 19)])
def test_a_reserved_word_where_an_attribute_belongs(text: str, column: int) -> None:
    e = error(text)
    assert (e.line, e.column, e.expected, e.found) == (1, column, ("attribute name",), "AND")
    assert e.detail == "'AND' is a reserved word and cannot be an attribute name"


def test_an_unterminated_body_is_reported_at_its_brace() -> None:
    e = error("INSERT (<A, 1>) {abc")
    assert (e.line, e.column, e.found, e.detail) == (1, 17, "{", "unterminated body text (no '}')")
    assert str(e) == "line 1, column 17: unterminated body text (no '}')"


def test_each_body_of_a_transaction_is_its_own() -> None:
    unit = parse(r"[INSERT (<A, 1>) {x}; INSERT (<A, 2>) {y\}z}; INSERT (<A, 3>) {p\\}; "
                 r"INSERT (<A, 4>) {}; INSERT (<A, 5>) {q}]")
    assert [r.body for r in unit.requests] == ["x", "y}z", "p\\", "", "q"]


@pytest.mark.parametrize("text, found, detail", [
    ("RETRIEVE (A = 12abc) (B)", "12abc", "bad number '12abc'"),
    ("RETRIEVE (A = 1e999) (B)", "1e999", "number out of range '1e999'"),
    ("RETRIEVE (A = 'abc) (B)", "'", "unterminated string literal"),
    ("RETRIEVE (A = \"abc) (B)", "\"", "unterminated string literal"),
    ("RETRIEVE (A = 1) (B) #", "#", "bad character '#'"),
])
def test_bad_tokens_are_named_in_the_error(text: str, found: str, detail: str) -> None:
    e = error(text)
    column = text.index(found, 14) + 1
    assert (e.found, e.detail, str(e)) == (found, detail, f"line 1, column {column}: {detail}")


@pytest.mark.parametrize("literal, value", [("1E3", 1000.0), ("2e-1", 0.2), ("-7", -7)])
def test_exponents_in_either_case(literal: str, value: float) -> None:
    [p] = parse(f"RETRIEVE (A = {literal}) (B)").requests[0].query.conjunctions[0].predicates
    assert p.value == value and type(p.value) is type(value)


@pytest.mark.parametrize("spaces", [5000, 4074, 4075, 4076])
def test_columns_far_along_one_line(spaces: int) -> None:
    e = error(AFTER_TARGETS + " " * spaces + "junk")
    assert (e.line, e.column) == (1, 22 + spaces)
