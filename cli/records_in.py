"""The records of a file's input to `mbds load file`, from CSV or JSON Lines: each value
checked against its attribute's type as it is read, and anything the input cannot give
refused naming its line (and column), before it is sent."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from cli.options import NotUtf8, utf8
from mbds.errors import shorten
from mbds.values import INT64_MAX, INT64_MIN, Value

BODY = "BODY"

# Numbers as a CSV cell spells them: ASCII digits only, where int() and float() would
# also take other scripts' digits, underscores, spaces and "nan".
INTEGER = re.compile(r"[+-]?[0-9]+")
FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
TYPE_NAMES = {"integer": "an integer", "float": "a number", "string": "a string"}

Record = tuple[list[Value], str | None]


class Refused(ValueError):
    """A record the input cannot give, named by its line and column."""


# What reading an input raises for the input's sake: reported, with no traceback.
BAD_INPUT = (Refused, NotUtf8, csv.Error, OSError)


class BeyondFloat(NamedTuple):
    """A number literal no float holds (1e999, 1e-400, NaN), shown by its text."""
    text: str


class BeyondInt(NamedTuple):
    """An integer literal of so many digits that no attribute holds it, shown by its
    text: int() of it would be slow, and past Python's digit limit refused."""
    text: str


# More digits than any 64-bit integer or float has (JSON allows no leading zeros).
MAX_DIGITS = 400


def _int(text: str) -> int | BeyondInt:
    return BeyondInt(text) if len(text) > MAX_DIGITS else int(text)


class _Twice(Exception):
    """A JSON object naming one key twice (not a ValueError, which `_json_records`
    reports as text that is not JSON)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; a key given twice is refused, not overwritten."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Twice(k)
            seen.add(k)
    return obj


class Written(float):
    """A JSON number with a fraction or exponent, keeping its text: refused where an
    integer goes, it is shown as written (1e2, not 100.0)."""
    __slots__ = ("text",)

    def __new__(cls, text: str) -> Written:
        v = super().__new__(cls, text)
        v.text = text
        return v


def _float(text: str) -> float | BeyondFloat:
    """A float literal's value; one a float holds only as infinity, or as 0 despite a
    non-zero digit before its exponent, is out of range (ABDL refuses both)."""
    v = float(text)
    zeroed = v == 0 and re.search("[1-9]", re.split("[eE]", text)[0])
    return BeyondFloat(text) if math.isinf(v) or zeroed else v


def _json_float(text: str) -> float | BeyondFloat:
    v = _float(text)
    return v if isinstance(v, BeyondFloat) else Written(text)


def _typed(kind: str, v: object) -> Value:
    """`v` as a value of an attribute of type `kind`; ValueError saying why it is not."""
    if v is None:
        return None
    if isinstance(v, BeyondFloat):
        raise ValueError("is out of a float's range")
    if isinstance(v, BeyondInt):
        raise ValueError({"integer": "is beyond 64-bit integers",
                          "float": "is out of a float's range"}.get(kind, "is not a string"))
    if kind == "integer" and type(v) is int:
        if not INT64_MIN <= v <= INT64_MAX:
            raise ValueError("is beyond 64-bit integers")
        return v
    if kind == "float" and isinstance(v, int | float) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            raise ValueError("is out of a float's range") from None
    if kind == "string" and type(v) is str:
        if not v.isascii():
            try:        # a lone surrogate, from a JSON escape ("\ud800"), has no UTF-8
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"is not valid UTF-8 (character U+{ord(v[e.start]):04X} "
                                 f"at position {e.start})") from None
        return v
    raise ValueError(f"is not {TYPE_NAMES[kind]}")


def _cell(kind: str, cell: str) -> object:
    """A CSV cell as the value it spells for an attribute of type `kind` (empty: null);
    text that spells no number stays text, for `_typed` to refuse."""
    if cell == "":
        return None
    if kind == "integer" and INTEGER.fullmatch(cell):
        # More than 19 digits is beyond 64 bits: int() of thousands of them (leading
        # zeros too) would fail, so it is given the digits past the zeros only.
        sign = cell[0] if cell[0] in "+-" else ""
        digits = cell[len(sign):].lstrip("0") or "0"
        return int(sign + digits) if len(digits) <= 19 else INT64_MAX + 1
    if kind == "float" and FLOAT.fullmatch(cell):
        return _float(cell)
    return cell


def _json_text(v: object) -> str:
    if isinstance(v, BeyondFloat | BeyondInt | Written):
        return v.text
    text = json.dumps(v, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(v)    # a lone surrogate by its escape, as the input wrote it
    return text


def _columns(names: Iterable[str], n: int, file: str, types: dict[str, str]) -> list[str]:
    """The attributes (or BODY) a CSV header or a JSON object's keys name, matched as ABDL
    matches names; one the file lacks, or one named twice, is refused."""
    columns = [name.strip().upper() for name in names]
    for name, attr in zip(names, columns, strict=True):
        if attr != BODY and attr not in types:
            raise Refused(f"line {n}: {shorten(repr(name))} is not an attribute of {file} "
                          f"({shorten(', '.join([*types, BODY]))})")
    if len(set(columns)) < len(columns):
        twice = next(a for a in columns if columns.count(a) > 1)
        raise Refused(f"line {n}: {twice} is named twice")
    return columns


def _record(n: int, columns: list[str], raws: Iterable[object], types: dict[str, str],
            parse: Callable[[str, Any], object], show: Callable[[Any], str]) -> Record:
    """One record from its values as the input gives them (`parse`d by the attribute's
    type); a value that does not fit is refused, naming its line and attribute."""
    fields: dict[str, Value] = {}
    for attr, raw in zip(columns, raws, strict=True):
        kind = types.get(attr, "string")        # BODY is a string
        try:
            fields[attr] = _typed(kind, parse(kind, raw))
        except ValueError as e:
            raise Refused(f"line {n}, {attr}: {shorten(show(raw))} {e}") from None
    body = fields.pop(BODY, None)
    return [fields.get(a) for a in types], body if isinstance(body, str) else None


def _lines(binary: Iterable[bytes], where: str) -> Iterator[str]:
    """The input's lines as text, their ends kept (csv reads quoted line breaks from
    them); a line that is not UTF-8 is refused, named."""
    for n, raw in enumerate(binary, 1):
        line = utf8(raw, f"line {n} of {where}")
        yield line.removeprefix("\ufeff") if n == 1 else line   # a spreadsheet's BOM


def _csv_rows(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """A strict csv reader's rows, each with the line it starts on (a quoted line break
    spans lines). What it cannot parse is refused naming its line: read leniently, a
    quote left open would take every line after it into one cell."""
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            why = str(e)
            if why == "unexpected end of data":
                raise Refused(f"line {start}: a quoted cell is not closed (the input ends "
                              "inside its quotes)") from None
            if why.startswith("field larger than field limit"):
                raise Refused(f"line {start}: a cell of more than {csv.field_size_limit():,}"
                              " characters (a quoted cell not closed?)") from None
            if why == "',' expected after '\"'":
                why = "text after a quoted cell's closing quote"
            elif why.startswith("new-line character seen in unquoted field"):
                # Lines are split at LF: a file whose lines end in CR alone is one line.
                why = "a carriage return in an unquoted cell: lines ended by CR alone? Use LF"
            raise Refused(f"line {reader.line_num}: not CSV ({shorten(why)})") from None
        yield start, row
        start = reader.line_num + 1


def csv_records(binary: Iterable[bytes], where: str, file: str,
                 types: dict[str, str]) -> Iterator[Record]:
    """The records of a CSV input; its header is checked before this returns, so that a
    column the file lacks is refused before any record is sent."""
    rows = _csv_rows(csv.reader(_lines(binary, where), strict=True))
    header = next((row for row in rows if row[1]), None)    # blank lines skipped
    if header is None:
        raise Refused(f"{where} is empty: CSV starts with a header naming the attributes")
    columns = _columns(header[1], header[0], file, types)

    def records() -> Iterator[Record]:
        for n, row in rows:
            if not row or (len(row) == 1 < len(columns) and not row[0].strip()):
                continue        # a blank line, or one of spaces only
            if len(row) != len(columns):
                raise Refused(f"line {n}: the header names {len(columns)} columns, the line has "
                              f"{len(row)}")
            yield _record(n, columns, row, types, _cell, repr)
    return records()


def _cr_ended(text: str, e: ValueError) -> bool:
    """Whether JSON's error is a second value after a carriage return: lines are split
    at LF, so a file whose lines end in CR alone is one line of many objects."""
    if not isinstance(e, json.JSONDecodeError) or e.msg != "Extra data":
        return False
    before = text[:e.pos]
    return "\r" in before[len(before.rstrip()):]


def json_records(binary: Iterable[bytes], where: str, file: str,
                  types: dict[str, str]) -> Iterator[Record]:
    for n, line in enumerate(_lines(binary, where), 1):
        if not line.strip():
            continue
        text = line.rstrip("\r\n")
        try:
            # Without its line break: an error at its end is at a column of this line.
            obj = json.loads(text, parse_float=_json_float, parse_int=_int,
                             parse_constant=BeyondFloat, object_pairs_hook=_object)
        except _Twice as e:
            raise Refused(f"line {n}: key {shorten(repr(e.key))} appears twice in an "
                          "object") from None
        except RecursionError:
            raise Refused(f"line {n}: not JSON this reader takes (arrays or objects "
                          "nested too deeply)") from None
        except ValueError as e:     # the column, as the line is the input's
            why = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else e
            if _cr_ended(text, e):
                why = f"a second value at column {e.colno} after a carriage return: lines " \
                      "ended by CR alone? Use LF"
            raise Refused(f"line {n}: not JSON ({shorten(str(why))})") from None
        if not isinstance(obj, dict):
            raise Refused(f"line {n}: not a JSON object")
        yield _record(n, _columns(obj, n, file, types), obj.values(), types,
                      lambda _, v: v, _json_text)
