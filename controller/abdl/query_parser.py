"""The ABDL query grammar (docs/spec.md §3), and the token helpers every rule uses.

A query -- a disjunction of conjunctions of predicates -- is the part of the grammar
that DELETE, UPDATE and RETRIEVE share; the requests and traffic units built around it
are in parser.py. As there, a predicate is first tried with one compiled pattern
(`PREDICATE_RE`), and anything unusual falls back to the token-by-token path, which
reports the precise error.
"""

from __future__ import annotations

from typing import NoReturn

from controller.abdl import ast
from controller.abdl.lexer import (
    ATTRIBUTE,
    KEYWORDS,
    PREDICATE_RE,
    RELOP,
    VALUE,
    Lexer,
    Token,
    fast_value,
)


class QueryParser:
    """A parser over one text's lexer: its helpers, and queries."""

    __slots__ = ("_lx",)

    def __init__(self, text: str, max_text: int | None = None) -> None:
        self._lx = Lexer(text, max_text)

    # -- helpers --------------------------------------------------------------

    def _fail(self, tok: Token, *expected: str) -> NoReturn:
        raise self._lx.unexpected(tok, expected)

    def _expect(self, kind: str) -> Token:
        tok = self._lx.take()
        if tok.kind != kind:
            self._fail(tok, kind)
        return tok

    def _attr(self, *expected: str) -> str:
        tok = self._lx.take()
        if tok.kind == "WORD":
            return tok.text.upper()
        if tok.kind in KEYWORDS:
            raise self._lx.reserved(tok.text, tok.offset)
        self._fail(tok, *(expected or (ATTRIBUTE,)))

    def _value(self) -> ast.Value:
        tok = self._lx.take()
        kind = tok.kind
        if kind == "NUMBER" or kind == "STRING":
            assert tok.value is not None
            return tok.value
        if kind == "WORD" or kind in KEYWORDS:
            return tok.text  # bare word, case preserved (reserved words allowed as values)
        self._fail(tok, VALUE)

    # -- queries --------------------------------------------------------------

    def _query(self) -> ast.Query:
        lx = self._lx
        conjunctions = [self._conjunction()]
        while lx.peek().kind == "OR":
            lx.check_length(lx.pos)
            lx.take()
            conjunctions.append(self._conjunction())
        return ast.Query(tuple(conjunctions))

    def _conjunction(self) -> ast.Conjunction:
        lx = self._lx
        predicate = self._fast_predicate()
        if predicate is not None:
            return ast.Conjunction((predicate,))
        open_tok = self._expect("(")
        if lx.peek().kind != "(":
            # '(' followed by anything but '(' starts a single predicate.
            return ast.Conjunction((self._predicate_rest(open_tok, ATTRIBUTE, "("),))
        predicates = [self._predicate()]
        while True:
            tok = lx.take()
            if tok.kind == ")":
                return ast.Conjunction(tuple(predicates))
            if tok.kind != "AND":
                self._fail(tok, ")", "and")
            lx.check_length(lx.pos)
            predicates.append(self._predicate())

    def _fast_predicate(self) -> ast.Predicate | None:
        lx = self._lx
        m = lx.fast_match(PREDICATE_RE)
        if m is None:
            return None
        _, attr, op, num, word, string = m.groups()
        upper = attr.upper()
        value = fast_value(num, word, string)
        if value is None or upper in KEYWORDS:
            lx.reset(m.start())
            return None
        return ast.Predicate(upper, op, value, lx.position(m.start(1)))

    def _predicate(self) -> ast.Predicate:
        predicate = self._fast_predicate()
        if predicate is not None:
            return predicate
        return self._predicate_rest(self._expect("("), ATTRIBUTE)

    def _predicate_rest(self, open_tok: Token, *attr_expected: str) -> ast.Predicate:
        attr = self._attr(*attr_expected)
        op = self._lx.take()
        if op.kind not in ast.RELOPS:
            self._fail(op, RELOP)
        value = self._value()
        self._expect(")")
        return ast.Predicate(attr, op.kind, value, self._lx.position(open_tok.offset))
