"""Conversion between Python values and the wire `Value` (unset oneof = null)."""

from __future__ import annotations

from mbds.proto import mbds_pb2 as pb

Scalar = int | float | str       # a value a record or a request states
Value = Scalar | None             # … or null (a missing keyword)


def to_pb(v: Value, out: pb.Value | None = None) -> pb.Value:
    msg = out if out is not None else pb.Value()
    if v is None:
        return msg
    if isinstance(v, bool):
        raise TypeError("booleans are not ABDL values")
    if isinstance(v, int):
        msg.i = v
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
