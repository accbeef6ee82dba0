"""Recursive-descent parser for ABDL traffic units (grammar in docs/spec.md §3).

Traffic units and the four requests; the query three of them share, and the token
helpers, are in query_parser.py. Keywords, predicates and plain target items are first
tried with one compiled pattern each (the lexer's "fast path"); anything unusual -- a
syntax error, a comment, a reserved word, an unrepresentable number -- falls back to
the token-by-token path, which is the reference behaviour and produces the precise
error. A property test checks that both paths build identical trees.
"""

from __future__ import annotations

from controller.abdl import ast
from controller.abdl.lexer import (
    AGGREGATE,
    ATTRIBUTE,
    END,
    ITEM_RE,
    KEYWORD_RE,
    KEYWORDS,
    VALUE,
    AbdlSyntaxError,
    Token,
    fast_value,
)
from controller.abdl.query_parser import QueryParser

__all__ = ["AbdlSyntaxError", "parse"]

_REQUEST_STARTS = ("INSERT", "DELETE", "UPDATE", "RETRIEVE")


def parse(text: str, max_text: int | None = None) -> ast.TrafficUnit:
    """Parse one traffic unit: a request or a `[ ...; ... ]` transaction.

    With `max_text`, more than that many characters outside record bodies raise
    TextTooLong as soon as they are read: parsing costs far more than the text.
    """
    return _Parser(text, max_text).traffic_unit()


class _Parser(QueryParser):
    __slots__ = ("_trail",)

    def __init__(self, text: str, max_text: int | None = None) -> None:
        super().__init__(text, max_text)
        # Optional tokens that could have continued the request just parsed;
        # they are added to "expected" when the request is followed by junk.
        self._trail: tuple[str, ...] = ()

    # -- traffic unit ---------------------------------------------------------

    def traffic_unit(self) -> ast.TrafficUnit:
        lx = self._lx
        if lx.peek().kind != "[":
            request = self._request(*_REQUEST_STARTS, "[")
            self._end()
            return ast.TrafficUnit((request,), False)
        open_tok = lx.take()
        if lx.peek().kind == "]":
            raise lx.error(open_tok.offset, found="[", detail="empty transaction")
        requests: list[ast.Request] = []
        while True:
            lx.check_length(lx.pos)
            tok = lx.peek()
            if tok.kind == "[":
                raise lx.error(tok.offset, found="[", detail="nested transactions are not allowed")
            requests.append(self._request(*_REQUEST_STARTS))
            tok = lx.take()
            if tok.kind == "]":
                break
            if tok.kind != ";":
                self._fail(tok, *self._trail, ";", "]")
            if lx.peek().kind == "]":  # optional ';' before the closing bracket
                lx.take()
                break
        self._trail = ()
        self._end()
        return ast.TrafficUnit(tuple(requests), True)

    def _end(self) -> None:
        tok = self._lx.peek()
        if tok.kind != "EOF":
            self._fail(tok, *self._trail, END)
        self._lx.check_length(len(self._lx.text))

    def _request(self, *expected: str) -> ast.Request:
        tok = self._lx.take()
        kind = tok.kind
        if kind == "INSERT":
            return self._insert(tok)
        if kind == "RETRIEVE":
            return self._retrieve(tok)
        if kind == "DELETE":
            query = self._query()
            self._trail = ("or",)
            return ast.Delete(query, self._lx.position(tok.offset))
        if kind == "UPDATE":
            return self._update(tok)
        self._fail(tok, *expected)

    # -- INSERT ---------------------------------------------------------------

    def _insert(self, insert_tok: Token) -> ast.Insert:
        lx = self._lx
        self._expect("(")
        keywords: list[ast.Keyword] = []
        append = keywords.append
        # Hot path (big INSERTs from loaders): locals instead of attribute look-ups.
        text, match, position, keyword = lx.text, KEYWORD_RE.match, lx.position, ast.Keyword
        offset, bound = lx.mark(), lx.bound
        while True:
            if offset > bound:
                lx.check_length(offset)
            m = match(text, offset)
            if m is not None:
                _, attr, num, word, string, sep = m.groups()
                upper = attr.upper()
                value = fast_value(num, word, string)
                if value is not None and upper not in KEYWORDS:
                    append(keyword(upper, value, position(m.start(1))))
                    offset = m.end()
                    if sep == ",":
                        continue
                    break
            # Slow path: the reference behaviour, and it reports any error.
            lx.reset(offset)
            lt = self._expect("<")
            attr = self._attr()
            self._expect(",")
            slow_value = self._value()
            self._expect(">")
            append(ast.Keyword(attr, slow_value, position(lt.offset)))
            tok = lx.take()
            if tok.kind == ")":
                offset = lx.mark()
                break
            if tok.kind != ",":
                self._fail(tok, ",", ")")
            offset = lx.mark()
        lx.reset(offset)
        body: str | None = None
        if lx.peek().kind == "{":
            brace = lx.take()
            body = lx.read_body(brace.offset)
        self._trail = () if body is not None else ("{",)
        return ast.Insert(tuple(keywords), body, position(insert_tok.offset))

    # -- UPDATE ---------------------------------------------------------------

    def _update(self, update_tok: Token) -> ast.Update:
        lx = self._lx
        query = self._query()
        lt = lx.take()
        if lt.kind != "<":
            self._fail(lt, "or", "<")
        attr = self._attr()
        self._expect("=")
        source: str | None = None
        arith: str | None = None
        bare_word = False
        tok = lx.take()
        kind = tok.kind
        value: ast.Value
        if kind == "NUMBER" or kind == "STRING":
            assert tok.value is not None  # literals always carry their value
            value = tok.value
        elif kind == "WORD" or kind in KEYWORDS:
            nxt = lx.peek()
            if nxt.kind in ast.ARITH_OPS or (nxt.kind == "NUMBER" and nxt.text[0] in "+-"):
                if kind != "WORD":
                    raise self._lx.reserved(tok.text, tok.offset)
                source = tok.text.upper()
                value = self._arith_operand(nxt)
                arith = nxt.kind if nxt.kind in ast.ARITH_OPS else nxt.text[0]
                if arith == "-" and value == 1 << 63:
                    # `A -9223372036854775808`: the one number whose negation is no int64.
                    arith, value = "+", -value
            else:
                value = tok.text
                # A reserved word can never name an attribute, so it is a string.
                bare_word = kind == "WORD"
        else:
            self._fail(tok, VALUE, ATTRIBUTE)
        gt = lx.take()
        if gt.kind != ">":
            if bare_word:  # `<A = Word ?`: an arithmetic operator could also follow
                self._fail(gt, *ast.ARITH_OPS, ">")
            self._fail(gt, ">")
        self._trail = ()
        modifier = ast.Modifier(attr, source, arith, value, bare_word, lx.position(lt.offset))
        return ast.Update(query, modifier, lx.position(update_tok.offset))

    def _arith_operand(self, op_tok: Token) -> ast.Value:
        """Operand after `ATTR op`; `POP -5` lexes as a signed number, so split it."""
        self._lx.take()
        if op_tok.kind in ast.ARITH_OPS:
            return self._value()
        number = op_tok.value
        assert isinstance(number, int | float)
        return -number if op_tok.text[0] == "-" else number

    # -- RETRIEVE -------------------------------------------------------------

    def _retrieve(self, retrieve_tok: Token) -> ast.Retrieve | ast.RetrieveCommon:
        lx = self._lx
        left = self._retrieve_body(retrieve_tok)
        tok = lx.peek()
        if tok.kind == "BY":
            lx.take()
            by_pos = lx.position(lx.peek().offset)
            by = self._attr()
            self._trail = ()
            return ast.Retrieve(left.query, left.targets, by, left.pos, by_pos)
        if tok.kind != "COMMON":
            self._trail = ("BY", "COMMON")
            return left
        lx.take()
        self._expect("(")
        first_pos = lx.position(lx.peek().offset)
        first = self._attr()
        self._expect(",")
        second_pos = lx.position(lx.peek().offset)
        second = self._attr()
        self._expect(")")
        right = self._retrieve_body(self._expect("RETRIEVE"))
        self._trail = ()
        return ast.RetrieveCommon(left, (first, second), right, left.pos,
                                  (first_pos, second_pos))

    def _retrieve_body(self, retrieve_tok: Token) -> ast.Retrieve:
        """`RETRIEVE query target` (the RETRIEVE token already taken)."""
        lx = self._lx
        query = self._query()
        tok = lx.take()
        if tok.kind != "(":
            self._fail(tok, "or", "(")
        items: list[ast.TargetItem] = []
        text, match, position = lx.text, ITEM_RE.match, lx.position
        while True:
            # Fast path for plain attribute names and ALL (the common case).
            at = lx.mark()
            lx.check_length(at)
            m = match(text, at)
            upper = m.group(1).upper() if m is not None else ""
            if m is not None and (upper == "ALL" or upper not in KEYWORDS):
                pos = position(m.start(1))
                all_ = upper == "ALL"
                items.append(ast.TargetItem(None if all_ else upper, None, all_, pos))
                lx.reset(m.end())
                if m.group(2) == ",":
                    continue
                break
            items.append(self._target_item())
            tok = lx.take()
            if tok.kind == ")":
                break
            if tok.kind != ",":
                self._fail(tok, ",", ")")
        return ast.Retrieve(query, tuple(items), None, position(retrieve_tok.offset))

    def _target_item(self) -> ast.TargetItem:
        lx = self._lx
        tok = lx.take()
        kind = tok.kind
        pos = lx.position(tok.offset)
        if kind == "WORD":
            return ast.TargetItem(tok.text.upper(), None, False, pos)
        if kind == "ALL":
            return ast.TargetItem(None, None, True, pos)
        if kind in ast.AGGREGATES:
            self._expect("(")
            attr = self._attr()
            self._expect(")")
            return ast.TargetItem(attr, kind, False, pos)
        if kind in KEYWORDS:
            raise self._lx.reserved(tok.text, tok.offset)
        self._fail(tok, ATTRIBUTE, AGGREGATE, "ALL")
