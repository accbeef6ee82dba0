"""The ABDL parser's token-by-token paths and error reports, for the mutants
tests/test_abdl_parser.py lets live (docs/mutation.md).

A `-- comment` inside a keyword, predicate or target item makes its fast pattern fail, so
the parser reads it token by token; the trees must be the same as on the fast path.
"""

from __future__ import annotations

import pytest

from controller.abdl import (
    AbdlSyntaxError,
    Conjunction,
    Delete,
    Insert,
    Keyword,
    Modifier,
    Pos,
    Predicate,
    Query,
    Retrieve,
    RetrieveCommon,
    TargetItem,
    TextTooLong,
    TrafficUnit,
    Update,
    parse,
)

ARITH_OR_GT = ("+", "-", "*", "/", ">")
END = "end of input"


def error(text: str) -> AbdlSyntaxError:
    with pytest.raises(AbdlSyntaxError) as info:
        parse(text)
    return info.value


def where(e: AbdlSyntaxError) -> tuple[int, int, tuple[str, ...], str]:
    return e.line, e.column, e.expected, e.found


# -- traffic units ---------------------------------------------------------------------


def test_a_single_request_is_not_a_transaction() -> None:
    unit = parse("DELETE (A = 1)")
    query = Query((Conjunction((Predicate("A", "=", 1, Pos(1, 8)),)),))
    assert unit == TrafficUnit((Delete(query, Pos(1, 1)),), False)
    assert unit.transaction is False


@pytest.mark.parametrize("text, column, detail", [
    ("[ ]", 1, "empty transaction"),
    ("  [DELETE (A = 1); [DELETE (A = 2)]]", 20, "nested transactions are not allowed"),
])
def test_bracket_errors_name_the_bracket(text: str, column: int, detail: str) -> None:
    e = error(text)
    assert where(e) == (1, column, (), "[")
    assert (e.detail, str(e)) == (detail, f"line 1, column {column}: {detail}")


# -- INSERT --------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "INSERT (<A, 1e999>)",
    "INSERT (<A, 1e999>, <B, 2>)",
    "INSERT (<B, 2>, <A, 1e999>)",
])
def test_an_unrepresentable_number_in_a_keyword_is_an_error(text: str) -> None:
    e = error(text)
    assert where(e) == (1, text.index("1e999") + 1, (), "1e999")
    assert e.detail == "number out of range '1e999'"


def test_keywords_read_token_by_token_then_fast_again() -> None:
    ins = parse("INSERT (<a -- note\n, 1>, <B, 'x'>, <c\t-- n\n,2>) {b}").requests[0]
    assert ins == Insert(
        (Keyword("A", 1, Pos(1, 9)), Keyword("B", "x", Pos(2, 7)), Keyword("C", 2, Pos(2, 17))),
        "b",
        Pos(1, 1),
    )


def test_after_an_insert_with_a_body_only_the_end_may_follow() -> None:
    e = error("INSERT (<A, 1>) {x} ;")
    assert where(e) == (1, 21, (END,), ";")
    assert str(e) == "line 1, column 21: expected end of input, found ';'"
    e = error("[INSERT (<A, 1>) {x} x]")
    assert where(e) == (1, 22, (";", "]"), "x")


# -- predicates ----------------------------------------------------------------------


def test_predicates_of_a_conjunction_read_token_by_token() -> None:
    d = parse("DELETE ((A -- c\n = 1) and (b -- c\n<= 'x'))").requests[0]
    assert d == Delete(
        Query((Conjunction((
            Predicate("A", "=", 1, Pos(1, 9)),
            Predicate("B", "<=", "x", Pos(2, 11)),
        )),)),
        Pos(1, 1),
    )


@pytest.mark.parametrize("text, column, found", [
    ("DELETE ((5 = 1))", 10, "5"),
    ("DELETE ((A = 1) and ('B' = 1))", 22, "'B'"),
])
def test_a_predicate_of_a_conjunction_needs_an_attribute(
    text: str, column: int, found: str
) -> None:
    e = error(text)
    assert where(e) == (1, column, ("attribute name",), found)
    assert str(e).startswith(f"line 1, column {column}: expected attribute name, found ")


@pytest.mark.parametrize("text, column, found", [
    ("DELETE (A + 1)", 11, "+"),
    ("DELETE ((A = 1) and (B , 2))", 24, ","),
    ("DELETE (A", 10, END),
])
def test_a_predicate_needs_a_comparison_operator(text: str, column: int, found: str) -> None:
    e = error(text)
    assert where(e) == (1, column, ("comparison operator",), found)
    shown = END if found == END else f"'{found}'"
    assert str(e) == f"line 1, column {column}: expected comparison operator, found {shown}"


# -- UPDATE --------------------------------------------------------------------------


@pytest.mark.parametrize("text, column, found", [
    ("UPDATE (A = 1) <B = C 5>", 23, "5"),     # a number without a sign is no operator
    ("UPDATE (A = 1) <B = C", 22, END),
])
def test_a_bare_word_modifier_wants_an_operator_or_the_end(
    text: str, column: int, found: str
) -> None:
    assert where(error(text)) == (1, column, ARITH_OR_GT, found)


def test_a_modifier_needs_a_value_or_an_attribute() -> None:
    e = error("UPDATE (A = 1) <B = (>")
    assert where(e) == (1, 21, ("value", "attribute name"), "(")
    assert str(e) == "line 1, column 21: expected value or attribute name, found '('"


@pytest.mark.parametrize("text, column, found", [
    ("UPDATE (A = 1) <B = 5 ;", 23, ";"),
    ("UPDATE (A = 1) <B = 'C' D>", 25, "D"),
    ("UPDATE (A = 1) <B = C + 1 x>", 27, "x"),
    ("UPDATE (A = 1) <B = count", 26, END),
])
def test_a_modifier_otherwise_ends_with_its_bracket(text: str, column: int, found: str) -> None:
    e = error(text)
    assert where(e) == (1, column, (">",), found)
    shown = END if found == END else f"'{found}'"
    assert str(e) == f"line 1, column {column}: expected '>', found {shown}"


@pytest.mark.parametrize("text, column, expected", [
    ("UPDATE (A = 1) <B = 5> x", 24, (END,)),
    ("[UPDATE (A = 1) <B = 5> x]", 25, (";", "]")),
])
def test_after_an_update_nothing_optional_follows(
    text: str, column: int, expected: tuple[str, ...]
) -> None:
    assert where(error(text)) == (1, column, expected, "x")


def test_an_update_then_more_requests() -> None:
    unit = parse("[UPDATE (A = 1) <B = 5>; DELETE (A = 2)]")
    assert unit.transaction is True
    assert unit.requests[0] == Update(
        Query((Conjunction((Predicate("A", "=", 1, Pos(1, 9)),)),)),
        Modifier("B", None, None, 5, False, Pos(1, 17)),
        Pos(1, 2),
    )


# -- RETRIEVE ------------------------------------------------------------------------

COMMON = "RETRIEVE (A = 1) (B) COMMON (B, C) RETRIEVE (D = 1) (C)"


@pytest.mark.parametrize("text, column, expected", [
    (COMMON + " x", 57, (END,)),
    ("[" + COMMON + " x]", 58, (";", "]")),
])
def test_after_a_common_retrieve_nothing_optional_follows(
    text: str, column: int, expected: tuple[str, ...]
) -> None:
    assert where(error(text)) == (1, column, expected, "x")
    assert isinstance(parse(COMMON).requests[0], RetrieveCommon)


def test_target_items_read_token_by_token() -> None:
    r = parse("RETRIEVE (A = 1) (city -- c\n, all -- c\n, b)").requests[0]
    assert r == Retrieve(
        Query((Conjunction((Predicate("A", "=", 1, Pos(1, 10)),)),)),
        (
            TargetItem("CITY", None, False, Pos(1, 19)),
            TargetItem(None, None, True, Pos(2, 3)),
            TargetItem("B", None, False, Pos(3, 3)),
        ),
        None,
        Pos(1, 1),
    )
    assert [t.name for t in r.targets] == ["CITY", "ALL", "B"]


@pytest.mark.parametrize("text, column, word", [
    ("RETRIEVE (A = 1) (B, and)", 22, "and"),
    ("RETRIEVE (A = 1) (B -- c\n, Common)", 3, "Common"),
])
def test_a_reserved_word_as_a_target_item(text: str, column: int, word: str) -> None:
    e = error(text)
    line = text.count("\n") + 1
    assert where(e) == (line, column, ("attribute name",), word)
    detail = f"'{word}' is a reserved word and cannot be an attribute name"
    assert (e.detail, str(e)) == (detail, f"line {line}, column {column}: {detail}")


@pytest.mark.parametrize("text", [
    "INSERT (<FILE, F>, <A, 1>, <B, 'two'>, <C, three>, <D, 4.5>)",
    "RETRIEVE ((FILE = F) and (A > 1)) (B, C) BY A",
    "[INSERT (<FILE, F>, <A, 1>) {a body}; DELETE ((FILE = F) and (A = 1))]",
])
def test_a_parse_stops_at_its_text_limit_wherever_that_falls(text: str) -> None:
    """With `max_text`, text outside record bodies beyond it raises `TextTooLong`, at any
    point of the request (among an INSERT's keywords too); up to it the parse is whole."""
    limit = len(text) - (len("{a body}") if "{" in text else 0)
    assert parse(text, limit) == parse(text)
    for short in range(1, limit):
        with pytest.raises(TextTooLong):
            parse(text, short)
