"""Columnar load batches (`LoadColumns`): a batch of records as one array per attribute.

A bulk load's cost is per value wherever a value is touched in Python. By column, a
value is converted, checked and copied by C loops (protobuf's repeated fields,
`map`, `zip`, SQLite's `executemany`): the client encodes a column of integers as one
`ints` array, REQP and the backend check a column's kind against its attribute's
type once, and only a column with nulls or mixed kinds is handled value by value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice, repeat
from operator import itemgetter
from typing import Any

from mbds.errors import SemanticError, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute
from mbds.service import MESSAGE_BUDGET, too_large
from mbds.values import Value, from_pb, to_pb

TYPED = {int: pb.INTEGERS, float: pb.FLOATS, str: pb.STRINGS}
# The column kinds each attribute type takes as they are (an integer widens to float).
ACCEPTS = {"integer": (pb.INTEGERS,), "float": (pb.INTEGERS, pb.FLOATS),
           "string": (pb.STRINGS, pb.STRING_REFS)}
# A string column goes by dictionary when its distinct values are at most this share.
DICTIONARY_SHARE = 0.5
# A load's batch holds its chunk of records, or fewer when their columns would be more
# bytes than this (records of a few kB: 10,000 of them would not fit in one message).
LOAD_BYTES = 16 << 20


class ColumnError(ValueError):
    """A column's value at `index` (from 0 within the batch) is refused, for `reason`."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index


def _describe(v: Value) -> str:
    kind = type(v).__name__.replace("str", "string").replace("int", "integer")
    return f"{kind} {shorten(repr(v))}"


def _not_utf8(values: Sequence[Value]) -> ColumnError:
    """The first string of `values` that UTF-8 cannot encode (a lone surrogate), which
    protobuf refuses with a UnicodeEncodeError naming no record."""
    for i, v in enumerate(values):
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                return ColumnError(i, f"{_describe(v)} is not valid UTF-8 (character "
                                      f"U+{ord(v[e.start]):04X} at position {e.start})")
    raise AssertionError("no string of the column fails to encode")


def encode(values: Sequence[Value], out: pb.Column) -> None:
    """One attribute's values into `out`: a typed array when they are all of one kind."""
    if values and type(values[0]) in (int, float):
        # Numbers by their types, as 1 == 1.0 == True: a dictionary of them would hide
        # kinds (and cost a hash per value where one pass over their types does).
        kinds = set(map(type, values))
        kind = TYPED[type(values[0])] if len(kinds) == 1 else pb.VALUES
        constant = kind != pb.VALUES and values.count(values[0]) == len(values)
        distinct: dict[Value, None] = {}
    else:
        # Hashes each value once; types from these. One value throughout (the common
        # constant column) is found by comparing, which skips the hashing.
        distinct = ({values[0]: None} if values and values.count(values[0]) == len(values)
                    else dict.fromkeys(values))
        kinds = set(map(type, distinct))
        kind = TYPED.get(next(iter(kinds)), pb.VALUES) if len(kinds) == 1 else pb.VALUES
        constant = kind != pb.VALUES and len(distinct) == 1
    if not values or kinds == {type(None)}:
        out.kind = pb.NULLS
        return
    if constant and len(values) > 1:
        out.kind = pb.CONSTANT          # sent, checked and decoded once for the batch
        try:
            to_pb(values[0], out.values.add())
        except UnicodeEncodeError:
            raise _not_utf8(values[:1]) from None
        return
    if kind == pb.INTEGERS:
        try:
            out.ints.extend(values)     # protobuf's range check: an integer beyond 64 bits
        except ValueError:
            out.ClearField("ints")
            for i, v in enumerate(values):
                try:
                    to_pb(v)
                except SemanticError as e:
                    raise ColumnError(i, str(e)) from None
            raise
    elif kind == pb.FLOATS:
        out.floats.extend(values)
    elif kind == pb.STRINGS:
        try:
            if len(distinct) <= DICTIONARY_SHARE * len(values):
                kind = pb.STRING_REFS
                index = {v: i for i, v in enumerate(distinct)}
                out.strings.extend(distinct)
                out.refs.extend(map(index.__getitem__, values))
            else:
                out.strings.extend(values)
        except UnicodeEncodeError:      # looked for only then: no cost on the common path
            raise _not_utf8(values) from None
    else:
        kind = pb.VALUES
        for i, v in enumerate(values):
            try:
                to_pb(v, out.values.add())
            except (SemanticError, TypeError) as e:
                raise ColumnError(i, str(e)) from None
            except UnicodeEncodeError:
                raise _not_utf8(values) from None     # the first such is this one
    out.kind = kind


def encode_batch(records: Sequence[Sequence[Value]], width: int, first: int,
                 bodies: Sequence[str | None] | None = None) -> pb.LoadColumns:
    """Records (each `width` values) as a columnar batch whose first record is number
    `first` of its load."""
    out = pb.LoadColumns(count=len(records), first=first)
    lengths = set(map(len, records))
    if len(lengths) > 1:
        raise ValueError(f"records of {min(lengths)} to {max(lengths)} values in one batch")
    # One flat list sliced by column: `zip(*records)` would hold an iterator per record
    # at once, enough young objects to set off the garbage collector every batch.
    step = lengths.pop() if records else 0
    flat = list(chain.from_iterable(records))
    columns = [flat[i::step] for i in range(step)]
    for i in range(width):
        encode(columns[i] if columns else (), out.columns.add())
    if bodies is not None:
        encode(bodies, out.bodies)
    return out


def values(col: pb.Column, count: int) -> Iterable[Value]:
    """A checked column's values as they are read (no list of them is built): the
    message's own array for a typed column."""
    if col.kind == pb.INTEGERS:
        return col.ints
    if col.kind == pb.FLOATS:
        return col.floats
    if col.kind == pb.STRINGS:
        return col.strings
    if col.kind == pb.VALUES:
        return map(from_pb, col.values)
    if col.kind == pb.STRING_REFS:
        return map(list(col.strings).__getitem__, col.refs)
    if col.kind == pb.CONSTANT:
        return repeat(from_pb(col.values[0]), count)
    return repeat(None, count)


def load_requests(file: str, attributes: list[str],
                  rows: Iterable[tuple[Sequence[Value], str | None]], chunk: int,
                  refused: list[str]) -> Iterator[pb.LoadRequest]:
    """A load's records as columnar batches of `chunk` (fewer when they would be more
    than LOAD_BYTES), numbered from 1. A record that cannot go (a wrong number of
    values, a value the wire cannot carry, more bytes than a message carries) ends the
    batches before its chunk's first, with its refusal in `refused`: raised inside gRPC's
    request iterator it would come back as UNKNOWN, unnamed."""
    width, first, it = len(attributes), 1, iter(rows)
    for name in (file, *attributes):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as e:
            refused.append(f"name {shorten(repr(name))} is not valid UTF-8 (character "
                           f"U+{ord(name[e.start]):04X} at position {e.start})")
            return
    while part := list(islice(it, chunk)):
        values = list(map(itemgetter(0), part))
        bodies = list(map(itemgetter(1), part))
        if set(map(len, values)) - {width}:
            n, v = next((n, v) for n, v in enumerate(values) if len(v) != width)
            refused.append(f"record {first + n}: {len(v)} values for {width} attributes")
            return
        try:
            fitted = _fitted(values, bodies, width, first)
        except ColumnError as e:      # raised before any of the chunk is sent
            refused.append(f"record {e.index}: {e} (its batch, records {first}-"
                           f"{first + len(part) - 1}, is not loaded)")
            return
        for cols in fitted:
            yield pb.LoadRequest(file=file, attributes=attributes, columns=cols)
        first += len(part)


def _fitted(values: Sequence[Sequence[Value]], bodies: Sequence[str | None], width: int,
            first: int) -> list[pb.LoadColumns]:
    """Records numbered from `first` as batches of at most LOAD_BYTES (one record alone
    may be more, up to what a message carries). Measured once encoded (`ByteSize`, a
    fraction of the encoding's cost); a batch too large is split evenly and each part
    encoded again. Every part is made before any is sent, so that a record no message
    carries refuses its whole chunk, none of it stored. A ColumnError's index is the
    record's number in the load."""
    try:
        cols = encode_batch(values, width, first,
                            bodies if bodies.count(None) < len(bodies) else None)
    except ColumnError as e:
        raise ColumnError(first + e.index, str(e)) from None
    size = cols.ByteSize()
    if size <= LOAD_BYTES or len(values) == 1:
        if size > MESSAGE_BUDGET:
            raise ColumnError(first, too_large("the record", size))
        return [cols]
    del cols        # the parts are encoded again: the whole is not held beside them
    step = -(-len(values) // min(len(values), -(-size // LOAD_BYTES)))
    return [part for i in range(0, len(values), step)
            for part in _fitted(values[i:i + step], bodies[i:i + step], width, first + i)]


def decode(col: pb.Column, count: int) -> list[Value]:
    """The values of a column already checked (`checked`), one per record."""
    if col.kind == pb.INTEGERS:
        return list(col.ints)
    if col.kind == pb.FLOATS:
        return list(col.floats)
    if col.kind == pb.STRINGS:
        return list(col.strings)
    if col.kind == pb.VALUES:
        return [from_pb(v) for v in col.values]
    if col.kind == pb.STRING_REFS:
        return list(map(list(col.strings).__getitem__, col.refs))
    if col.kind == pb.CONSTANT:
        return [from_pb(col.values[0])] * count
    return [None] * count


def per_record(col: pb.Column) -> Sequence[Any]:
    """The column's array of one entry per record, as it is on the wire (a dictionary
    column's references, not its strings); empty for NULLS and CONSTANT."""
    if col.kind in (pb.NULLS, pb.CONSTANT):
        return ()
    return {pb.INTEGERS: col.ints, pb.FLOATS: col.floats, pb.STRINGS: col.strings,
            pb.VALUES: col.values, pb.STRING_REFS: col.refs}[col.kind]


def take(col: pb.Column, entries: Sequence[Any], pick: Callable[[Sequence[Any]], Any],
         out: pb.Column) -> None:
    """Some records of a column into `out`, in the column's own kind: `pick` chooses
    them from `entries`, its `per_record` array (a list, read once for every pick), so
    a split copies each entry as it is, never decoding or re-encoding a value."""
    out.kind = col.kind
    if col.kind == pb.NULLS:
        return
    if col.kind == pb.CONSTANT:
        out.values.extend(col.values)
        return
    picked = pick(entries)
    if col.kind == pb.STRING_REFS:
        out.strings.extend(col.strings)
    per_record(out).extend(picked)   # type: ignore[attr-defined]


def _refuse(attr: Attribute, file: str, value: Value) -> str:
    return f"type mismatch: {file}.{attr.name} is {attr.type}, got {_describe(value)}"


def _one(attr: Attribute, file: str, v: Value) -> str | None:
    """Why one value does not fit its attribute, or None when it does."""
    if v is None:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return f"{v!r} is not a finite number"
    if not attr.accepts(v):
        return _refuse(attr, file, v)
    return None


def check(attr: Attribute, col: pb.Column, count: int, file: str, *,
          refs: bool = True) -> None:
    """Every one of a column's `count` values fits `attr`; else the first misfit is raised.

    A typed column is checked by its kind alone, without reading its values (floats
    are read for their finiteness, and dictionary references for their range unless
    `refs` is False: the reader then finds a bad one as it decodes, `bad_reference`),
    so a check costs next to nothing per value."""
    where = f"{file}.{attr.name}"
    if col.kind == pb.CONSTANT:
        if len(col.values) != 1 or any(map(len, (col.ints, col.floats, col.strings,
                                                  col.refs))):
            raise ColumnError(0, f"{where}: a constant column carries one value, and only it")
        why = _one(attr, file, from_pb(col.values[0]))
        if why is not None:
            raise ColumnError(0, why)
        return
    # The array holding one entry per record, by kind; every other must be empty (a
    # dictionary's distinct `strings` aside).
    arrays = {pb.INTEGERS: col.ints, pb.FLOATS: col.floats, pb.STRINGS: col.strings,
              pb.VALUES: col.values, pb.STRING_REFS: col.refs}
    if col.kind not in (pb.NULLS, *arrays):
        raise ColumnError(0, f"{where}: unknown column kind {col.kind}")
    for kind, array in arrays.items():
        if kind != col.kind and len(array) and not (
                kind == pb.STRINGS and col.kind == pb.STRING_REFS):
            raise ColumnError(0, f"{where}: a column of kind {pb.ColumnKind.Name(col.kind)}"
                                 f" also carries {pb.ColumnKind.Name(kind)} values")
    have = len(arrays[col.kind]) if col.kind in arrays else count
    if have != count:
        raise ColumnError(min(have, count), f"{where}: {have} values for {count} records")
    if refs and col.kind == pb.STRING_REFS and count and max(col.refs) >= len(col.strings):
        i = next(i for i, r in enumerate(col.refs) if r >= len(col.strings))
        raise ColumnError(i, f"{where}: reference {col.refs[i]} beyond the column's "
                             f"{len(col.strings)} distinct values")
    if col.kind == pb.VALUES:
        for i, v in enumerate(decode(col, count)):
            why = _one(attr, file, v)
            if why is not None:
                raise ColumnError(i, why)
    elif col.kind != pb.NULLS and col.kind not in ACCEPTS[attr.type]:
        raise ColumnError(0, _refuse(attr, file, decode(col, count)[0]))
    elif col.kind == pb.FLOATS and not all(map(math.isfinite, col.floats)):
        i = next(i for i, v in enumerate(col.floats) if not math.isfinite(v))
        raise ColumnError(i, f"{col.floats[i]!r} is not a finite number")


def bad_reference(col: pb.Column) -> int | None:
    """The index of the first record whose dictionary reference is out of range."""
    if col.kind != pb.STRING_REFS:
        return None
    return next((i for i, r in enumerate(col.refs) if r >= len(col.strings)), None)
