"""One backend's message flow (docs/spec.md §4): the bus, DM's two stages, CC, and execution.

Stage 1 (in bus order, never waits): apply the traffic unit's directory update
(`directory_updates.py`), lock the type-C attributes it reads, search this backend's share of
descriptors, release, and broadcast the ids to the peers (`exchange.py`).
Stage 2 (in bus order): wait for the peers' ids, run cluster search under
did-group locks, generate addresses, and queue the whole CC lock set. Queuing
in bus order on every backend is what makes CC's outcome serializable.
Execution (concurrent): when its lock set is granted, the unit's requests run
(`execution.py`): a read on the event loop, a write in the single writer thread
(`writer.py`), which writers enter in bus order (`twophase.py`). A two-phase write is
prepared durably and votes; it keeps its locks until PP's decision, however long that
takes, and is then forgotten (commit) or undone (abort). The node sends each unit's
last reply and releases its locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor

from backend import check, dm
from backend.cc import LockTable, S
from backend.commit import PreparedUnits
from backend.definitions import Definitions
from backend.directory_updates import DirectoryUpdates
from backend.exchange import IdExchange, wake
from backend.execution import Execution
from backend.links import IigClient, PeerLinks
from backend.movers import Movers
from backend.plan import RequestPlan
from backend.plancache import PlanCache
from backend.state import BusConfig, BusOut, Cancelled, TuState, handler_timer
from backend.store import Store
from backend.twophase import TwoPhaseWrites
from backend.units import Units
from backend.writer import Writer
from mbds import faults, metrics
from mbds.directory import Directory
from mbds.errors import shorten
from mbds.mailbox import Mailbox
from mbds.proto import mbds_pb2 as pb
from mbds.service import MAX_BACKEND_NAME

log = logging.getLogger("mbds.backend")

class BackendNode:
    """One backend: the bus's messages through DM's stages and CC to the execution."""

    def __init__(self, name: str, store: Store, *, peers: PeerLinks, iig: IigClient,
                 result_timeout: float = 60.0) -> None:
        self.name = name
        self.store = store
        self.directory = Directory()
        self.directory.apply(store.load_directory())
        self.cc = LockTable()
        self.config = BusConfig()
        self.last_seq = 0           # of the bus's epoch: units come in increasing seq
        self.writer = Writer(store, name)
        self.prepared = PreparedUnits(self.writer, self.directory)
        # Reads of traffic units run on the event loop; this thread only counts records
        # per cluster for the controller's Directory call (placement state).
        self.counting = ThreadPoolExecutor(1, thread_name_prefix="cluster-counts")
        self.plans = PlanCache(self.directory, name)
        self.loop = asyncio.get_running_loop()
        self.units = Units(self.loop, result_timeout)
        self.tus = self.units.states
        self.stage2: Mailbox[tuple[tuple[str, int], TuState]] = Mailbox()
        self.movers = Movers()
        self.exchange = IdExchange(peers, result_timeout, self.plans)
        self.iig = iig
        self.definitions = Definitions(store, self.writer, self.directory, self.prepared)
        self.directory_updates = DirectoryUpdates(self.directory, self.definitions, self.cc,
                                                  self._acquire)
        self.result_timeout = result_timeout
        self._h = handler_timer(name)
        self._lock_waits = {kind: metrics.child(metrics.LOCK_WAIT_SECONDS, kind, name)
                            for kind in ("attribute", "directory", "did_group", "cluster")}
        self.execution = Execution(name, store, self.directory, self.loop, iig, self._h,
                                   result_timeout=result_timeout)
        self.twophase = TwoPhaseWrites(name, self.writer, self.prepared, self.execution,
                                       self.loop)
        self._stage2_task = asyncio.create_task(self._stage2_loop())
        self.metrics_port = 0

    async def _acquire(self, kind: str, owner: Hashable,
                       wants: dict[Hashable, str]) -> tuple[Hashable, int]:
        handle = self.cc.request(owner, wants)
        # Nearly every set is granted as it is queued: no wait, not even a coroutine's.
        self._lock_waits[kind].observe(0.0 if self.cc.granted(handle)
                                       else await self.cc.wait(handle))
        return handle

    # ------------------------------------------------------------ directory --
    async def apply_directory(self, update: pb.DirectoryUpdate) -> Future[None] | None:
        """Apply a directory update and queue its storing (`directory_updates.py`)."""
        return await self.directory_updates.apply(update)

    # ------------------------------------------------------------- stage 1 --
    def on_hello(self, hello: pb.BusHello, bus: BusOut) -> None:
        if not 0 <= hello.backend_index < len(hello.peers):
            # No backend would have the missing index: split units would wait for it.
            raise check.BadMessage(f"a bus hello that makes this backend index "
                                   f"{hello.backend_index} of {len(hello.peers)} peers")
        if hello.members and (len(hello.members) != len(hello.peers) or any(
                not 0 < len(name) <= MAX_BACKEND_NAME for name in hello.members)):
            raise check.BadMessage(f"a bus hello naming {len(hello.members)} backends for "
                                   f"{len(hello.peers)} peers, or a name empty or longer "
                                   f"than {MAX_BACKEND_NAME} characters")
        if hello.epoch != bus.epoch:
            raise check.BadMessage(f"a bus hello of epoch {shorten(hello.epoch, 40)} on a "
                                   f"bus opened by epoch {shorten(bus.epoch, 40)}")
        if hello.epoch != self.config.epoch:
            self.last_seq = 0
        self.config = BusConfig(hello.epoch, hello.backend_index, list(hello.peers),
                                hello.iig_address, bus.cluster)
        bus.window = hello.credit_window or bus.window
        metrics.set_internal_timing(hello.internal_timing)
        self.exchange.configure(self.config)
        self.iig.configure(hello.iig_address, bus.cluster)

    async def on_traffic_unit(self, tu: pb.TrafficUnit, bus: BusOut) -> None:
        if tu.seq <= self.last_seq:   # sent again: it must not run twice, nor take over
            bus.send(pb.BackendReply(seq=tu.seq, error=(     # the state of one running
                f"backend {self.name}: refused: traffic unit {tu.seq} after unit "
                f"{self.last_seq}; a unit runs once")))
            return
        self.last_seq = tu.seq
        key = (self.config.epoch, tu.seq)
        st = self.units.state(key, arriving=True)
        st.tu, st.bus, st.credits = tu, bus, bus.window
        # Handler timers do not nest, so a process's handlers add up to its time.
        with self._h("dm.traffic_unit"):
            try:
                carried, defining = self.directory_updates.touches(tu)
                own = (await self.directory_updates.carried(key, st, tu, carried, defining)
                       if carried or defining else None)
                st.shape = self.plans.checked(tu, carried)
            except check.BadMessage as e:
                if key in self.definitions:
                    await self.definitions.take_back(key)
                await self._finish(st, error=f"backend {self.name}: refused: {e}")
                return
            st.stored = self.directory_updates.awaited(own)   # what its reads wait for
            shape = st.shape
        with self._h("cc.attribute_lock"):
            handle = await self._acquire("attribute", key,
                                         {("attr", *a): S for a in shape.attrs})
        try:
            with self._h("dm.attribute_locked"):      # descriptor search, ids to the peers
                st.found = self.plans.search(shape, tu, *self.exchange.share(st, tu))
                st.searched = self.directory.generation
                st.movers_mark = self.movers.mark(shape.files)
                self.exchange.send(st, tu, st.found)
        except Exception as e:   # the unit fails alone; its locks must not outlive it
            log.exception("descriptor search failed for %s", key)
            await self._finish(st, error=f"backend {self.name}: {e}")
            return
        finally:
            with self._h("cc.attribute_release"):
                self.cc.release(handle)
        if self.stage2.idle and self.exchange.gathered(st) and \
                not self.movers.before(shape.files):
            # Nothing is in or waiting for stage 2 and nothing is to be waited for: the
            # unit goes through stage 2 here, in bus order, without a hand-over.
            await self._run_stage2(key, st)
        else:
            self.stage2.put((key, st))

    def on_peer_ids(self, msg: pb.DescriptorIds) -> None:
        st = self.units.for_ids(msg, self.config.epoch, self.last_seq)
        if st is not None:
            with self._h("dm.descriptor_ids"):
                self.exchange.received(st, msg)

    def on_abort(self, seq: int, reason: str) -> None:
        st = self.tus.get((self.config.epoch, seq))
        if st is not None:
            self._cancel(st, reason or "aborted by the controller")

    def _cancel(self, st: TuState, reason: str) -> None:
        st.cancelled = reason
        if st.decision is not None and not st.decision.done():
            st.decision.set_result(False)  # a prepared unit is undone
        st.credit_ready.set()          # a RECP step waiting for credit gives up
        wake(st)                       # so does stage 2 waiting for a peer's ids
        # A unit with the writer is not interrupted: it finishes, then sees `cancelled`.
        if st.task is not None and not st.task.done() and not st.writing:
            st.task.cancel()

    def on_credit(self, seq: int, batches: int) -> None:
        st = self.tus.get((self.config.epoch, seq))
        if st is not None:
            st.credits += batches
            st.credit_ready.set()

    def on_bus_closed(self, bus: BusOut) -> None:
        """The controller went away: nobody will collect these units' results. A unit
        prepared here stays in doubt, locks held, until the controller resolves it."""
        for st in [st for st in self.tus.values() if st.bus is bus and (
                st.decision is None or st.key in self.definitions)]:
            self._cancel(st, "the controller's bus closed")

    def on_commit(self, seq: int) -> None:
        st = self.tus.get((self.config.epoch, seq))
        if st is not None and st.decision is not None and not st.decision.done():
            st.decision.set_result(True)

    # ------------------------------------------------------------- stage 2 --
    async def _stage2_loop(self) -> None:
        while True:
            key, st = await self.stage2.get()
            await self._run_stage2(key, st)

    async def _run_stage2(self, key: tuple[str, int], st: TuState) -> None:
        try:
            await self._stage2(key, st)
        except Cancelled:
            await self._finish(st, error=self._aborted(st))
        except check.BadMessage as e:
            log.warning("traffic unit %s refused: %s", key, e)
            await self._finish(st, error=f"backend {self.name}: refused: {e}")
        except Exception as e:  # report any failure to PP, keep serving
            log.exception("stage 2 failed for %s", key)
            await self._finish(st, error=f"backend {self.name}: {e}")

    async def _stage2(self, key: tuple[str, int], st: TuState) -> None:
        tu = st.tu
        shape = st.shape
        assert tu is not None and shape is not None
        if ends := self.movers.before(shape.files):      # (`movers.py`)
            await asyncio.wait(ends)
        st.found = await self.exchange.gather(st)
        if st.searched != self.directory.generation or \
                st.movers_mark != self.movers.mark(shape.files):     # (-1 never equals)
            # Descriptors made since the search (a mover's new value) are searched too:
            # whole, as every backend holds the whole directory. So are they when a mover
            # of its files ran since: IIG's new descriptors reach the backends out of bus
            # order, and a peer may have searched its share before one reached it, this
            # backend after (its own generation then unchanged, the peer's ids stale).
            st.found = dm.descriptor_search(self.directory, tu, 0, 1)
        if any(r.moves_records for r in tu.requests):
            self.movers.start(key, shape.files)
        with self._h("cc.did_group_lock"):
            handle = await self._acquire("did_group", key, shape.groups)
        with self._h("dm.did_groups_locked"):     # cluster search and address generation
            plans, locks = self.plans.plan(shape, tu, st.found)
        with self._h("cc.did_group_release"):
            self.cc.release(handle)
        with self._h("cc.cluster_lock"):
            lock = self.cc.request(key, locks)    # queued in bus order
        if any(p.writes for p in plans):
            self.twophase.join(key)
        st.task = asyncio.create_task(self._execute(key, st, plans, lock))
        st.task.add_done_callback(lambda task: self._never_ran(task, key, st, lock))

    def _never_ran(self, task: asyncio.Task[None], key: tuple[str, int], st: TuState,
                   lock: tuple[Hashable, int]) -> None:
        """A unit cancelled before its task started: its body, `finally` and all, never
        ran, so its locks, its place among the writers and its answer are seen to here."""
        if not task.cancelled():
            return
        self._release(st, lock)
        if key in self.twophase:
            asyncio.create_task(self.twophase.leave(key))
        self._send(st, pb.BackendReply(error=self._aborted(st)))
        self._forget(st)

    # ----------------------------------------------------------- execution --
    async def _execute(self, key: tuple[str, int], st: TuState, plans: list[RequestPlan],
                       lock: tuple[Hashable, int]) -> None:
        try:
            self._lock_waits["cluster"].observe(await self.cc.wait(lock))
            with self._h("dm.clusters_locked"):
                writes = any(p.writes for p in plans)
            queued = time.perf_counter()
            if key in self.definitions:
                await self.definitions.run(key, st, self._send)
                await self._finish(st, committed=True)     # kept: PP may answer
            elif writes:
                if await self.twophase.run(key, st, plans, queued, send=self._send,
                                           cancel=self._cancel,
                                           release=lambda: self._release(st, lock)):
                    self._send(st, pb.BackendReply(forgotten=True))   # PP's commit carried out
                    self._forget(st)
                else:                      # one-phase, or nothing written here
                    # Durable already: PP is told so whatever fails here, or the client
                    # would take writes that are stored for writes that are not.
                    try:
                        faults.hit("backend.one_phase_committed")
                    except Exception as e:
                        log.error("traffic unit %s, once committed: %s", key, e)
                    await self._finish(st, committed=True)
            else:
                await self.execution.run_reads(st, plans, queued)
                await self._finish(st, committed=True)
        except (Cancelled, asyncio.CancelledError):
            if key in self.twophase:
                await self.twophase.leave(key)
            await self._finish(st, error=self._aborted(st))
        except Exception as e:  # any RECP failure rolls back and is reported
            log.warning("traffic unit %s failed: %s", key, e)
            await self._finish(st, error=f"backend {self.name}: {e}")
        finally:
            self._release(st, lock)

    def _release(self, st: TuState, lock: tuple[Hashable, int]) -> None:
        if not st.released:
            st.released = True
            with self._h("cc.cluster_release"):
                self.cc.release(lock)
            self.movers.end(st.key)

    def _aborted(self, st: TuState) -> str:
        return f"backend {self.name}: traffic unit aborted: {st.cancelled or 'cancelled'}"

    def _send(self, st: TuState, msg: pb.BackendReply) -> None:
        if st.tu is not None and st.bus is not None:
            msg.seq = st.tu.seq
            st.bus.send(msg)

    def _forget(self, st: TuState) -> None:
        self.movers.end(st.key)
        self.units.forget(st)

    async def _finish(self, st: TuState, *, committed: bool = False, error: str = "") -> None:
        """The unit's last message to PP; then it is forgotten here."""
        self._send(st, pb.BackendReply(committed=True) if committed
                   else pb.BackendReply(error=error))
        self._forget(st)
