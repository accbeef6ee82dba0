"""A directory's descriptors (docs/spec.md §2): a `Descriptor` (an entry of DDIT) and an
`AttrIndex` (an AT row: one directory attribute's descriptors, as a record value and a
predicate find them). The directory that holds them is `mbds/directory.py`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from mbds.proto import mbds_pb2 as pb
from mbds.traffic import COMPARE
from mbds.values import Value, from_pb, to_pb


@dataclass(frozen=True, slots=True)
class Descriptor:
    id: int
    file: str
    attr: str
    kind: str                  # A (range), B (value), C (sub-descriptor of a value), N (none)
    low: Value = None
    high: Value = None
    value: Value = None

    def to_pb(self) -> pb.Descriptor:
        d = pb.Descriptor(id=self.id, file=self.file, attr=self.attr, kind=self.kind)
        to_pb(self.low, d.low)
        to_pb(self.high, d.high)
        to_pb(self.value, d.value)
        return d

    @staticmethod
    def from_pb(d: pb.Descriptor) -> Descriptor:
        return Descriptor(d.id, d.file, d.attr, d.kind, from_pb(d.low), from_pb(d.high),
                          from_pb(d.value))


class AttrIndex:
    """One directory attribute's descriptors: the AT row for (file, attribute)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.none_id: int | None = None
        # Type A, sorted; parallel to range_ids. Any: the ends of one attribute's ranges
        # are all of its one type, so they compare with each other and with its values.
        self.lows: list[Any] = []
        self.highs: list[Any] = []
        self.range_ids: list[int] = []
        self.eq: dict[Value, int] = {}     # type B and C (and FILE)

    def add(self, d: Descriptor) -> None:
        if d.kind == "N":
            self.none_id = d.id
        elif d.kind == "A":
            i = bisect.bisect_left(self.lows, d.low)
            self.lows.insert(i, d.low)
            self.highs.insert(i, d.high)
            self.range_ids.insert(i, d.id)
        else:
            self.eq[d.value] = d.id

    def find(self, value: Value) -> int | None:
        """The descriptor a record value falls in; None when a new type-C value needs one."""
        if value is None:
            return self.none_id
        if self.kind == "A":
            i = bisect.bisect_right(self.lows, value) - 1
            if i >= 0 and value <= self.highs[i]:
                return self.range_ids[i]
            return self.none_id
        hit = self.eq.get(value)
        if hit is not None or self.kind == "C":
            return hit
        return self.none_id

    def search(self, op: str, value: Value) -> set[int]:
        """Descriptor search: every descriptor that may hold a value satisfying `op value`.

        The no-descriptor class is included whenever a value outside every
        descriptor could satisfy the predicate; type C has none for non-null values.
        """
        if op == "=":
            hit = self.find(value)
            return set() if hit is None else {hit}
        test = COMPARE[op]
        found: set[int] = set()
        if self.kind == "A":
            for low, high, did in zip(self.lows, self.highs, self.range_ids, strict=True):
                if op == "!=" or (op in ("<", "<=") and test(low, value)) or (
                        op in (">", ">=") and test(high, value)):
                    found.add(did)
        else:
            found = {did for v, did in self.eq.items() if test(v, value)}
        if self.none_id is not None and self.kind != "C":
            found.add(self.none_id)
        return found
