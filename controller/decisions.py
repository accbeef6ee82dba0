"""The controller's commit decisions: durable before any backend is told to commit.

A writing traffic unit that more than one backend may write is two-phase: every
backend that wrote prepares durably and votes; PP's decision to commit is written
here (a small SQLite log in the controller's data directory) before a single Commit
goes down the bus, and the client is acknowledged once it is written. A backend
that comes back with a prepared unit asks (Hello lists it, the coordinator answers
with Resolve): a unit logged here commits, any other aborts (presumed abort), and
an undecided unit still in flight is aborted on the spot so PP cannot commit it
later. A decision is dropped once every backend it names has forgotten the unit
(said so on the bus, or no longer lists it at its Hello). Presumed abort is sound only
for the units of the runs this log began (`EpochLog`, controller/epochs.py).

Decisions that come while the log is being written wait and go together in the
next transaction (group commit); `synchronous` is SQLite's, as on the backends.
Where a commit does not wait for the disk (synchronous OFF, or NORMAL in WAL mode)
a decision is written on the event loop at once, as a hand-off to the log's thread
and back costs several times the write; the checkpoints, which do wait for the
disk, then run in that thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from controller.carried import Carried, Row
from controller.epochs import EpochLog, Key
from mbds import metrics
from mbds.service import TOLD_EVERY

log = logging.getLogger("mbds.controller")

# Decisions written on the event loop between two checkpoints (each writes about four
# pages of WAL): a WAL of under 2 MB. A checkpoint copies each page once however many
# decisions rewrote it, so checkpointing often costs little.
CHECKPOINT_EVERY = 100


class PresumedAborted(Exception):
    """The unit was declared aborted (a backend asked about it) before PP decided."""


class Decisions(EpochLog):
    def __init__(self, path: Path | None, synchronous: str = "NORMAL") -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path) if path is not None else ":memory:",
                                    isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        # What a run before left in the WAL goes into the file first: a WAL that filled
        # the disk must not keep this run from writing its epoch.
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.path = path
        self.inline = synchronous.upper() in ("OFF", "NORMAL", "0", "1")
        if self.inline and path is not None and synchronous.upper() in ("NORMAL", "1"):
            self.conn.execute("PRAGMA wal_autocheckpoint=0")    # see _checkpoint
            self._unchecked: int | None = 0
        else:
            self._unchecked = None
        self._checkpointing: asyncio.Future[None] | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None
        self.synchronous = synchronous
        tables = {name for (name,) in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute("CREATE TABLE IF NOT EXISTS decisions (epoch TEXT NOT NULL, "
                              "seq INTEGER NOT NULL, waiting TEXT NOT NULL, "
                              "PRIMARY KEY (epoch, seq))")
            self._open_epochs(tables)
            # What each backend told it carried out: a data dir older than that is refused.
            self.carried = Carried(self.conn)
            self.conn.execute("COMMIT")
        except BaseException:
            _roll_back(self.conn)
            raise
        self._load_epochs()
        # Committed units, with the backends that have not yet forgotten them.
        self.logged: dict[Key, set[str]] = {
            (e, s): set(json.loads(w)) for e, s, w in
            self.conn.execute("SELECT epoch, seq, waiting FROM decisions")}
        self.deciding: dict[Key, asyncio.Future[None]] = {}
        self.aborted: set[Key] = set()
        self._adds: list[tuple[Key, list[str], asyncio.Future[None]]] = []
        self._drops: set[Key] = set()
        self._wake = asyncio.Event()
        self._io = ThreadPoolExecutor(1, thread_name_prefix="decision-log")
        self._task = asyncio.create_task(self._flush_loop())
        self._told_task = asyncio.create_task(self._told_loop())

    async def commit(self, key: Key, participants: list[str]) -> None:
        """Decide commit: returns once the decision is on disk."""
        if key in self.aborted:
            raise PresumedAborted(f"traffic unit {key[1]} was aborted while a backend "
                                  "was in doubt about it")
        if self.inline:
            self._commit_now(key, participants)
            return
        fut = asyncio.get_running_loop().create_future()
        self.deciding[key] = fut
        self._adds.append((key, participants, fut))
        self._wake.set()
        try:
            await fut
            self.logged[key] = set(participants)
        finally:
            del self.deciding[key]

    def _commit_now(self, key: Key, participants: list[str]) -> None:
        """The decision written before returning, with the drops waiting for it."""
        drops, self._drops = self._drops, set()
        told = self.carried.take()
        try:
            self._write([(key, participants, None)], drops, told)
        except Exception as e:  # the decision is not taken: its unit aborts
            log.error("the decision log failed: %s", e)
            self.carried.put_back(told)
            self._written(failed=True)
            raise
        metrics.child(metrics.COMMIT_GROUP, "").observe(1 + len(drops))
        self.logged[key] = set(participants)
        self._written()

    def _written(self, failed: bool = False) -> None:
        """A transaction written on the event loop: every CHECKPOINT_EVERY, a checkpoint;
        after a failed one too, as a full WAL is what a checkpoint empties."""
        if self._unchecked is not None:
            self._unchecked += 1
            if (failed or self._unchecked >= CHECKPOINT_EVERY) and \
                    self._checkpointing is None:
                self._unchecked = 0
                self._checkpointing = asyncio.get_running_loop().run_in_executor(
                    self._io, self._checkpoint)
                self._checkpointing.add_done_callback(self._checkpointed)

    def _checkpoint(self) -> None:
        """Copy the WAL into the file (and sync both) in the log's thread, on a connection
        of its own, so that the event loop does not wait for the disk while it is copied.
        The WAL then starts again from nothing (TRUNCATE), the write lock held only for
        the frames written meanwhile: the log is written all the time, so a checkpoint
        alone never finds it quiet, and it would grow until the disk is full."""
        if self._checkpoint_conn is None:
            self._checkpoint_conn = sqlite3.connect(str(self.path), check_same_thread=False)
        self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._checkpoint_conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if not done.cancelled() and done.exception() is not None:
            log.warning("checkpointing the decision log failed: %s", done.exception())

    async def outcome(self, key: Key) -> bool:
        """A backend's in-doubt unit: commit (True) only if decided so. Presumed abort:
        ask only about a unit the log `covers`."""
        if key in self.deciding:
            with_error = self.deciding[key]
            await asyncio.wait([with_error])
        if key in self.logged:
            return True
        self.aborted.add(key)      # PP, if it still runs, will find it aborted
        return False

    def finished(self, key: Key) -> None:
        """PP is done with the unit: no decision on it will be taken any more."""
        self.aborted.discard(key)

    def carried_out(self, backend: str, key: Key) -> None:
        """`backend` has committed the unit's writes (in one phase, or `forgotten`)."""
        self.carried.told(backend, key)

    def forgotten(self, key: Key, backend: str) -> None:
        """`backend` has carried out the commit and forgotten the unit."""
        self.carried.told(backend, key)
        self._drop(key, backend)

    def _drop(self, key: Key, backend: str) -> None:
        """`backend` no longer needs the decision on `key`."""
        waiting = self.logged.get(key)
        if waiting is None:
            return
        waiting.discard(backend)
        if not waiting:
            # Dropped from the file with the next decisions written: a stale row costs
            # nothing (backends that no longer list it clear it at their next Hello).
            del self.logged[key]
            self._drops.add(key)

    def settled(self, backend: str, in_doubt: set[Key]) -> None:
        """`backend` said (at its Hello) which units it still keeps prepared: it has
        forgotten every other decision that names it."""
        for key in [k for k, waiting in self.logged.items()
                    if backend in waiting and k not in in_doubt]:
            self._drop(key, backend)        # not told carried out: it may be an older copy

    async def let_go(self, backend: str) -> None:
        """`backend` joins holding no data of the cluster: nothing it told before holds
        (`Carried.forget`), on disk when this returns."""
        if backend not in self.carried.by_backend:
            return
        self.carried.forget(backend)
        forget = "DELETE FROM carried WHERE backend = ?"
        if self.inline:
            self._synced(forget, backend)
        else:
            await asyncio.get_running_loop().run_in_executor(
                self._io, self._synced, forget, backend)

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            adds, self._adds = self._adds, []
            drops, self._drops = self._drops, set()
            if not adds and not self.carried.new:
                self._drops |= drops
                continue
            told = self.carried.take()
            try:
                await loop.run_in_executor(self._io, self._write, adds, drops, told)
                if adds:
                    metrics.child(metrics.COMMIT_GROUP, "").observe(len(adds) + len(drops))
            except Exception as e:  # the decisions are not taken: their units abort
                log.error("the decision log failed: %s", e)
                self.carried.put_back(told)
                for _, _, fut in adds:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for _, _, fut in adds:
                if not fut.done():
                    fut.set_result(None)

    async def _told_loop(self) -> None:
        """What backends told of their commits, written when no decision took it along."""
        while True:
            await asyncio.sleep(TOLD_EVERY)
            if not self.carried.new:
                continue
            if not self.inline:
                self._wake.set()            # `_flush_loop` writes it, in the log's thread
                continue
            told = self.carried.take()
            try:
                self._write([], set(), told)
            except Exception as e:
                log.warning("writing what the backends carried out failed: %s", e)
                self.carried.put_back(told)
                self._written(failed=True)
                continue
            self._written()

    def _write(self, adds: Sequence[tuple[Key, list[str], object]],
               drops: set[Key], told: Sequence[Row] = ()) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            Carried.write(conn, told)
            conn.executemany("INSERT OR REPLACE INTO decisions VALUES (?, ?, ?)",
                             [(k[0], k[1], json.dumps(sorted(p))) for k, p, _ in adds])
            decided = self._record_decided([key for key, _, _ in adds])
            conn.executemany("DELETE FROM decisions WHERE epoch = ? AND seq = ?",
                             list(drops))
            conn.execute("COMMIT")
            self._decided_written(decided)
        except BaseException:
            _roll_back(conn)
            raise

    async def close(self) -> None:
        self._task.cancel()
        self._told_task.cancel()
        self._io.shutdown(wait=True)
        if told := self.carried.take():
            try:
                self._write([], set(), told)
            except Exception as e:
                log.warning("writing what the backends carried out failed: %s", e)
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
        self.conn.close()


def _roll_back(conn: sqlite3.Connection) -> None:
    """Roll back the transaction a failure cut short, if SQLite has not already (it does
    after a full disk, and a ROLLBACK then fails, hiding the failure's own error)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
