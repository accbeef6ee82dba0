"""Property tests of the ABDL parser (controller.abdl): parsed trees survive a round trip
through a small unparser, the fast and slow paths agree, and any text either parses
or raises a syntax error."""

from __future__ import annotations

import re
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

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
    TrafficUnit,
    Update,
    parse,
    query_parser,
)
from controller.abdl import parser as parser_module
from controller.abdl.lexer import KEYWORDS
from tests.test_abdl_parser import strip

# -- property tests: round trip through a small unparser --------------------------

WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
idents = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True)
attrs = idents.filter(lambda s: s.upper() not in KEYWORDS).map(str.upper)
bare_words = idents.filter(lambda s: s.upper() not in KEYWORDS)
values = st.one_of(
    st.integers(-(10**15), 10**15),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    idents,
)
P0 = Pos(0, 0)
predicates = st.builds(
    Predicate, attrs, st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), values, st.just(P0)
)
queries = st.lists(
    st.lists(predicates, min_size=1, max_size=3).map(lambda ps: Conjunction(tuple(ps))),
    min_size=1,
    max_size=3,
).map(lambda cs: Query(tuple(cs)))
targets = st.lists(
    st.one_of(
        st.builds(TargetItem, attrs, st.none(), st.just(False), st.just(P0)),
        st.builds(
            TargetItem,
            attrs,
            st.sampled_from(["AVG", "COUNT", "SUM", "MIN", "MAX"]),
            st.just(False),
            st.just(P0),
        ),
        st.just(TargetItem(None, None, True, P0)),
    ),
    min_size=1,
    max_size=4,
).map(tuple)
retrieves = st.builds(Retrieve, queries, targets, st.none() | attrs, st.just(P0))
plain_retrieves = st.builds(Retrieve, queries, targets, st.none(), st.just(P0))
modifiers = st.one_of(
    st.builds(
        Modifier,
        attrs,
        st.none(),
        st.none(),
        values.filter(lambda v: not isinstance(v, str) or not WORD_RE.match(v)),
        st.just(False),
        st.just(P0),
    ),
    st.builds(Modifier, attrs, st.none(), st.none(), bare_words, st.just(True), st.just(P0)),
    st.builds(
        Modifier,
        attrs,
        attrs,
        st.sampled_from(["+", "-", "*", "/"]),
        values,
        st.just(False),
        st.just(P0),
    ),
)
requests = st.one_of(
    st.builds(
        Insert,
        st.lists(st.builds(Keyword, attrs, values, st.just(P0)), min_size=1, max_size=5).map(tuple),
        st.none() | st.text(max_size=20),
        st.just(P0),
    ),
    st.builds(Delete, queries, st.just(P0)),
    st.builds(Update, queries, modifiers, st.just(P0)),
    retrieves,
    st.builds(
        RetrieveCommon, plain_retrieves, st.tuples(attrs, attrs), plain_retrieves, st.just(P0)
    ),
)
units = st.one_of(
    requests.map(lambda r: TrafficUnit((r,), False)),
    st.lists(requests, min_size=1, max_size=3).map(lambda rs: TrafficUnit(tuple(rs), True)),
)


class Unparser:
    """Writes an AST back as ABDL tokens, varying spelling, quoting and spacing."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.out: list[str] = []

    def flip(self) -> bool:
        return bool(self.draw(st.booleans()))

    def word(self, upper: str) -> None:
        self.out.append(upper.lower() if self.flip() else upper)

    def value(self, v: Any, bare: bool = True, force_bare: bool = False) -> None:
        if isinstance(v, int | float):
            self.out.append(repr(v))
        elif force_bare or (bare and WORD_RE.match(v) and self.flip()):
            self.out.append(v)
        else:
            quote = "'" if self.flip() else '"'
            esc = v.replace("\\", "\\\\").replace(quote, "\\" + quote).replace("\n", "\\n")
            self.out.append(quote + esc + quote)

    def query(self, query: Query) -> None:
        for i, conj in enumerate(query.conjunctions):
            if i:
                self.word("or")
            wrap = len(conj.predicates) > 1 or self.flip()
            if wrap:
                self.out.append("(")
            for j, p in enumerate(conj.predicates):
                if j:
                    self.word("and")
                self.out += ["(", p.attr, p.op]
                self.value(p.value)
                self.out.append(")")
            if wrap:
                self.out.append(")")

    def retrieve(self, r: Retrieve) -> None:
        self.word("RETRIEVE")
        self.query(r.query)
        self.out.append("(")
        for i, t in enumerate(r.targets):
            self.out += [","] if i else []
            self.out += ["ALL"] if t.all else [t.agg, "(", t.attr, ")"] if t.agg else [t.attr]
        self.out.append(")")
        if r.by:
            self.word("BY")
            self.out.append(r.by)

    def request(self, r: Any) -> None:
        if isinstance(r, Insert):
            self.word("INSERT")
            self.out.append("(")
            for i, k in enumerate(r.keywords):
                self.out += [",", "<", k.attr, ","] if i else ["<", k.attr, ","]
                self.value(k.value)
                self.out.append(">")
            self.out.append(")")
            if r.body is not None:
                self.out.append("{" + r.body.replace("\\", "\\\\").replace("}", "\\}") + "}")
        elif isinstance(r, Delete | Update):
            self.word(r.op)
            self.query(r.query)
            if isinstance(r, Update):
                m = r.modifier
                self.out += ["<", m.attr, "="]
                if m.source:
                    self.out += [m.source, m.arith]
                self.value(m.value, bare=m.source is not None, force_bare=m.bare_word)
                self.out.append(">")
        elif isinstance(r, Retrieve):
            self.retrieve(r)
        else:
            self.retrieve(r.left)
            self.word("COMMON")
            self.out += ["(", r.common[0], ",", r.common[1], ")"]
            self.retrieve(r.right)

    def text(self, unit: TrafficUnit) -> str:
        if unit.transaction:
            self.out.append("[")
            for i, r in enumerate(unit.requests):
                self.out += [";"] if i else []
                self.request(r)
            self.out += [";", "]"] if self.flip() else ["]"]
        else:
            self.request(unit.requests[0])
        seps = st.sampled_from(["", " ", "  ", "\n", "\t", " -- note\n"])
        text = ""
        for tok in self.out:
            sep = self.draw(seps)
            glue = text[-1:].isalnum() or text[-1:] in "_." or text.endswith("-")
            if sep in ("", "\t") and glue and text and (tok[0].isalnum() or tok[0] in "_.+-"):
                sep = " "  # keep two words/numbers, or '-' '-5', from fusing
            text += sep + tok
        return text


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_trip(data: st.DataObject) -> None:
    unit = data.draw(units)
    text = Unparser(data.draw).text(unit)
    assert strip(parse(text)) == strip(unit), text


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fast_and_slow_paths_agree(data: st.DataObject) -> None:
    text = Unparser(data.draw).text(data.draw(units))
    fast = parse(text)
    never = re.compile(r"(?!)")
    with mock.patch.multiple(parser_module, KEYWORD_RE=never, ITEM_RE=never), \
            mock.patch.object(query_parser, "PREDICATE_RE", never):
        assert parse(text) == fast, text  # positions included


FRAGMENTS = (
    "INSERT DELETE UPDATE RETRIEVE COMMON BY and or ALL COUNT ( ) < > <= != = , ; [ ] { } \\"
    " + - * / A b1 5 -5 1e 2.5 . 'x 'y' \"z -- @ \u00e9"
).split() + ["\n", " "]


def check_garbage(text: str) -> None:
    try:
        parse(text)
    except AbdlSyntaxError as err:
        assert str(err).startswith(f"line {err.line}, column {err.column}: ")
        assert 1 <= err.line <= text.count("\n") + 1 and err.column >= 1


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_random_text_only_raises_syntax_errors(text: str) -> None:
    check_garbage(text)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40), st.sampled_from(["", " "]))
def test_token_soup_only_raises_syntax_errors(parts: list[str], sep: str) -> None:
    check_garbage(sep.join(parts))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_requests_only_raise_syntax_errors(data: st.DataObject) -> None:
    text = Unparser(data.draw).text(data.draw(units))
    start = data.draw(st.integers(0, len(text)))
    stop = data.draw(st.integers(start, min(len(text), start + 5)))
    check_garbage(text[:start] + data.draw(st.sampled_from([*FRAGMENTS, ""])) + text[stop:])
