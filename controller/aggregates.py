"""PP's merge of the backends' partial groups (SUM, COUNT, MIN, MAX per group and
aggregate item, AVG from SUM and COUNT): each part checked before it is merged
(`fault`), integer sums joined exactly from their halves, and the totals checked for
their range.
"""

from __future__ import annotations

import math
from typing import Any

from controller.reqp import Prepared
from mbds.errors import TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb
from mbds.values import INT64_MAX, INT64_MIN, LOW_32, describe, from_pb


def _order(v: Any) -> tuple[bool, Any]:
    """A value's place in MIN, MAX and the order of BY groups: numbers before strings, as
    SQLite orders them (files may give one attribute name different types)."""
    return (isinstance(v, str), v)


class Aggregates:
    """Merges partial groups: per group and aggregate item, SUM, COUNT, MIN, MAX."""

    def __init__(self, p: Prepared) -> None:
        self.p = p
        self.groups: dict[Any, list[list[Any]]] = {}
        # Each group's key as shown: of equal keys (1 and 1.0, from files typing the BY
        # attribute differently) the float, whichever backend's part came first.
        self.keys: dict[Any, Any] = {}

    def fault(self, g: pb.PartialGroup) -> str:
        """What makes a backend's partial group unfit to merge ("" if nothing): one sum,
        count, min and max per aggregate item, a sum that is a finite number, no count
        above the group's records, and a key only under BY."""
        n = len(self.p.aggregates)
        if not len(g.sums) == len(g.counts) == len(g.mins) == len(g.maxs) == n:
            return (f"a partial group of {len(g.sums)} sums, {len(g.counts)} counts, "
                    f"{len(g.mins)} mins and {len(g.maxs)} maxs for {n} aggregates")
        if any(c > g.records for c in g.counts):
            return f"a partial group counting more than its {g.records} records"
        for v in g.sums:
            kind = v.WhichOneof("v")
            if kind == "s" or (kind == "f" and not math.isfinite(v.f)):
                return f"a partial group whose sum is {describe(from_pb(v))}"
        if g.sum_lows:
            if len(g.sum_lows) != n:
                return f"a partial group of {len(g.sum_lows)} low sums for {n} aggregates"
            for high, low, count in zip(g.sums, g.sum_lows, g.counts, strict=True):
                kind = low.WhichOneof("v")
                if kind is None:
                    continue
                if kind != "i" or high.WhichOneof("v") != "i" or \
                        not 0 <= low.i <= count * LOW_32:
                    return (f"a partial group whose low sum is {_shown(low)} beside a sum "
                            f"of {_shown(high)} over {count} values")
        if not self.p.by and g.HasField("key") and g.key.WhichOneof("v") is not None:
            return "a partial group with a BY key for a request without BY"
        return ""

    def add(self, g: pb.PartialGroup) -> None:
        key = from_pb(g.key)
        if type(key) is float:
            self.keys[key] = key
        acc = self.groups.setdefault(key, [[None, 0, None, None] for _ in self.p.aggregates])
        lows = g.sum_lows
        for j, a in enumerate(acc):
            s, lo, hi = from_pb(g.sums[j]), from_pb(g.mins[j]), from_pb(g.maxs[j])
            if lows and lows[j].WhichOneof("v") is not None:
                s = (g.sums[j].i << 32) + lows[j].i     # exact: only the total must fit
            if s is not None:
                a[0] = s if a[0] is None else a[0] + s
            a[1] += g.counts[j]
            if lo is not None and (a[2] is None or _before(lo, a[2])):
                a[2] = lo
            if hi is not None and (a[3] is None or _before(a[3], hi)):
                a[3] = hi

    def rows(self) -> list[list[Any]]:
        groups = self.groups or ({} if self.p.by else {None: [[None, 0, None, None]
                                                              for _ in self.p.aggregates]})
        out = []
        for key in sorted(groups, key=lambda k: (k is not None, _order(k))):
            finals = {}
            for (agg, attr), (s, n, lo, hi) in zip(self.p.aggregates, groups[key], strict=True):
                if agg == "SUM" and type(s) is int and not INT64_MIN <= s <= INT64_MAX:
                    raise TrafficUnitAborted(f"SUM({attr}): a sum beyond 64-bit integers")
                if agg in ("SUM", "AVG") and type(s) is float and not math.isfinite(s):
                    # Each backend's part fits a double, their total not.
                    raise TrafficUnitAborted(
                        f"{agg}({attr}): a sum beyond the range of a double")
                # An integer sum is exact, and int / int is correctly rounded: the same
                # AVG however the records are spread over the backends.
                finals[f"{agg}({attr})"] = (s / n if n else None) if agg == "AVG" else \
                    {"SUM": s, "COUNT": n, "MIN": lo, "MAX": hi}[agg]
            shown = self.keys.get(key, key)
            out.append([shown if c == self.p.by else finals[c] for c in self.p.columns])
        return out


def _before(x: Any, y: Any) -> bool:
    """Whether MIN takes x over y (and MAX y over x): of equal numbers, the integer comes
    first, so both show the same whichever backend's part came first."""
    ox, oy = _order(x), _order(y)
    return ox < oy or (ox == oy and type(x) is int and type(y) is float)


def _shown(v: pb.Value) -> str:
    return "null" if v.WhichOneof("v") is None else describe(from_pb(v))
