"""RECP's side of a backend: running a traffic unit's requests once its lock set is granted.

A read-only traffic unit runs on the event loop, one row batch per step; a writing
one runs in the single writer thread (`writer.py`), where a two-phase unit is
*prepared*: written with its undo log (`undo.py`), to be kept or undone on PP's
decision. The node (node.py) owns the stages before this; `twophase.py` the order
in which writers enter the writer thread, and the decision.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from backend import check, dm, load, recp_read, recp_write, undo
from backend.links import IigClient
from backend.plan import RequestPlan
from backend.state import Cancelled, Timer, TuState
from backend.store import Store
from mbds import faults, metrics
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.values import Value

T = TypeVar("T")
OP_NAMES = {v: k for k, v in pb.Op.items()}


def _records(msg: pb.BackendReply) -> int:
    if msg.HasField("rows"):
        return msg.rows.count
    return sum(g.records for g in msg.groups.groups)


def _full(msg: pb.BackendReply) -> bool:
    """A row batch cut at its size bound: the scan it came from is probably not over."""
    return msg.HasField("rows") and recp_read.batch_full(msg.rows.count, len(msg.rows.rows_json))


class Execution:
    """Runs granted traffic units on this backend's records and sends their replies."""

    def __init__(self, name: str, store: Store, directory: Directory,
                 loop: asyncio.AbstractEventLoop, iig: IigClient, timer: Timer, *,
                 result_timeout: float) -> None:
        self.name = name
        self.store = store
        self.directory = directory
        self.loop = loop
        self.iig = iig
        self._h = timer
        self.result_timeout = result_timeout
        # The writer thread's time, in the request it is running, spent blocked on the
        # event loop (a row batch's credit, IIG's answer for a moved record): not
        # RECP's work, so left out of recp.process. Only the writer thread uses it.
        self._waited = 0.0

    def committed(self, st: TuState) -> None:
        """The unit's writes are committed here: their records count as processed."""
        for op, n in st.written:
            metrics.child(metrics.RECORDS_PROCESSED, op, self.name).inc(n)
        st.written.clear()

    def _recp_request(self, queued: float) -> None:
        if metrics.internal_timing():   # recp.request: the hand-over from DM to RECP
            metrics.observe_handler("RECP", "request", self.name, time.perf_counter() - queued)

    async def _put(self, st: TuState, msg: pb.BackendReply) -> None:
        """Hand one reply to PP; a row batch or a message of groups waits for credit while PP is
        a window behind (bounded memory here and at the controller)."""
        if st.cancelled:
            raise Cancelled(st.cancelled)
        if msg.WhichOneof("body") in ("rows", "groups"):
            if st.credits <= 0:
                metrics.CREDIT_WAITS.labels(self.name).inc()
            while st.credits <= 0:
                st.credit_ready.clear()
                try:
                    async with asyncio.timeout(self.result_timeout):
                        await st.credit_ready.wait()
                except TimeoutError:
                    st.cancelled = "nobody collected the results"
                if st.cancelled:
                    raise Cancelled(st.cancelled)
            st.credits -= 1
        assert st.tu is not None and st.bus is not None
        msg.seq = st.tu.seq
        st.bus.send(msg)

    def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the event loop from the writer thread, and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def _emit(self, st: TuState, msg: pb.BackendReply) -> None:
        """`_put` from the writer thread. A row batch or a message of groups waits for its
        credit; any other reply is only queued (it needs none, and the writer need not
        wait)."""
        if msg.WhichOneof("body") in ("rows", "groups"):
            t = time.perf_counter()
            asyncio.run_coroutine_threadsafe(self._put(st, msg), self.loop).result()
            self._waited += time.perf_counter() - t
            return
        if st.cancelled:
            raise Cancelled(st.cancelled)
        assert st.tu is not None and st.bus is not None
        msg.seq = st.tu.seq
        self.loop.call_soon_threadsafe(st.bus.send, msg)

    def _done(self, i: int, rp: RequestPlan, n: int, t0: float, *,
              count: bool = True) -> pb.BackendReply:
        elapsed = (time.perf_counter() - t0) * 1000
        if count:
            metrics.child(metrics.RECORDS_PROCESSED, OP_NAMES[rp.op], self.name).inc(n)
        # Built in place: a message passed to a constructor is copied into it.
        msg = pb.BackendReply(request_index=i)
        done = msg.done
        done.elapsed_ms = elapsed
        stats = done.stats
        stats.clusters_examined, stats.records_retrieved = rp.clusters_examined, n
        stats.backends.add(backend=self.name, records=n, elapsed_ms=elapsed)
        return msg

    async def run_reads(self, st: TuState, plans: list[RequestPlan], queued: float) -> None:
        """A read-only traffic unit runs on the event loop, one row batch per step.

        Handing small reads to a thread cost more than the reads themselves; a batch
        of rows is a short step, and the loop serves other traffic units in between.
        """
        self._recp_request(queued)
        if st.stored is not None:
            await st.stored     # a new file's table (or index) exists before it is read
        if not plans:       # a definition: nothing to read
            return
        # No BEGIN ... COMMIT around the statements: CC's S locks keep every cluster the
        # unit reads as it is until the unit is done, so each statement's own snapshot
        # shows the rows one transaction would.
        conn = self.store.checkout_reader()
        batches = None
        timing = metrics.TIMING
        try:
            for i, rp in enumerate(plans):
                # recp.process is RECP's own work, the read steps added up: not the wait
                # for credit, nor other units' turns at the awaits in between (handler
                # timers do not nest, and a slow client is not RECP's time).
                t0 = t = time.perf_counter()
                busy, n = 0.0, 0
                try:
                    batches = recp_read.read(conn, i, rp)
                    msg = next(batches, None)
                    while msg is not None:
                        n += _records(msg)
                        more = _full(msg)
                        busy += time.perf_counter() - t
                        await self._put(st, msg)
                        if more:
                            # Probably more to come: two turns of the loop, one to
                            # wake the bus and one for it to start writing this batch
                            # to gRPC, so it is written while the next is read.
                            await asyncio.sleep(0)
                            await asyncio.sleep(0)
                        t = time.perf_counter()
                        # A short batch was probably the last one: no pause, so `done`
                        # and `committed` join it in one bus message (a small answer).
                        msg = next(batches, None)
                        if msg is not None and not more:
                            busy += time.perf_counter() - t
                            await asyncio.sleep(0)      # serve other units in between
                            t = time.perf_counter()
                    busy += time.perf_counter() - t
                finally:
                    if timing.on:
                        metrics.observe_handler("RECP", "process", self.name, busy)
                await self._put(st, self._done(i, rp, n, t0))
        finally:
            if batches is not None:
                batches.close()     # a statement cut short ends before the next user
            self.store.checkin_reader(conn)

    def run_writes(self, st: TuState, plans: list[RequestPlan], queued: float,
                   conn: sqlite3.Connection) -> int | None:
        """A traffic unit that writes, in the writer thread (a savepoint of the writer's
        transaction, `writer.py`). A two-phase unit is prepared: its writes go with their
        undo log and its marker, and the marker's id is returned; None when it wrote
        nothing here (or is one-phase), so there is nothing to decide on this backend."""
        if st.cancelled:
            raise Cancelled(st.cancelled)
        self._recp_request(queued)
        assert st.tu is not None
        log = None if st.tu.one_phase else undo.UndoLog(conn, st.key)
        moved = False
        for i, rp in enumerate(plans):
            if moved:   # an earlier request moved records: search clusters again
                rp = self._on_loop(self._replan(st, i))
            t0 = time.perf_counter()
            self._waited = 0.0
            try:
                if rp.writes:
                    n = self._write(conn, rp, log)
                else:
                    n = 0
                    for msg in recp_read.read(conn, i, rp):
                        n += _records(msg)
                        self._emit(st, msg)
            finally:
                if metrics.TIMING.on:    # RECP's own work: the time less its waits
                    metrics.observe_handler("RECP", "process", self.name,
                                            time.perf_counter() - t0 - self._waited)
            moved = moved or rp.request.moves_records
            if rp.writes:           # counted once the unit commits (`committed`)
                st.written.append((OP_NAMES[rp.op], n))
            self._emit(st, self._done(i, rp, n, t0, count=not rp.writes))
        if st.cancelled:
            raise Cancelled(st.cancelled)
        faults.hit("backend.before_prepare")
        if log is None:                    # one-phase: committed with the writer's group
            undo.carried_out(conn, st.key)
            return None
        if not log.wrote:
            log.drop()
            return None
        return log.unit

    async def _replan(self, st: TuState, i: int) -> RequestPlan:
        """Request `i` planned again after an earlier one of the unit moved records: a
        move may have made descriptors (a new type-C value) and clusters since stage 1,
        so descriptor search is made again too, whole (every backend holds the whole
        directory), for the unit's later requests to find the records where they are."""
        assert st.tu is not None
        found = dm.descriptor_search(self.directory, st.tu, 0, 1)
        return dm.plan_requests(self.directory, st.tu, found)[i]

    def _write(self, conn: sqlite3.Connection, rp: RequestPlan, log: undo.UndoLog | None) -> int:
        req = rp.request
        if req.op == pb.INSERT:
            if req.HasField("columns"):
                return load.insert(conn, self.directory.files[req.file], req.columns, log)
            if not req.records:
                return 0
            return recp_write.insert(conn, self.directory.files[req.file], list(req.records), log)
        if req.op == pb.DELETE:
            return sum(recp_write.delete(conn, fp, log) for fp in rp.files)
        # Records move only in a file where the attribute is a directory attribute: one
        # UPDATE may reach files where it is and files where it is not.
        return sum(recp_write.update_moving(conn, fp, req.modifier,
                                            lambda f, v: self._cluster_of(conn, f, v), log)
                   if req.modifier.attr in fp.schema.directory_attributes
                   else recp_write.update(conn, fp, req.modifier, log) for fp in rp.files)

    def _cluster_of(self, conn: sqlite3.Connection, file: str, values: list[Value]) -> int:
        """The cluster of a moved record; asks IIG when the combination is new here."""
        key = self.directory.descriptor_key(file, values)
        if None not in key:
            cid = self.directory.cluster_ids.get((file, tuple(cast(list[int], key))))
            if cid is not None:
                return cid
        t = time.perf_counter()
        reply = self._on_loop(self._place(file, values))
        self._waited += time.perf_counter() - t
        # Persist the new directory rows in this traffic unit's own transaction.
        self.store.persist_rows(conn, reply.directory)
        return reply.cluster_id

    async def _place(self, file: str, values: list[Value]) -> pb.PlaceReply:
        with self._h("dm.place_moved_record"):
            reply = await self.iig.place(file, values)
        check.directory_update(self.directory, reply.directory)
        self.directory.apply(reply.directory)
        # The cluster IIG names must be the one the record's values describe, or the
        # record would be filed where no search finds it.
        key = self.directory.descriptor_key(file, values)
        if None in key or self.directory.cluster_ids.get(
                (file, tuple(cast(list[int], key)))) != reply.cluster_id:
            raise check.BadMessage(f"IIG placed a moved record of {file} in cluster "
                                   f"{reply.cluster_id}, not the one its values describe")
        return reply
