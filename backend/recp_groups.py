"""RECP's partial aggregates (docs/spec.md §4 step 6): SUM, COUNT, MIN and MAX of a read
request's items per BY group, computed by SQLite on this backend's records (AVG travels
as SUM and COUNT), so only one row per group crosses the network; PP joins them
(`controller/aggregates.py`).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

from backend import recp_sql
from backend.plan import FilePlan
from backend.store import table
from mbds.proto import mbds_pb2 as pb
from mbds.values import LOW_32, to_pb

BATCH_GROUPS = 1000        # partial groups (of a BY) in one message at most
GROUP_BATCH_BYTES = 1 << 20   # …and about this many bytes of them, as a row batch's

T = TypeVar("T")


# The most result columns SQLite lets one statement have (SQLITE_MAX_COLUMN, 2000 in a
# stock build): an aggregate item takes four and the group two, so the items of a
# request on a wide file (up to five aggregates of each of 258 names) may need more
# statements than one.
MAX_COLUMNS = 2000
ITEMS_PER_STATEMENT = (MAX_COLUMNS - 2) // 4


def aggregate_groups(conn: sqlite3.Connection, plan: FilePlan, items: list[tuple[str, str]],
                     by: str, request_index: int) -> Iterator[pb.BackendReply]:
    """Partial aggregates of (attribute, aggregate) items, one message per BY group. The
    sum only where SUM or AVG needs it: over an integer attribute, exactly, in two halves
    (SQLite's integer SUM may overflow); over a float one, by TOTAL, which does not."""
    if not plan.clusters:
        return
    key, kparams = recp_sql.term(plan, by) if by else ("NULL", [])
    where, params = recp_sql.where(plan)
    statements: list[tuple[str, list[object]]] = []     # one, unless the items are many
    halved: set[int] = set()         # the items whose SUM comes in two halves
    for k in range(0, len(items), ITEMS_PER_STATEMENT):
        exprs: list[str] = []
        eparams: list[object] = []
        for j, (a, agg) in enumerate(items[k:k + ITEMS_PER_STATEMENT], start=k):
            c, ps = recp_sql.term(plan, a)
            attr = plan.schema.by_name.get(a)
            if agg in ("SUM", "AVG") and attr is not None and attr.type == "integer":
                # SQLite's running SUM overflows on the way to a total that may fit, and
                # TOTAL rounds an AVG's to a double; the sums of the high and low 32 bits
                # do neither, and PP joins them exactly.
                exprs += [f"SUM({c} >> 32)", f"COUNT({c})", f"SUM({c} & {LOW_32})", "NULL"]
                eparams += ps * 3
                halved.add(j)
                continue
            total = {"SUM": f"SUM({c})", "AVG": f"TOTAL({c})"}.get(agg)
            # Only the extreme asked for: a MAX(BODY) of a large body carries it once.
            lo, hi = (f"MIN({c})" if agg == "MIN" else "NULL"), \
                (f"MAX({c})" if agg == "MAX" else "NULL")
            exprs += [total or "NULL", f"COUNT({c})", lo, hi]
            eparams += ps * (1 + bool(total) + (agg in ("MIN", "MAX")))
        statements.append((
            f"SELECT {key}, COUNT(*), {', '.join(exprs)} FROM {table(plan.schema.name)} "
            f"WHERE {where}" + (f" GROUP BY {key}" if by else ""),
            kparams + eparams + params + (kparams if by else [])))
    sums = ", ".join(f"SUM({a})" for a, agg in items if agg == "SUM")
    rows: Iterator[Any]
    if len(statements) == 1:
        rows = _overflow_named(partial(conn.execute, *statements[0]), sums)
    else:
        # Each statement's row of a group joined to the first one's by its key (SQLite's
        # GROUP BY equality is Python's for the values a STRICT column holds); the unit's
        # locks keep the records as they are meanwhile.
        groups: dict[Any, list[Any]] = {}
        for sql, sparams in statements:
            for row in _overflow_named(partial(conn.execute, sql, sparams), sums):
                groups.setdefault(row[0], list(row[:2])).extend(row[2:])
        rows = iter(groups.values())
    out = pb.BackendReply(request_index=request_index)
    size = 0
    for row in rows:
        if row[1] == 0:
            continue         # no records: nothing to contribute
        g = pb.PartialGroup(records=row[1])
        to_pb(row[0], g.key)
        for j in range(len(items)):
            s, n, least, most = row[2 + 4 * j: 6 + 4 * j]
            low = None
            if j in halved:       # (the low half's sum came where a MIN would)
                low, least = least, None
            elif type(s) is float and not math.isfinite(s):
                # The stored values are finite: their sum is not.
                raise OverflowError(f"{items[j][1]}({items[j][0]}): a sum beyond the range "
                                    "of a double")
            to_pb(s, g.sums.add())
            g.counts.append(n)
            to_pb(least, g.mins.add())
            to_pb(most, g.maxs.add())
            if halved:
                to_pb(low, g.sum_lows.add())
        # Groups travel together up to a row batch's bounds; a large one (the MAX of a
        # large body) goes in a message of its own.
        n = g.ByteSize()
        if out.groups.groups and (size + n > GROUP_BATCH_BYTES
                                  or len(out.groups.groups) >= BATCH_GROUPS):
            yield out
            out, size = pb.BackendReply(request_index=request_index), 0
        out.groups.groups.append(g)
        size += n
    if out.groups.groups:
        yield out


def _overflow_named(rows: Callable[[], Iterator[T]], sums: str) -> Iterator[T]:
    """The rows, SQLite's integer overflow (of a SUM) named by the items it sums."""
    try:
        yield from rows()
    except sqlite3.OperationalError as e:
        if "integer overflow" not in str(e):
            raise
        raise OverflowError(f"{sums}: a sum beyond 64-bit integers") from None
