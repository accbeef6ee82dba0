"""PP — post processing (SPEC §4 step 7): gather every backend's partial results.

Plain retrieves stream straight through: each backend's JSON row batch is
forwarded untouched (never decoded here), and PP reads the next batch only
as the client takes the last, so the controller's memory does not grow with
the response set. Aggregates are finished here (AVG from the partial SUMs
and COUNTs), BY groups merged, and RETRIEVE-COMMON joined (these two keep
their groups / one side in memory).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from controller.links import BackendLink
from controller.reqp import Prepared
from mbds import metrics
from mbds.errors import TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb
from mbds.values import from_pb

BATCH_ROWS = 1000


class BackendFailure(Exception):
    def __init__(self, link: BackendLink, error: Exception) -> None:
        super().__init__(str(error))
        self.link, self.error = link, error


class _Stream:
    """One backend's result stream for one traffic unit."""

    def __init__(self, link: BackendLink, epoch: str, seq: int, timeout: float) -> None:
        self.link, self.timeout = link, timeout
        self.call = link.results(epoch, seq, timeout)
        self.it = self.call.__aiter__()

    async def next(self) -> pb.BackendReply:
        try:
            msg = await self.it.__anext__()
        except StopAsyncIteration:
            raise BackendFailure(self.link, self.link.unavailable(
                "its result stream ended early")) from None
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                detail = f"no answer within the {self.timeout:g} s deadline"
            else:
                detail = e.details() or e.code().name
            raise BackendFailure(self.link, self.link.unavailable(detail)) from None
        if msg.WhichOneof("body") == "error":
            raise BackendFailure(self.link, TrafficUnitAborted(msg.error))
        return msg


class _Aggregates:
    """Merges partial groups: per group and aggregate item, SUM, COUNT, MIN, MAX."""

    def __init__(self, p: Prepared) -> None:
        self.p = p
        self.groups: dict[Any, list[list[Any]]] = {}

    def add(self, g: pb.PartialGroup) -> None:
        acc = self.groups.setdefault(from_pb(g.key), [[None, 0, None, None]
                                                       for _ in self.p.aggregates])
        for j, a in enumerate(acc):
            s, lo, hi = from_pb(g.sums[j]), from_pb(g.mins[j]), from_pb(g.maxs[j])
            if s is not None:
                a[0] = s if a[0] is None else a[0] + s
            a[1] += g.counts[j]
            if lo is not None and (a[2] is None or lo < a[2]):
                a[2] = lo
            if hi is not None and (a[3] is None or hi > a[3]):
                a[3] = hi

    def rows(self) -> list[list[Any]]:
        groups = self.groups or ({} if self.p.by else {None: [[None, 0, None, None]
                                                              for _ in self.p.aggregates]})
        out = []
        for key in sorted(groups, key=lambda k: (k is not None, k)):
            finals = {}
            for (agg, attr), (s, n, lo, hi) in zip(self.p.aggregates, groups[key], strict=True):
                finals[f"{agg}({attr})"] = {"AVG": s / n if n else None, "SUM": s,
                                            "COUNT": n, "MIN": lo, "MAX": hi}[agg]
            out.append([key if c == self.p.by else finals[c] for c in self.p.columns])
        return out


def _join(p: Prepared, left: list[list[Any]], right: list[list[Any]]) -> list[list[Any]]:
    index: dict[Any, list[list[Any]]] = {}
    for row in left:
        if row[-1] is not None:
            index.setdefault(row[-1], []).append(row[:-1])
    return [lrow + r[:-1] for r in right if r[-1] is not None for lrow in index.get(r[-1], [])]


def _batches(request_index: int, rows: list[list[Any]]) -> list[pb.ExecuteReply]:
    return [pb.ExecuteReply(request_index=request_index, rows=pb.RowBatch(
        rows_json=json.dumps(rows[i:i + BATCH_ROWS], separators=(",", ":")).encode(),
        count=len(rows[i:i + BATCH_ROWS]))) for i in range(0, len(rows), BATCH_ROWS)]


WRITE_OPS = ("INSERT", "DELETE", "UPDATE")


async def _expect(s: _Stream, kind: str) -> None:
    msg = await s.next()
    if msg.WhichOneof("body") != kind:
        raise BackendFailure(s.link, TrafficUnitAborted(
            f"backend {s.link.name} sent {msg.WhichOneof('body')} instead of {kind}"))


def _stamp(done: pb.ExecuteReply, op: str, t0: float) -> pb.ExecuteReply:
    """The response time: from the traffic unit's arrival to this acknowledgement."""
    done.done.elapsed_ms = (time.perf_counter() - t0) * 1000
    metrics.REQUEST_SECONDS.labels(op).observe(done.done.elapsed_ms / 1000)
    return done


async def gather(links: list[BackendLink], epoch: str, seq: int, prepared: list[Prepared],
                 timeout: float, insert_clusters: list[int]) -> AsyncIterator[pb.ExecuteReply]:
    """Collect one traffic unit's results from every backend and answer the user."""
    t0 = time.perf_counter()
    writes = any(p.op in WRITE_OPS for p in prepared)
    held: list[pb.ExecuteReply] = []
    streams = [_Stream(link, epoch, seq, timeout) for link in links]
    pending: dict[int, asyncio.Future] = {}
    try:
        for i, p in enumerate(prepared):
            with metrics.handler("PP", "request_count"):
                header = pb.ExecuteReply(request_index=i, header=pb.ReplyHeader(
                    op=p.op, columns=p.columns))
                stats = pb.RequestStats()
            with metrics.handler("PP", "aggregate_ops"):
                aggs = _Aggregates(p) if p.aggregates else None
            yield header
            sides: list[list[list[Any]]] = [[], []]
            pending = {b: asyncio.ensure_future(s.next()) for b, s in enumerate(streams)}
            while pending:
                done, _ = await asyncio.wait(pending.values(),
                                             return_when=asyncio.FIRST_COMPLETED)
                for b in [b for b, f in pending.items() if f in done]:
                    msg = pending.pop(b).result()
                    t_msg = time.perf_counter()
                    kind = msg.WhichOneof("body")
                    if kind == "done":
                        d = msg.done.stats
                        stats.clusters_examined = max(stats.clusters_examined,
                                                      d.clusters_examined)
                        stats.records_retrieved += d.records_retrieved
                        stats.backends.extend(d.backends)
                        continue
                    forward = None
                    if kind == "rows":
                        if p.op == "RETRIEVE_COMMON":
                            sides[msg.rows.side].extend(json.loads(msg.rows.rows_json))
                        else:
                            forward = pb.ExecuteReply(request_index=i, rows=pb.RowBatch(
                                rows_json=msg.rows.rows_json, count=msg.rows.count))
                    elif kind == "group" and aggs is not None:
                        aggs.add(msg.group)
                    if metrics.internal_timing():   # PP's own work, not the client's
                        metrics.HANDLER_SECONDS.labels("PP", "results", "").observe(
                            time.perf_counter() - t_msg)
                    if forward is not None:
                        yield forward
                    pending[b] = asyncio.ensure_future(streams[b].next())
            with metrics.handler("PP", "reply"):
                final: list[pb.ExecuteReply] = []
                if aggs is not None:
                    final = _batches(i, aggs.rows())
                elif p.op == "RETRIEVE_COMMON":
                    final = _batches(i, _join(p, *sides))
            for r in final:
                yield r
            if p.op == "INSERT":
                stats.clusters_examined = insert_clusters[i]
            stats.backends.sort(key=lambda s: s.backend)
            done = pb.ExecuteReply(request_index=i, done=pb.RequestDone(stats=stats))
            if writes:
                held.append(done)     # a write's `done` is its acknowledgement: after commit
            else:
                yield _stamp(done, p.op, t0)
        # A writing traffic unit commits only once every backend has prepared it
        # (written, not committed); then PP decides commit on every bus. It is
        # acknowledged only after every backend has committed.
        if writes:
            for s in streams:
                await _expect(s, "prepared")
            for link in links:
                link.send(pb.BusMessage(commit=pb.Commit(seq=seq)))
        for s in streams:
            await _expect(s, "committed")
        for done in held:
            yield _stamp(done, prepared[done.request_index].op, t0)
    except BackendFailure as f:
        for link in links:
            if link is not f.link and link.up:
                link.send(pb.BusMessage(abort=pb.Abort(seq=seq, reason=str(f.error))))
        raise f.error from None
    finally:
        for fut in pending.values():
            fut.cancel()
        for s in streams:
            s.call.cancel()
