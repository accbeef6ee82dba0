"""The ABDL lexer through `parse`: error messages and attributes, and record bodies in
transactions, for the mutants tests/test_abdl_parser.py lets live (docs/mutation.md)."""

from __future__ import annotations

import pytest

from controller.abdl import AbdlSyntaxError, Insert, Retrieve, TextTooLong, parse

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


RANGE = "integers are signed 64-bit, from -9223372036854775808 to 9223372036854775807"


@pytest.mark.parametrize("literal, value", [
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),
    ("9223372036854775808", None), ("-9223372036854775809", None), ("10" * 20, None),
])
def test_integers_reach_both_ends_of_64_bits_and_no_further(literal: str,
                                                            value: int | None) -> None:
    text = f"RETRIEVE (A = {literal}) (B)"
    if value is None:
        e = error(text)
        assert (e.found, e.detail) == (literal, f"number out of range '{literal}': {RANGE}")
        return
    [r] = parse(text).requests
    assert isinstance(r, Retrieve)
    [p] = r.query.conjunctions[0].predicates
    assert p.value == value and type(p.value) is int


@pytest.mark.parametrize("body", ["hello world", r"hello \} world"])
def test_a_text_limit_counts_everything_but_record_bodies(body: str) -> None:
    """`max_text` bounds the text outside record bodies (a body, plain or with escapes,
    and its braces are data): one character over it and the parse stops."""
    text = "[INSERT (<A, 1>) {" + body + "}; RETRIEVE (A = 1) (B)]"
    outside = len(text) - len(body) - 2
    insert = parse(text, outside).requests[0]
    assert isinstance(insert, Insert) and insert.body == body.replace("\\}", "}")
    with pytest.raises(TextTooLong):
        parse(text, outside - 1)
    with pytest.raises(TextTooLong):
        parse("RETRIEVE (A = 1) (B)", 19)
    assert len(parse("RETRIEVE (A = 1) (B)", 20).requests) == 1


@pytest.mark.parametrize("literal, value", [
    ("0e-400", 0.0), ("0e5", 0.0), ("-0.0E-999", -0.0), ("0.000", 0.0), ("5e-3", 0.005),
    ("1e-400", None), ("-2.5E-999", None), ("0.0001e-400", None),
])
def test_a_float_that_a_double_holds_only_as_zero_is_refused(literal: str,
                                                            value: float | None) -> None:
    """A literal whose digits are not all zero but whose double is 0 would be stored as
    0: it is refused as out of range; a zero written any way is a zero."""
    text = f"RETRIEVE (A = {literal}) (B)"
    if value is None:
        e = error(text)
        assert (e.found, e.detail) == (literal, f"number out of range '{literal}'")
        return
    [r] = parse(text).requests
    assert isinstance(r, Retrieve)
    [p] = r.query.conjunctions[0].predicates
    assert p.value == value and type(p.value) is float
