"""Tests for the ABDL parser (controller.abdl): docs/spec.md §3."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controller.abdl import (
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
    TrafficUnit,
    Update,
    parse,
)


def one(text: str) -> Any:
    unit = parse(text)
    assert not unit.transaction and len(unit.requests) == 1
    return unit.requests[0]


def strip(node: object) -> object:
    """Structure without positions; values tagged with their type (1 != 1.0 here)."""
    if dataclasses.is_dataclass(node):
        return (type(node).__name__,) + tuple(
            strip(getattr(node, f.name)) for f in dataclasses.fields(node)
            if f.name != "pos" and f.compare    # positions of parts (by_pos) too
        )
    if isinstance(node, tuple):
        return tuple(strip(x) for x in node)
    if isinstance(node, int | float):
        return (type(node).__name__, node)
    return node


def P(line: int, col: int) -> Pos:
    return Pos(line, col)


def pred(attr: str, op: str, value: Any, col: int) -> Predicate:
    return Predicate(attr, op, value, P(1, col))


def q(*conjunctions: tuple[Predicate, ...]) -> Query:
    return Query(tuple(Conjunction(c) for c in conjunctions))


# -- docs/spec.md §3 examples ------------------------------------------------


def test_spec_insert() -> None:
    assert one("INSERT (<FILE, Census>, <CITY, Monterey>, <POPULATION, 25000>)") == Insert(
        (
            Keyword("FILE", "Census", P(1, 9)),
            Keyword("CITY", "Monterey", P(1, 25)),
            Keyword("POPULATION", 25000, P(1, 43)),
        ),
        None,
        P(1, 1),
    )


def test_spec_retrieve_conjunction() -> None:
    r = one("RETRIEVE ((FILE = Census) and (POPULATION > 10000)) (CITY)")
    assert r == Retrieve(
        q((pred("FILE", "=", "Census", 11), pred("POPULATION", ">", 10000, 31))),
        (TargetItem("CITY", None, False, P(1, 54)),),
        None,
        P(1, 1),
    )


def test_spec_retrieve_disjunction() -> None:
    r = one(
        "RETRIEVE ((FILE = Census) and (CITY = Monterey)) or "
        "((FILE = Census) and (CITY = 'San Jose')) (CITY, POPULATION)"
    )
    assert r.query == q(
        (pred("FILE", "=", "Census", 11), pred("CITY", "=", "Monterey", 31)),
        (pred("FILE", "=", "Census", 54), pred("CITY", "=", "San Jose", 74)),
    )
    assert [t.name for t in r.targets] == ["CITY", "POPULATION"]


def test_spec_retrieve_aggregate_by() -> None:
    r = one("RETRIEVE (FILE = Census) (AVG(POPULATION)) BY CITY")
    assert r == Retrieve(
        q((pred("FILE", "=", "Census", 10),)),
        (TargetItem("POPULATION", "AVG", False, P(1, 27)),),
        "CITY",
        P(1, 1),
    )
    assert r.targets[0].name == "AVG(POPULATION)"


def test_spec_update() -> None:
    u = one("UPDATE ((FILE = Census) and (CITY = Monterey)) <POPULATION = POPULATION + 5000>")
    assert u == Update(
        q((pred("FILE", "=", "Census", 9), pred("CITY", "=", "Monterey", 29))),
        Modifier("POPULATION", "POPULATION", "+", 5000, False, P(1, 48)),
        P(1, 1),
    )


def test_spec_delete() -> None:
    assert one("DELETE ((FILE = Census) and (POPULATION < 100))") == Delete(
        q((pred("FILE", "=", "Census", 9), pred("POPULATION", "<", 100, 29))), P(1, 1)
    )


def test_spec_transaction() -> None:
    unit = parse(
        "[ INSERT (<FILE, Census>, <CITY, Carmel>, <POPULATION, 3800>); "
        "RETRIEVE (FILE = Census) (COUNT(CITY)) ]"
    )
    assert unit.transaction
    ins, ret = unit.requests
    assert (ins.op, ins.pos, ret.op, ret.pos) == ("INSERT", P(1, 3), "RETRIEVE", P(1, 64))
    assert ret.targets == (TargetItem("CITY", "COUNT", False, P(1, 90)),)


# -- the paper's nine benchmark requests (docs/spec.md §5) -------------------

PAPER_QUERIES = [
    ("(INTE2 = 10)", "(INTE2 = 130)"),
    ("(INTE2 <= 250)",),
    ("(INTE2 <= 500)",),
    ("(INTE1 <= 1000)",),
    ("(INTE1 <= 200)", "(INTE1 >= 801)"),
    ("(INTE1 <= 400)", "(INTE1 >= 601)"),
    ("(INTE1 <= 201)",),
    ("(INTE1 <= 401)",),
    ("(INTE1 <= 201)", "(INTE1 >= 800)"),
]
PAPER_TARGETS = ["INTE1", "INTE2"] + [f"STR{i:02d}" for i in range(14)]


@pytest.mark.parametrize("disjuncts", PAPER_QUERIES)
def test_paper_requests(disjuncts: tuple[str, ...]) -> None:
    query = " or ".join(f"((FILE = PAPER) and {d})" for d in disjuncts)
    r = one(f"RETRIEVE {query} ({', '.join(PAPER_TARGETS)})")
    assert len(r.query.conjunctions) == len(disjuncts)
    for conj, d in zip(r.query.conjunctions, disjuncts, strict=True):
        file_pred, range_pred = conj.predicates
        assert (file_pred.attr, file_pred.op, file_pred.value) == ("FILE", "=", "PAPER")
        attr, op, value = d.strip("()").split()
        assert (range_pred.attr, range_pred.op, range_pred.value) == (attr, op, int(value))
    assert [t.name for t in r.targets] == PAPER_TARGETS


def test_paper_request_one_exact() -> None:
    r = one(
        "RETRIEVE ((FILE = PAPER) and (INTE2 = 10)) or ((FILE = PAPER) and (INTE2 = 130)) "
        "(INTE1, INTE2, STR00)"
    )
    assert r.query == q(
        (pred("FILE", "=", "PAPER", 11), pred("INTE2", "=", 10, 30)),
        (pred("FILE", "=", "PAPER", 48), pred("INTE2", "=", 130, 67)),
    )
    assert [(t.name, t.pos.column) for t in r.targets] == [
        ("INTE1", 83),
        ("INTE2", 90),
        ("STR00", 97),
    ]


def test_paper_insert_33_keywords() -> None:
    kws = ["<INTE1, 7>", "<INTE2, 7>", "<MULTI, One>"] + [f"<STR{i:02d}, Xxxxx>" for i in range(30)]
    ins = one(f"INSERT ({', '.join(kws)})")
    assert len(ins.keywords) == 33
    assert ins.keywords[2] == Keyword("MULTI", "One", P(1, 33))
    assert {k.value for k in ins.keywords[3:]} == {"Xxxxx"}


# -- queries, targets ----------------------------------------------------------


@pytest.mark.parametrize("op", ["=", "!=", "<", "<=", ">", ">="])
def test_all_relops(op: str) -> None:
    assert one(f"DELETE (A {op} 5)").query == q((pred("A", op, 5, 8),))
    assert one(f"DELETE (A{op}-5)").query == q((pred("A", op, -5, 8),))


def test_dnf_with_several_conjunctions() -> None:
    d = one("DELETE (A = 1) or ((B != 2) and (C >= 3) and (D <= 4)) or ((E > 5)) or (F < x)")
    assert [len(c.predicates) for c in d.query.conjunctions] == [1, 3, 1, 1]
    assert d.query.conjunctions[1].predicates[2] == pred("D", "<=", 4, 46)
    assert d.query.conjunctions[3].predicates[0].value == "x"


@pytest.mark.parametrize("agg", ["AVG", "COUNT", "SUM", "MIN", "MAX"])
def test_aggregates(agg: str) -> None:
    r = one(f"RETRIEVE (A = 1) ({agg.lower()}(pop), {agg}( Pop ))")
    assert r.targets == (
        TargetItem("POP", agg, False, P(1, 19)),
        TargetItem("POP", agg, False, P(1, 26 + len(agg))),
    )
    assert r.targets[0].name == f"{agg}(POP)"


def test_all_and_by() -> None:
    r = one("RETRIEVE (A = 1) (ALL, city) by zip")
    assert r.targets == (
        TargetItem(None, None, True, P(1, 19)),
        TargetItem("CITY", None, False, P(1, 24)),
    )
    assert [t.name for t in r.targets] == ["ALL", "CITY"] and r.by == "ZIP"


def test_retrieve_common() -> None:
    rc = one("RETRIEVE (FILE = A) (X, Y) COMMON (x, z) RETRIEVE ((FILE = B) and (Q > 1)) (Z, W)")
    assert isinstance(rc, RetrieveCommon) and rc.op == "RETRIEVE_COMMON"
    assert rc.common == ("X", "Z") and rc.pos == P(1, 1)
    assert rc.left == Retrieve(
        q((pred("FILE", "=", "A", 10),)),
        (TargetItem("X", None, False, P(1, 22)), TargetItem("Y", None, False, P(1, 25))),
        None,
        P(1, 1),
    )
    assert rc.right.pos == P(1, 42) and rc.right.by is None
    assert [t.name for t in rc.right.targets] == ["Z", "W"]


def test_request_ops() -> None:
    assert [
        r.op
        for r in parse(
            "[INSERT (<A,1>); DELETE (A=1); UPDATE (A=1) <A=2>; RETRIEVE (A=1) (A)]"
        ).requests
    ] == ["INSERT", "DELETE", "UPDATE", "RETRIEVE"]


# -- transactions --------------------------------------------------------------


@pytest.mark.parametrize("trailing", ["", ";", " ; "])
def test_transaction_trailing_semicolon(trailing: str) -> None:
    unit = parse(f"[INSERT (<A, 1>); DELETE (A = 1){trailing}]")
    assert unit.transaction and [r.op for r in unit.requests] == ["INSERT", "DELETE"]


def test_single_request_transaction() -> None:
    unit = parse("[ RETRIEVE (A = 1) (B) BY C ]")
    assert unit == TrafficUnit((one("  RETRIEVE (A = 1) (B) BY C"),), True)


# -- records, bodies, values ---------------------------------------------------


def test_body_with_escapes_and_newlines() -> None:
    ins = one("INSERT (<A, 1>) {first line\n  a \\} brace, a \\\\ backslash, \\n kept {x}")
    assert ins.body == "first line\n  a } brace, a \\ backslash, \\n kept {x"


@pytest.mark.parametrize("text, body", [("INSERT (<A,1>)", None), ("INSERT (<A,1>) {}", "")])
def test_body_absent_or_empty(text: str, body: str | None) -> None:
    assert one(text).body == body


@pytest.mark.parametrize(
    "literal, value",
    [
        ("42", 42),
        ("-7", -7),
        ("+3", 3),
        ("3.5", 3.5),
        ("-0.25", -0.25),
        ("1e3", 1000.0),
        ("2.5E-2", 0.025),
        (".5", 0.5),
        ("Monterey", "Monterey"),
        ("abc12", "abc12"),
        ("One", "One"),
        ("'San Jose'", "San Jose"),
        ('"dq \\" \\\' \\\\ \\n \\t \\q"', "dq \" ' \\ \n \t q"),
        ("'it\\'s'", "it's"),
        ("\"x''); DROP TABLE r; --\"", "x''); DROP TABLE r; --"),
        ("'x\\'\\'); DROP TABLE r; --'", "x''); DROP TABLE r; --"),
        ("''", ""),
        ("or", "or"),
    ],
)
def test_values(literal: str, value: Any) -> None:
    assert strip(one(f"INSERT (<A, {literal}>)").keywords[0].value) == strip(value)
    assert strip(one(f"DELETE (A = {literal})").query.conjunctions[0].predicates[0].value) == strip(
        value
    )
    slow = one(f"INSERT (<A -- force the token-by-token path\n, {literal}>)").keywords[0].value
    assert strip(slow) == strip(value)


def test_case_insensitive_keywords_and_upper_cased_attributes() -> None:
    a = one("retrieve ((File = Census) AND (pop > 1)) Or (file = X) (city, Avg(pop)) By Zip")
    b = one("RETRIEVE ((FILE = Census) and (POP > 1)) or (FILE = X) (CITY, AVG(POP)) BY ZIP")
    assert a == b
    assert one("Insert (<city, MonTerey>)").keywords[0] == Keyword("CITY", "MonTerey", P(1, 9))


@pytest.mark.parametrize(
    "expr, source, arith, value, bare",
    [
        ("POP + 5", "POP", "+", 5, False),
        ("POP - 5", "POP", "-", 5, False),
        ("POP -5", "POP", "-", 5, False),
        # The one signed number whose negation no int64 holds: added, as it was written.
        ("POP -9223372036854775808", "POP", "+", -2**63, False),
        ("POP -9223372036854775807", "POP", "-", 2**63 - 1, False),
        ("pop+5", "POP", "+", 5, False),
        ("POP - -5", "POP", "-", -5, False),
        ("POP * 2.5", "POP", "*", 2.5, False),
        ("POP / x", "POP", "/", "x", False),
        ("-5", None, None, -5, False),
        ("5", None, None, 5, False),
        ("Monterey", None, None, "Monterey", True),
        ("'Monterey'", None, None, "Monterey", False),
        ("count", None, None, "count", False),
    ],
)
def test_modifier_forms(expr: str, source: Any, arith: Any, value: Any, bare: bool) -> None:
    m = one(f"UPDATE (A = 1) <pop = {expr}>").modifier
    assert strip(m) == strip(Modifier("POP", source, arith, value, bare, P(1, 16)))


def test_whitespace_and_comments() -> None:
    text = "-- leading comment\nDELETE\t-- why\n  ( A\n=\n'x--y' ) -- trailing"
    d = one(text)
    assert d.pos == P(2, 1)
    assert d.query == Query((Conjunction((Predicate("A", "=", "x--y", P(3, 3)),)),))
