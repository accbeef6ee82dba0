"""Conversion between Python values and the wire `Value` (unset oneof = null)."""

from __future__ import annotations

from collections.abc import Iterable

from mbds.errors import SemanticError, shorten
from mbds.proto import mbds_pb2 as pb

Scalar = int | float | str       # a value a record or a request states
Value = Scalar | None             # … or null (a missing keyword)

# Integers are what the wire (sint64) and SQLite hold: signed 64-bit.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
LOW_32 = 0xFFFFFFFF      # an integer's low 32 bits (an integer SUM comes in two halves)
INT64_RANGE = f"integers are signed 64-bit, from {INT64_MIN} to {INT64_MAX}"


def describe(v: Value) -> str:
    """A value in an error, with its kind: `string 'many'`, `integer 7`."""
    kind = type(v).__name__.replace('str', 'string').replace('int', 'integer')
    return f"{kind} {shorten(repr(v))}"


def out_of_range(v: int) -> str:
    """The refusal of an integer beyond 64 bits, naming it (shortened) and the range."""
    try:
        shown = shorten(str(v))
    except ValueError:        # more digits than Python converts (sys.get_int_max_str_digits)
        shown = f"of {v.bit_length()} bits"
    return f"integer {shown} is out of range: {INT64_RANGE}"


def to_pb(v: Value, out: pb.Value | None = None) -> pb.Value:
    msg = out if out is not None else pb.Value()
    if v is None:
        return msg
    if isinstance(v, bool):
        raise TypeError("booleans are not ABDL values")
    if isinstance(v, int):
        try:
            msg.i = v
        except ValueError:    # protobuf's own range check: no cost on the common path
            raise SemanticError(out_of_range(v)) from None
    elif isinstance(v, float):
        msg.f = v
    else:
        msg.s = v
    return msg


def from_pb(msg: pb.Value) -> Value:
    kind = msg.WhichOneof("v")
    if kind is None:
        return None
    return getattr(msg, kind)


# Control characters, dropped to count them: JSON writes each as up to six bytes.
_NO_CONTROL = dict.fromkeys(range(32))


def row_json_beyond(values: Iterable[Value], body: str | None, budget: int) -> int:
    """An upper bound of the bytes a record takes as a JSON row (as `RETRIEVE (ALL)`
    returns it), when that may pass `budget`; else 0. JSON writes `"` and `\\` as two
    bytes and other control characters as up to six, so a record that travels in a
    message may not come back in one. Exact counting only for records that could pass
    it (six bytes a character), so a record of ordinary size costs a length each."""
    fields = [*values, body]
    if sum(6 * len(v) + 2 if isinstance(v, str) else 25 for v in fields) <= budget:
        return 0
    n = 0
    for v in fields:
        if isinstance(v, str):
            n += (len(v.encode("utf-8", "surrogatepass")) + 2 + v.count('"') + v.count("\\")
                  + 5 * (len(v) - len(v.translate(_NO_CONTROL))))
        else:
            n += 25                   # a number's digits, or null, and a comma
    return n if n > budget else 0
