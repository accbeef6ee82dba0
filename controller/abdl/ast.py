"""Syntax tree for ABDL traffic units (docs/spec.md §3).

The tree is purely syntactic: attribute names are upper-cased, values are
converted to int/float/str, and nothing is checked against a schema. That is
the semantic stage's job, which keeps this package free of any catalogue
dependency.

Every node is a frozen, slotted dataclass so a parsed request can be shared
between threads (and cached) without defensive copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mbds.traffic import RELOPS as RELOPS  # re-exported for the parser
from mbds.values import Scalar as Value

AGGREGATES: tuple[str, ...] = ("AVG", "COUNT", "SUM", "MIN", "MAX")
ARITH_OPS: tuple[str, ...] = ("+", "-", "*", "/")


@dataclass(frozen=True, slots=True)
class Pos:
    """1-based source position of the first character of a node."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Predicate:
    """`(ATTR relop value)`."""

    attr: str
    op: str
    value: Value
    pos: Pos


@dataclass(frozen=True, slots=True)
class Conjunction:
    """Predicates joined by `and`."""

    predicates: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Query:
    """A query in disjunctive normal form: conjunctions joined by `or`."""

    conjunctions: tuple[Conjunction, ...]


@dataclass(frozen=True, slots=True)
class TargetItem:
    """One entry of a RETRIEVE target list.

    ATTR -> (attr, None, False); AGG(ATTR) -> (attr, agg, False);
    ALL -> (None, None, True).
    """

    attr: str | None
    agg: str | None
    all: bool
    pos: Pos

    @property
    def name(self) -> str:
        """Result column key, e.g. 'CITY', 'AVG(POP)' or 'ALL'."""
        if self.all:
            return "ALL"
        if self.agg is not None:
            return f"{self.agg}({self.attr})"
        assert self.attr is not None  # guaranteed by the parser for non-ALL items
        return self.attr


@dataclass(frozen=True, slots=True)
class Keyword:
    """`<ATTR, value>` inside an INSERT record."""

    attr: str
    value: Value
    pos: Pos


@dataclass(frozen=True, slots=True)
class Insert:
    op: ClassVar[str] = "INSERT"

    keywords: tuple[Keyword, ...]
    body: str | None
    pos: Pos


@dataclass(frozen=True, slots=True)
class Delete:
    op: ClassVar[str] = "DELETE"

    query: Query
    pos: Pos


@dataclass(frozen=True, slots=True)
class Modifier:
    """`<ATTR = expr>` of an UPDATE.

    `<A = 5>`       -> source=None, arith=None, value=5, bare_word=False
    `<A = B + 5>`   -> source='B', arith='+', value=5, bare_word=False
    `<A = Word>`    -> source=None, arith=None, value='Word', bare_word=True:
                       the parser cannot tell an attribute copy from a string
                       constant without the schema, so the semantic stage decides.
    """

    attr: str
    source: str | None
    arith: str | None
    value: Value | None
    bare_word: bool
    pos: Pos


@dataclass(frozen=True, slots=True)
class Update:
    op: ClassVar[str] = "UPDATE"

    query: Query
    modifier: Modifier
    pos: Pos


@dataclass(frozen=True, slots=True)
class Retrieve:
    op: ClassVar[str] = "RETRIEVE"

    query: Query
    targets: tuple[TargetItem, ...]
    by: str | None
    pos: Pos
    # Where the BY attribute is written, for the semantic stage's errors about it.
    by_pos: Pos | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class RetrieveCommon:
    """`left COMMON (A, B) right`; `common` keeps the two names in written order."""

    op: ClassVar[str] = "RETRIEVE_COMMON"

    left: Retrieve
    common: tuple[str, str]
    right: Retrieve
    pos: Pos
    # Where each of the two COMMON attributes is written.
    common_pos: tuple[Pos, Pos] | None = field(default=None, compare=False)


Request = Insert | Delete | Update | Retrieve | RetrieveCommon


@dataclass(frozen=True, slots=True)
class TrafficUnit:
    """A single request (transaction=False) or a bracketed transaction."""

    requests: tuple[Request, ...]
    transaction: bool
