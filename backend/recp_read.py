"""RECP — record processing (docs/spec.md §4 step 6): reading this backend's SQLite records.

Runs a read request's plans (`backend/plan.py`: the clusters to visit and the record
condition, `recp_sql.py`) on a connection it is given, one row batch per `next`: on
the event loop, or in the writer thread for a read inside a writing unit. Every
statement is built from validated identifiers only; every ABDL value is a bound
parameter, so no value can change a statement. A request of aggregates reads its
partial groups through `recp_groups.py`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Generator, Iterator
from dataclasses import replace

from backend import recp_sql
from backend.plan import FilePlan, RequestPlan
from backend.recp_groups import aggregate_groups
from backend.store import table
from mbds.proto import mbds_pb2 as pb

# The most rows in one RowBatch this backend sends to PP. gRPC's cost is per message,
# so fewer, larger batches cut the CPU per row here, at PP and at the client.
BATCH_ROWS = 4000
BATCH_BYTES = 1 << 20      # …and about this much JSON: well under gRPC's 4 MiB limit
STEP_ROWS = 100            # rows fetched and encoded per step


def _select_list(plan: FilePlan, attrs: list[str]) -> tuple[str, list[object]]:
    """A record's `attrs` on the plan's file as one JSON array in SQL (cached per file and
    targets): `recp_sql.json_array` of their terms, so a row may have more values than
    SQLite lets one function call have (`RETRIEVE (ALL)` of a file of 256 attributes has
    258)."""
    return recp_sql.cached(plan.schema, ("select", *attrs), lambda: _build_select_list(plan, attrs))


def _build_select_list(plan: FilePlan, attrs: list[str]) -> tuple[str, list[object]]:
    exprs: list[str] = []
    params: list[object] = []
    for a in attrs:
        expr, ps = recp_sql.term(plan, a, encoded=True)
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
    indexed = recp_sql.cached(plan.schema, ("indexes",), lambda: frozenset(plan.schema.indexes))
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
    sql = recp_sql.cached(plan.schema, ("pages", select, scope, cond), lambda: (
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
                rest = recp_sql.cached(plan.schema, ("rest", select, scope, cond), lambda: (
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
