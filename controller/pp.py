"""PP — post processing (docs/spec.md §4 step 7): merge every backend's partial results.

Plain retrieves stream straight through: each backend's JSON row batch is
forwarded untouched (never decoded here), and PP returns a batch's credit
only as the client takes it, so the controller's memory does not grow with
the response set. Aggregates are finished here (`aggregates.py`: AVG from the
partial SUMs and COUNTs, BY groups merged), and RETRIEVE-COMMON joined (these two keep
their groups / both sides in memory; a join's rows are counted before any is
built, refused past `MAX_JOIN_ROWS`, and made a batch at a time, the event loop
turning between batches). Every message to the client is cut by rows and by
bytes (`MESSAGE_BUDGET`). For a write PP decides, through the
unit's inbox: every backend that wrote prepared → the decision is durable →
commit → acknowledge; anything else aborts the unit everywhere.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from controller.aggregates import Aggregates
from controller.inbox import BackendFailure, Inbox, Link
from controller.reqp import Prepared
from mbds import metrics
from mbds.errors import SemanticError, TrafficUnitAborted, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.service import MESSAGE_BUDGET, too_large

REPLY_BATCH_ROWS = 1000  # rows in each batch PP builds itself (aggregates, joins)
REPLY_BATCH_BYTES = 1 << 20   # …and about this much JSON, as a backend's batches
FLUSH_BATCHES = 4        # row batches PP holds before it must pass them to the client
# The most rows a RETRIEVE-COMMON may give: its pairs grow as the product of its sides
# (3,000 records joining 3,000 are 9 million rows), so they are counted from the join's
# index before any is made, and a join beyond this is refused whole.
MAX_JOIN_ROWS = 1_000_000
WRITE_OPS = ("INSERT", "DELETE", "UPDATE")
_JOINABLE = (str, int, float, type(None))    # what JSON gives for a stored value


def _dumps(row: list[Any]) -> str:
    return json.dumps(row, separators=(",", ":"), allow_nan=False)   # strict JSON only


def _joined(left: str, right: str) -> str:
    """Two rows' JSON arrays as one: "[a,b]" and "[c]" give "[a,b,c]"."""
    if left == "[]" or right == "[]":
        return right if left == "[]" else left
    return left[:-1] + "," + right[1:]


class _Join:
    """A RETRIEVE-COMMON's pairs: each side's rows encoded once (their targets, the join
    value left out), each pair's row the two joined as text. `count` is known before any
    row is made; `rows` makes them, right row by right row, in the order of each side."""

    def __init__(self, left: list[list[Any]], right: list[list[Any]]) -> None:
        index: dict[Any, list[str]] = {}
        for row in left:
            if row[-1] is not None:
                index.setdefault(row[-1], []).append(_dumps(row[:-1]))
        self.pairs = [(_dumps(r[:-1]), lefts) for r in right if r[-1] is not None
                      and (lefts := index.get(r[-1])) is not None]
        self.count = sum(len(lefts) for _, lefts in self.pairs)

    def rows(self) -> Iterator[str]:
        for right, lefts in self.pairs:
            for left in lefts:
                yield _joined(left, right)


def _side(p: Prepared, rows: pb.RowBatch) -> list[list[Any]]:
    """A backend's rows of one side of a COMMON, checked: a list of rows as wide as that
    side's targets and the join attribute, the join value last, each a plain value (a
    stored value; the join value is a key of the join's index). Raises ValueError naming
    what does not fit."""
    if rows.side not in (0, 1):
        raise ValueError(f"rows of side {rows.side} of a COMMON")
    width = (p.left_width if rows.side == 0 else len(p.columns) - p.left_width) + 1
    try:
        decoded = json.loads(rows.rows_json)
    except ValueError as e:
        raise ValueError(f"rows of side {rows.side} of a COMMON that are not JSON ({e})"
                         ) from None
    if not isinstance(decoded, list) or not all(
            isinstance(r, list) and len(r) == width
            and all(isinstance(v, _JOINABLE) for v in r) for r in decoded):
        raise ValueError(f"rows of side {rows.side} of a COMMON that are not rows of "
                         f"{width} plain values ending with the join value")
    return decoded


def _refused(link: Link, fault: str) -> BackendFailure:
    return BackendFailure(link, TrafficUnitAborted(
        f"traffic unit aborted: refused a reply from backend {link.name} ({link.address}): "
        f"{fault}"))


def _stats_fault(link: Link, own: Sequence[pb.BackendStats], records: int) -> str:
    """What is wrong with a backend's statistics of one request (`own`, of `records` in
    all; "" if nothing): they reach the client, so they are one entry, of that backend,
    its own count and a time. (Each field is read once: a read costs what a few lines
    of Python do, on every request.)"""
    if len(own) != 1:
        return f"with {len(own)} backends' statistics, not its own alone"
    entry = own[0]
    if (name := entry.backend) != link.name:
        return f"whose statistics name backend {shorten(repr(name))}"
    if (counted := entry.records) != records:
        return f"whose statistics count {counted} records and {records} in all"
    if not 0 <= (ms := entry.elapsed_ms) < math.inf:      # NaN is neither
        return f"whose statistics give a time of {ms} ms"
    return ""


def _encoded_batches(request_index: int, rows: Iterable[str]
                     ) -> Iterator[tuple[pb.ExecuteReply, int]]:
    """Row batches of rows encoded already, each with its bytes: a batch ends at
    REPLY_BATCH_ROWS rows or REPLY_BATCH_BYTES, whichever comes first; a row that no
    message can carry is refused, naming the limit."""
    parts: list[str] = []
    size = 0
    for row in rows:
        if len(row) > MESSAGE_BUDGET:
            raise TrafficUnitAborted(too_large(
                f"a row of request {request_index}'s answer", len(row)))
        if parts and (len(parts) >= REPLY_BATCH_ROWS or size + len(row) > REPLY_BATCH_BYTES):
            yield _batch(request_index, parts)
            parts, size = [], 0
        parts.append(row)
        size += len(row) + 1
    if parts:
        yield _batch(request_index, parts)


def _batch(request_index: int, parts: list[str]) -> tuple[pb.ExecuteReply, int]:
    data = ("[" + ",".join(parts) + "]").encode()
    return pb.ExecuteReply(request_index=request_index, rows=pb.RowBatch(
        rows_json=data, count=len(parts))), len(data)


def _by_backend(s: pb.BackendStats) -> str:
    return s.backend


def _stamp(done: pb.ExecuteReply, op: str, t0: float) -> pb.ExecuteReply:
    """The response time: from the traffic unit's arrival to this acknowledgement."""
    done.done.elapsed_ms = (time.perf_counter() - t0) * 1000
    metrics.child(metrics.REQUEST_SECONDS, op).observe(done.done.elapsed_ms / 1000)
    return done


async def gather(inbox: Inbox, prepared: list[Prepared], insert_clusters: list[int],
                 arrived: float | None = None) -> AsyncIterator[pb.ExecuteReplies]:
    """Collect one traffic unit's results from every backend and answer the user.

    Replies are passed on in `ExecuteReplies` messages: PP holds what it has while
    more is ready at once, and passes it on before it would wait with rows in hand
    (so a large answer streams) or when the traffic unit is finished. Each request's
    response time runs from `arrived` (when its request came), else from now.
    """
    t0 = time.perf_counter() if arrived is None else arrived
    writes = any(p.op in WRITE_OPS for p in prepared)
    held: list[pb.ExecuteReply] = []
    # The next message to the client, its replies built in it rather than copied in: at
    # most FLUSH_BATCHES row batches, and at most MESSAGE_BUDGET bytes of them (a batch
    # holding one large body can be tens of MiB). Once passed on it is the client's, and
    # PP starts another.
    out = pb.ExecuteReplies()
    rows_held = bytes_held = 0
    finished = False
    try:
        for i, p in enumerate(prepared):
            with metrics.handler("PP", "request_count"):
                out.replies.add(request_index=i, header=p.header)
                clusters = records = 0
                per_backend: list[pb.BackendStats] = []
            with metrics.handler("PP", "aggregate_ops"):
                aggs = Aggregates(p) if p.aggregates else None
            sides: list[list[list[Any]]] = [[], []]
            waiting = set(inbox.links)
            while waiting:
                if rows_held and (rows_held >= FLUSH_BATCHES or not inbox.ready(waiting, i)):
                    passed, out = out, pb.ExecuteReplies()
                    yield passed
                    rows_held = bytes_held = 0
                link, msg = await inbox.take(waiting, i)
                t_msg = time.perf_counter()
                kind = msg.WhichOneof("body")
                if kind == "done":
                    d = msg.done.stats
                    own, n = d.backends, d.records_retrieved
                    if fault := _stats_fault(link, own, n):
                        raise _refused(link, f"a done for request {i} {fault}")
                    clusters = max(clusters, d.clusters_examined)
                    records += n
                    per_backend.extend(own)
                    waiting.discard(link)
                    continue
                if kind == "rows":
                    if p.op == "RETRIEVE_COMMON":
                        try:
                            side = _side(p, msg.rows)
                            sides[msg.rows.side].extend(side)
                        except ValueError as e:
                            raise _refused(link, str(e)) from None
                    elif p.op != "RETRIEVE" or aggs is not None:
                        raise _refused(link, f"rows for request {i}, a {p.op}" + (
                            " with aggregates" if aggs is not None else ""))
                    else:
                        data = msg.rows.rows_json
                        if rows_held and bytes_held + len(data) > MESSAGE_BUDGET:
                            passed, out = out, pb.ExecuteReplies()
                            yield passed
                            rows_held = bytes_held = 0
                        r = out.replies.add(request_index=i)
                        r.rows.rows_json, r.rows.count = data, msg.rows.count
                        rows_held += 1
                        bytes_held += len(data)
                elif kind == "groups":
                    if aggs is None:
                        raise _refused(link, f"partial groups for request {i}, which has "
                                             "no aggregates")
                    for g in msg.groups.groups:
                        if fault := aggs.fault(g):
                            raise _refused(link, fault)
                        aggs.add(g)
                inbox.consumed_batch(link)
                if metrics.internal_timing():   # PP's own work, not the client's
                    metrics.observe_handler("PP", "results", "", time.perf_counter() - t_msg)
            with metrics.handler("PP", "reply"):
                final: Iterator[tuple[pb.ExecuteReply, int]] = iter(())
                if aggs is not None:
                    final = _encoded_batches(i, map(_dumps, aggs.rows()))
                elif p.op == "RETRIEVE_COMMON":
                    join = _Join(*sides)
                    sides = [[], []]
                    if join.count > MAX_JOIN_ROWS:
                        raise SemanticError(
                            f"RETRIEVE-COMMON: the join gives {join.count:,} rows, more than "
                            f"{MAX_JOIN_ROWS:,} (MAX_JOIN_ROWS); narrow either side")
                    final = _encoded_batches(i, join.rows())
            # Made a batch at a time, the event loop turning between them (a join of a
            # million rows takes seconds), at most FLUSH_BATCHES and MESSAGE_BUDGET bytes
            # of them a message.
            for k, (batch, size) in enumerate(final):
                if rows_held and (rows_held >= FLUSH_BATCHES
                                  or bytes_held + size > MESSAGE_BUDGET):
                    passed, out = out, pb.ExecuteReplies()
                    yield passed
                    rows_held = bytes_held = 0
                elif k:
                    await asyncio.sleep(0)
                out.replies.append(batch)
                rows_held += 1
                bytes_held += size
            if p.op == "INSERT":
                clusters = insert_clusters[i]
            # Built where it goes, once: a write's `done` is its acknowledgement, held until
            # the unit is committed.
            done = pb.ExecuteReply(request_index=i) if writes else \
                out.replies.add(request_index=i)
            stats = done.done.stats
            stats.SetInParent()
            stats.clusters_examined, stats.records_retrieved = clusters, records
            stats.backends.extend(sorted(per_backend, key=_by_backend))
            if writes:
                held.append(done)
            else:
                _stamp(done, p.op, t0)
        # A write is acknowledged only once it is committed: every backend committed
        # it, or every one that wrote has prepared it and the decision is durable.
        await inbox.settle(writes)
        finished = True
        out.replies.extend(_stamp(done, prepared[done.request_index].op, t0) for done in held)
        if out.replies:
            yield out
    except BackendFailure as f:
        finished = True
        # Every backend, the failing one too: one that missed the deadline may be alive
        # and waiting (e.g. for a silent peer's ids).
        outcome = await inbox.abort_and_wait(str(f.error))
        if writes and outcome:
            # Chained to what the writes came to, for a bulk load to word its batch by.
            raise type(f.error)(f"{f.error}{outcome}") from inbox.one_phase_writes()
        raise f.error from None
    except (SemanticError, TrafficUnitAborted) as e:
        # PP's own refusal (a join past its bound, a value no message carries, a sum
        # past 64 bits): the unit is rolled back everywhere before the client hears it.
        finished = True
        outcome = await inbox.abort_and_wait(str(e))
        if writes and outcome:
            raise type(e)(f"{e}{outcome}") from inbox.one_phase_writes()
        raise
    finally:
        inbox.unregister()
        if not finished:      # the client went away: roll the traffic unit back everywhere
            inbox.abort("PP stopped: the client went away")
