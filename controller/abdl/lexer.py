"""Hand-written ABDL lexer and the syntax-error type.

The lexer is a cursor over the source text. Tokens are produced on demand with
one token of look-ahead. The parser may also try one of the "fast" patterns
below, which swallow a whole keyword, predicate or target item in one regex call,
because a per-token Python loop is too slow for 30+-keyword INSERTs on the hot
path. Fast and token patterns are built from the same pieces (NUM, WORD, STR),
so both paths agree on what a number, word and string are.
"""

from __future__ import annotations

import math
import re
import unicodedata
from bisect import bisect_right
from typing import NamedTuple

from controller.abdl.ast import Pos, Value
from mbds.values import INT64_MAX, INT64_MIN, INT64_RANGE

# Reserved words, as token kinds (canonical upper case).
KEYWORDS: frozenset[str] = frozenset(
    {"INSERT", "DELETE", "UPDATE", "RETRIEVE", "COMMON", "BY", "AND", "OR", "ALL"}
    | {"AVG", "COUNT", "SUM", "MIN", "MAX"}
)

# Descriptive names used in `AbdlSyntaxError.expected`; everything else there
# is a literal token and gets quoted in the message.
ATTRIBUTE = "attribute name"
VALUE = "value"
RELOP = "comparison operator"
AGGREGATE = "aggregate"
END = "end of input"
_DESCRIPTIVE = frozenset({ATTRIBUTE, VALUE, RELOP, AGGREGATE, END})

# Possessive quantifiers (3.11+) keep whitespace/comment runs from
# backtracking exponentially when a later part of a pattern fails.
WS = r"(?:[ \t\r\n\f\v]++|--[^\n]*+)*+"
NUM = r"[+-]?(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
WORD = r"[A-Za-z_][A-Za-z0-9_]*"
# Raw newlines are not allowed inside quotes (write \n): an unclosed quote is
# then reported where it is instead of swallowing the rest of a script.
STR = r"'(?:[^'\\\n]|\\.)*+'|\"(?:[^\"\\\n]|\\.)*+\""

# Fast paths: one regex call for a whole construct, for the hot INSERT/RETRIEVE
# shapes. Plain whitespace only; comments inside fall back to the token path.
_S = r"[ \t\r\n\f\v]*"
_VALUE = rf"(?:({NUM})|({WORD})|({STR}))"
# `<ATTR, value>` and the following ',' or ')': groups 1 '<', 2 attr, 3-5 value, 6 separator.
KEYWORD_RE = re.compile(rf"{_S}(<){_S}({WORD}){_S},{_S}{_VALUE}{_S}>{_S}([,)])", re.DOTALL)
# `(ATTR relop value)`: groups 1 '(', 2 attr, 3 relop, 4-6 value.
PREDICATE_RE = re.compile(rf"{_S}(\(){_S}({WORD}){_S}(<=|>=|!=|=|<|>){_S}{_VALUE}{_S}\)", re.DOTALL)
# A plain target attribute and the following ',' or ')': groups 1 attr, 2 separator.
ITEM_RE = re.compile(rf"{_S}({WORD}){_S}([,)])")

_TOKEN_RE = re.compile(
    WS + rf"(?:(?P<NUMBER>{NUM})|(?P<WORD>{WORD})|(?P<STRING>{STR})"
    r"|(?P<PUNCT><=|>=|!=|[-+*/<>=(),;\[\]{}]))",
    re.DOTALL,
)
_WS_RE = re.compile(WS)
_NUM_TAIL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.")
_BAD_NUM_RE = re.compile(r"[+-]?[A-Za-z0-9_.]+")
_STR_ESC_RE = re.compile(r"\\(.)", re.DOTALL)
_STR_ESCAPES = {"n": "\n", "t": "\t"}
_BODY_RE = re.compile(r"(?:[^\\}]|\\.)*+}", re.DOTALL)
_BODY_ESC_RE = re.compile(r"\\([\\}])")
_NEWLINE_RE = re.compile("\n")

# Pos objects for line 1 are shared: single-line requests are the common case
# and a dict hit is several times cheaper than building a frozen dataclass.
# (Pos is immutable, so a racing thread at worst builds an equal duplicate.)
_LINE1_POS: dict[int, Pos] = {}
_LINE1_POS_LIMIT = 4096


class TextTooLong(ValueError):
    """The text outside record bodies is longer than the parse was allowed to read."""


class AbdlSyntaxError(ValueError):
    """A request is not valid ABDL. Carries 1-based line/column of the problem."""

    def __init__(
        self,
        line: int,
        column: int,
        expected: tuple[str, ...] = (),
        found: str = "",
        detail: str | None = None,
    ) -> None:
        self.line = line
        self.column = column
        self.expected = expected
        self.found = found
        self.detail = detail
        super().__init__(f"line {line}, column {column}: {self._describe()}")

    def __reduce__(self) -> tuple[type[AbdlSyntaxError], tuple[object, ...]]:
        # Custom __init__ signature: make pickling (e.g. across processes) work.
        return (type(self), (self.line, self.column, self.expected, self.found, self.detail))

    def _describe(self) -> str:
        if self.detail is not None:
            return self.detail
        names = [e if e in _DESCRIPTIVE else quote(e) for e in self.expected]
        wanted = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        found = END if self.found == END else quote(self.found)
        return f"expected {wanted}, found {found}"


def quote(text: str) -> str:
    """Quote a source fragment for an error message, shortening long ones. Characters a
    terminal would not show as themselves are escaped (`visible`)."""
    if len(text) > 40:
        text = text[:37] + "..."
    text = visible(text)
    if "'" in text and '"' not in text:
        return f'"{text}"'
    return f"'{text}'"


_CONTROL_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _CONTROL_ESCAPES:
        return _CONTROL_ESCAPES[ch]
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with each character that is not printable, or is whitespace other than a
    plain space, as an escape: a no-break or zero-width space would look like a space or
    nothing, and a control character (ESC) would reach the reader's terminal raw."""
    if text.isprintable():      # no whitespace but the plain space is printable
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def describe_character(ch: str) -> str:
    """One character for an error, named when it is escaped: `'\\u00a0' (NO-BREAK
    SPACE)`, `'~'`."""
    name = unicodedata.name(ch, "") if not ch.isprintable() else ""
    return f"{quote(ch)} ({name})" if name else quote(ch)


class Token(NamedTuple):
    kind: str  # 'NUMBER' 'STRING' 'WORD' 'EOF', a keyword ('AND'...) or the punctuation itself
    text: str  # exactly as written
    value: Value | None  # converted literal for NUMBER/STRING, the text for words
    offset: int  # index of the first character in the source


def is_integer(text: str) -> bool:
    """Whether a NUM match is an integer literal (no fraction, no exponent)."""
    return "." not in text and "e" not in text and "E" not in text


def number_value(text: str) -> int | float | None:
    """Convert a NUM match; None when it cannot be represented (integers: in 64 bits)."""
    try:
        if not is_integer(text):
            value = float(text)
            # Beyond a double, or so small it would be stored as 0: refused, as
            # PostgreSQL refuses 1e-400, rather than changed.
            mantissa = text.lower().partition("e")[0]
            underflow = value == 0 and mantissa.strip("+-.0") != ""
            return None if math.isinf(value) or underflow else value
        number = int(text)
    except ValueError:  # e.g. more digits than sys.get_int_max_str_digits()
        return None
    return number if INT64_MIN <= number <= INT64_MAX else None


def string_value(text: str) -> str:
    """Decode a quoted STR match (quotes included)."""
    inner = text[1:-1]
    if "\\" not in inner:
        return inner
    return _STR_ESC_RE.sub(lambda m: _STR_ESCAPES.get(m.group(1), m.group(1)), inner)


def fast_value(num: str | None, word: str | None, string: str | None) -> Value | None:
    """Value from the groups of a fast pattern; None means 'redo on the slow path'."""
    if word is not None:
        return word  # bare word, case preserved
    if num is not None:
        return number_value(num)
    assert string is not None  # one of the three alternatives always matched
    return string_value(string)


class Lexer:
    __slots__ = ("text", "pos", "bound", "_peeked", "_line_starts")

    def __init__(self, text: str, limit: int | None = None) -> None:
        self.text = text
        self.pos = 0  # offset just after the last scanned token
        # How far the parse may read: `limit` characters plus every record body read so
        # far (bodies are data, copied in one step; the rest costs a parse).
        self.bound = len(text) if limit is None else limit
        self._peeked: Token | None = None
        self._line_starts: list[int] | None = None
        if "\n" in text:
            self._line_starts = [0, *(m.end() for m in _NEWLINE_RE.finditer(text))]

    # -- positions and errors -------------------------------------------------

    def position(self, offset: int) -> Pos:
        starts = self._line_starts
        if starts is None:
            pos = _LINE1_POS.get(offset)
            if pos is None:
                pos = Pos(1, offset + 1)
                if offset < _LINE1_POS_LIMIT:
                    _LINE1_POS[offset] = pos
            return pos
        line = bisect_right(starts, offset)
        return Pos(line, offset - starts[line - 1] + 1)

    def error(
        self,
        offset: int,
        expected: tuple[str, ...] = (),
        found: str = "",
        detail: str | None = None,
    ) -> AbdlSyntaxError:
        pos = self.position(offset)
        return AbdlSyntaxError(pos.line, pos.column, expected, found, detail)

    def reserved(self, word: str, offset: int) -> AbdlSyntaxError:
        detail = f"'{word}' is a reserved word and cannot be an attribute name"
        return self.error(offset, (ATTRIBUTE,), word, detail)

    def unexpected(self, tok: Token, expected: tuple[str, ...]) -> AbdlSyntaxError:
        return self.error(tok.offset, expected, END if tok.kind == "EOF" else tok.text)

    # -- token stream ---------------------------------------------------------

    def peek(self) -> Token:
        tok = self._peeked
        if tok is None:
            tok = self._peeked = self._scan()
        return tok

    def take(self) -> Token:
        tok = self._peeked
        if tok is None:
            return self._scan()
        self._peeked = None
        return tok

    def mark(self) -> int:
        """Offset of the next unread character, dropping any look-ahead token.

        Used before fast-pattern matching; a dropped token is simply re-scanned.
        """
        if self._peeked is not None:
            self.pos = self._peeked.offset
            self._peeked = None
        return self.pos

    def fast_match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """Match `pattern` at the cursor; advance past it on success."""
        m = pattern.match(self.text, self.mark())
        if m is not None:
            self.pos = m.end()
        return m

    def check_length(self, offset: int) -> None:
        """Stop a parse that has read more text outside record bodies than it may."""
        if offset > self.bound:
            raise TextTooLong(offset)

    def reset(self, offset: int) -> None:
        """Move the cursor to `offset` (after fast matching, or to redo one slowly)."""
        self.pos = offset
        self._peeked = None

    def read_body(self, brace_offset: int) -> str:
        """Raw record body after a '{' (the cursor sits just after it)."""
        if self._peeked is not None:
            raise AssertionError("read_body with a pending look-ahead token")
        text, start = self.text, self.pos
        end = text.find("}", start)
        if end >= 0 and text.find("\\", start, end) < 0:
            self.pos = end + 1  # fast path: nothing escaped
            self.bound += self.pos - brace_offset
            return text[start:end]
        m = _BODY_RE.match(text, start)
        if m is None:
            raise self.error(brace_offset, found="{", detail="unterminated body text (no '}')")
        self.pos = m.end()
        self.bound += self.pos - brace_offset
        # Only \} and \\ are escapes; any other backslash is kept verbatim.
        return _BODY_ESC_RE.sub(r"\1", text[start : m.end() - 1])

    def _scan(self) -> Token:
        text = self.text
        m = _TOKEN_RE.match(text, self.pos)
        if m is None:
            return self._scan_failed()
        kind = m.lastgroup
        assert kind is not None  # every alternative is a named group
        s = m.group(kind)
        end = self.pos = m.end()
        start = end - len(s)
        if kind == "WORD":
            upper = s.upper()
            return Token(upper if upper in KEYWORDS else "WORD", s, s, start)
        if kind == "PUNCT":
            return Token(s, s, None, start)
        if kind == "STRING":
            return Token("STRING", s, string_value(s), start)
        if end < len(text) and text[end] in _NUM_TAIL:
            bad = _BAD_NUM_RE.match(text, start)
            assert bad is not None
            raise self.error(start, found=bad.group(), detail=f"bad number {quote(bad.group())}")
        value = number_value(s)
        if value is None:
            detail = f"number out of range {quote(s)}"
            if is_integer(s):
                detail += f": {INT64_RANGE}"
            raise self.error(start, found=s, detail=detail)
        return Token("NUMBER", s, value, start)

    def _scan_failed(self) -> Token:
        text = self.text
        ws = _WS_RE.match(text, self.pos)
        assert ws is not None  # WS matches the empty string
        at = ws.end()
        if at == len(text):
            self.pos = at
            return Token("EOF", "", None, at)
        ch = text[at]
        if ch in "'\"":
            raise self.error(at, found=ch, detail="unterminated string literal")
        raise self.error(at, found=ch, detail=f"bad character {describe_character(ch)}")
