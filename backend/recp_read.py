"""RECP — record processing (docs/spec.md §4 step 6): reading this backend's SQLite records.

Runs a read request's plans (`backend/plan.py`: the clusters to visit and the record
condition, `recp_sql.py`) on a connection it is given, one row batch per `next`: on
the event loop, or in the writer thread for a read inside a writing unit. Every
statement is built from validated identifiers only; every ABDL value is a bound
parameter, so no value can change a statement. Partial aggregates are computed here
(SUM, COUNT, MIN, MAX per group; AVG travels as SUM and COUNT) so only one row per
group crosses the network.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar, cast

from backend import recp_sql
from backend.plan import FilePlan, RequestPlan
from backend.store import as_json, col, table
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema
from mbds.values import LOW_32, to_pb

# The most rows in one RowBatch this backend sends to PP. gRPC's cost is per message,
# so fewer, larger batches cut the CPU per row here, at PP and at the client.
BATCH_ROWS = 4000
BATCH_BYTES = 1 << 20      # …and about this much JSON: well under gRPC's 4 MiB limit
STEP_ROWS = 100            # rows fetched and encoded per step
BATCH_GROUPS = 1000        # partial groups (of a BY) in one message at most

T = TypeVar("T")


# Statement texts of a file by what they depend on (targets, conditions): a two-record
# request spent more Python on building its SQL than SQLite spent running it. Keyed
# by the schema object, which a redefinition replaces; bounded, cleared when full.
_TEXTS: dict[tuple[object, ...], tuple[FileSchema, Any]] = {}
TEXTS_KEPT = 1024


def _cached(schema: FileSchema, key: tuple[object, ...], build: Callable[[], T]) -> T:
    full = (id(schema), *key)
    hit = _TEXTS.get(full)
    if hit is not None and hit[0] is schema:
        return cast(T, hit[1])
    value = build()
    if len(_TEXTS) >= TEXTS_KEPT:
        _TEXTS.clear()
    _TEXTS[full] = (schema, value)
    return value


def _select_list(plan: FilePlan, attrs: list[str]) -> tuple[str, list[object]]:
    """A record's `attrs` on the plan's file as one JSON array in SQL (cached per file and
    targets): `recp_sql.json_array` of their terms, so a row may have more values than
    SQLite lets one function call have (`RETRIEVE (ALL)` of a file of 256 attributes has
    258)."""
    return _cached(plan.schema, ("select", *attrs), lambda: _build_select_list(plan, attrs))


def _term(plan: FilePlan, a: str, encoded: bool = False) -> tuple[str, list[object]]:
    """What a target, aggregate item or BY names, as SQL on the plan's file: FILE is the
    file's name, BODY the record body, an attribute the file lacks is null. (An unknown
    double-quoted name would be a string to SQLite, not a column.)"""
    if a == "FILE":
        return "?", [plan.schema.name]
    if a == "BODY":
        return "_body", []
    attr = plan.schema.by_name.get(a)
    if attr is None:
        return "NULL", []
    return (as_json(attr) if encoded else col(a)), []


def _build_select_list(plan: FilePlan, attrs: list[str]) -> tuple[str, list[object]]:
    exprs: list[str] = []
    params: list[object] = []
    for a in attrs:
        expr, ps = _term(plan, a, encoded=True)
        exprs.append(expr)
        params += ps
    return recp_sql.json_array(exprs), params


def batch_full(count: int, size: int) -> bool:
    """A batch ends at BATCH_ROWS rows or BATCH_BYTES of JSON, whichever comes first,
    so large records or bodies never push a message past gRPC's size limit."""
    return count >= BATCH_ROWS or size >= BATCH_BYTES


class _Batcher:
    """Joins encoded rows (or pages of rows) into RowBatch replies of bounded size."""

    def __init__(self, request_index: int, side: int) -> None:
        self.request_index, self.side = request_index, side
        self.parts: list[str] = []
        self.size = self.count = 0

    def add(self, chunk: str, rows: int) -> pb.BackendReply | None:
        """Adds `rows` rows joined in `chunk`; returns the batch if that filled it."""
        self.parts.append(chunk)
        self.size += len(chunk)
        self.count += rows
        return self.flush() if batch_full(self.count, self.size) else None

    def flush(self) -> pb.BackendReply | None:
        if not self.count:
            return None
        msg = pb.BackendReply(request_index=self.request_index)
        rows = msg.rows             # built in place, not copied from a RowBatch
        rows.rows_json = ("[" + ",".join(self.parts) + "]").encode()
        rows.count, rows.side = self.count, self.side
        self.parts, self.size, self.count = [], 0, 0
        return msg


def read(conn: sqlite3.Connection, request_index: int,
         rp: RequestPlan) -> Generator[pb.BackendReply, None, None]:
    """One read request's replies: its row batches, or its partial groups."""
    attrs = [attr for attr, _ in rp.targets]
    if rp.op == pb.RETRIEVE_COMMON:
        for fp in rp.files:
            yield from retrieve_batches(conn, fp, attrs, request_index, 0)
        for fp in rp.right:
            yield from retrieve_batches(
                conn, fp, [t.attr for t in rp.request.right.targets], request_index, 1)
        return
    items = [(attr, agg) for attr, agg in rp.targets if agg]
    if items:
        for fp in rp.files:
            yield from aggregate_groups(conn, fp, items, rp.request.retrieval.by, request_index)
    else:
        for fp in rp.files:
            yield from retrieve_batches(conn, fp, attrs, request_index)


def retrieve_batches(conn: sqlite3.Connection, plan: FilePlan, attrs: list[str],
                     request_index: int, side: int = 0) -> Iterator[pb.BackendReply]:
    """Matching records' target attributes, as JSON row batches (SQLite works on `next`).

    SQLite encodes each row (`json_array`) in C; Python only joins the rows into
    batches, so no value becomes a Python object on the way from the file to PP.
    """
    if not plan.clusters:
        return
    select, sparams = _select_list(plan, attrs)
    out = _Batcher(request_index, side)
    if _pageable(plan):
        yield from _pages(conn, plan, select, sparams, out)
    else:
        yield from _rows(conn, plan, plan.clusters, select, sparams, out)
    if (last := out.flush()) is not None:
        yield last


def _rows(conn: sqlite3.Connection, plan: FilePlan, clusters: list[int], select: str,
          sparams: list[object], out: _Batcher) -> Iterator[pb.BackendReply]:
    """Rows of `clusters` fetched one by one through the cluster index (a Python string
    per row): for predicates a non-clustered index answers, and for small clusters."""
    where, wparams = recp_sql.where(replace(plan, clusters=clusters))
    yield from _fetched(conn.execute(f"SELECT {select} FROM {table(plan.schema.name)} "
                                     f"WHERE {where}", sparams + wparams), out)


def _fetched(cur: sqlite3.Cursor, out: _Batcher) -> Generator[pb.BackendReply, None, int]:
    """The rows of `cur` (one JSON array each) into batches, fetched a step at a time;
    returns how many there were."""
    step, total = 1, 0   # rows per fetch; adapts to the record size seen so far
    while rows := cur.fetchmany(step):
        total += len(rows)
        chunk = ",".join([r[0] for r in rows])
        step = max(1, min(STEP_ROWS, BATCH_BYTES // 4 // max(1, len(chunk) // len(rows))))
        if len(rows) > 1 and len(chunk) > 2 * BATCH_BYTES:
            # Rows larger than the ones before: a batch each, so no two large bodies
            # share a message.
            for (row,) in rows:
                if (msg := out.add(row, 1)) is not None:
                    yield msg
        elif (msg := out.add(chunk, len(rows))) is not None:
            yield msg
    return total


def _pageable(plan: FilePlan) -> bool:
    """Pages in rowid order: no predicate that SQLite could answer from a non-clustered
    index (it might then sort each page)."""
    indexed = _cached(plan.schema, ("indexes",), lambda: frozenset(plan.schema.indexes))
    return not any(attr in indexed for conj in plan.conjunctions for attr, _, _ in conj)


# A page statement costs Python about what fetching a few dozen rows one by one does:
# once this many clusters have averaged fewer rows than PAGE_MIN_ROWS, the rest of the
# clusters are fetched row by row (a type-C attribute can make one cluster per record).
PAGE_PROBE_CLUSTERS = 16
PAGE_MIN_ROWS = 32


def _pages(conn: sqlite3.Connection, plan: FilePlan, select: str, sparams: list[object],
           out: _Batcher) -> Iterator[pb.BackendReply]:
    """`retrieve_batches` a page at a time: SQLite joins each page of rows itself
    (`group_concat` over the next rows in rowid order), so Python handles one string
    per page instead of one per row. A whole-file scan pages through the table; any
    other request pages through each of its clusters in turn (the cluster index is
    ordered by cluster, then rowid, so a page is a range of it and nothing is sorted).

    A page is sized from the bytes per row seen so far to fill the batch; one that
    comes out over twice the batch's byte bound is read again at half the rows. Past a
    page SQLite cannot make (longer than its longest string) the scope's rows come one
    by one.
    """
    cond, cparams = recp_sql.condition(plan)
    scope = "" if plan.every_cluster else "cluster_id = ? AND "
    sql = _cached(plan.schema, ("pages", select, scope, cond), lambda: (
        f"SELECT group_concat(j), count(*), max(rid) FROM (SELECT rid, "
        f"{select} AS j FROM {table(plan.schema.name)} "
        f"WHERE {scope}rid > ? AND {cond} ORDER BY rid LIMIT ?)"))
    scopes: list[list[object]] = [[]] if plan.every_cluster else [[c] for c in plan.clusters]
    want, row_bytes, rows = 50, 0, 0   # a small first page learns the row size
    for k, scope_params in enumerate(scopes):
        if k >= PAGE_PROBE_CLUSTERS and rows < k * PAGE_MIN_ROWS:
            yield from _rows(conn, plan, plan.clusters[k:], select, sparams, out)
            return
        last = -(1 << 63)                  # below every rowid
        while True:
            want = max(1, min(want, BATCH_ROWS - out.count))
            try:
                chunk, n, top = conn.execute(
                    sql, [*sparams, *scope_params, last, *cparams, want]).fetchone()
            except sqlite3.DataError as e:
                if e.sqlite_errorname != "SQLITE_TOOBIG":
                    raise
                # The page passed SQLite's longest string (SQLITE_MAX_LENGTH): rows far
                # larger than the ones before. The rest of this scope comes row by row.
                rest = _cached(plan.schema, ("rest", select, scope, cond), lambda: (
                    f"SELECT {select} FROM {table(plan.schema.name)} "
                    f"WHERE {scope}rid > ? AND {cond} ORDER BY rid"))
                rows += yield from _fetched(
                    conn.execute(rest, [*sparams, *scope_params, last, *cparams]), out)
                want = 1
                break
            if not n:
                break
            if len(chunk) > 2 * BATCH_BYTES and n > 1:
                want = n // 2      # rows larger than the ones before: read this page again
                continue
            rows += n
            last = top
            row_bytes = max(1, len(chunk) // n)
            if (msg := out.add(chunk, n)) is not None:
                yield msg
            exhausted = n < want   # no more matching rows here
            want = (BATCH_BYTES - out.size) // row_bytes    # the next page fills the batch
            if exhausted:
                break


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
    key, kparams = _term(plan, by) if by else ("NULL", [])
    where, params = recp_sql.where(plan)
    statements: list[tuple[str, list[object]]] = []     # one, unless the items are many
    halved: set[int] = set()         # the items whose SUM comes in two halves
    for k in range(0, len(items), ITEMS_PER_STATEMENT):
        exprs: list[str] = []
        eparams: list[object] = []
        for j, (a, agg) in enumerate(items[k:k + ITEMS_PER_STATEMENT], start=k):
            c, ps = _term(plan, a)
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
        if out.groups.groups and (size + n > BATCH_BYTES
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
