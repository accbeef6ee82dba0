"""The controller's commit decisions: durable before any backend is told to commit.

A writing traffic unit that more than one backend may write is two-phase: every
backend that wrote prepares durably and votes; PP's decision to commit is written
here (a small SQLite log in the controller's data directory) before a single Commit
goes down the bus, and the client is acknowledged once it is written. A backend
that comes back with a prepared unit asks (Hello lists it, the coordinator answers
with Resolve): a unit logged here commits, any other aborts (presumed abort), and
an undecided unit still in flight is aborted on the spot so PP cannot commit it
later. A decision is dropped once every backend it names has forgotten the unit
(said so on the bus, or no longer lists it at its Hello).

Presumed abort is sound only for a unit this log would hold had it been committed:
one of an epoch (a controller run's numbering, `Bus.epoch`) this log began. Each
epoch is recorded here, on disk, before any unit of it can be prepared; a unit of an
epoch the log never began (its data directory is new, or another one's) is left in
doubt at its backend, with its locks held, and reported (`outside`), never aborted.

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
from mbds import metrics
from mbds.errors import shorten
from mbds.service import TOLD_EVERY

log = logging.getLogger("mbds.controller")

Key = tuple[str, int]       # (epoch, seq)

# Decisions written on the event loop between two checkpoints (each writes a page or
# two of WAL): about SQLite's own default of 1000 pages.
CHECKPOINT_EVERY = 500

# In the epochs table of a log made before epochs were recorded: the epochs of its
# runs until then, which it cannot list (see Decisions.__init__).
EARLIER_RUNS = "*"


class PresumedAborted(Exception):
    """The unit was declared aborted (a backend asked about it) before PP decided."""


class Decisions:
    def __init__(self, path: Path | None, synchronous: str = "NORMAL") -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path) if path is not None else ":memory:",
                                    isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
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
            if "epochs" not in tables:
                self.conn.execute("CREATE TABLE epochs (epoch TEXT PRIMARY KEY, decided INTEGER)")
                if "decisions" in tables:
                    # A log from before epochs were recorded has presumed abort for the
                    # units of its own runs all along and cannot list those runs: it
                    # covers the epochs its decisions name, and every other one until
                    # its first start has met every backend (which resolves what they
                    # still hold of those runs, as it would have before); refusing them
                    # at once would leave such units in doubt with no log to settle them.
                    self.conn.execute("INSERT OR IGNORE INTO epochs "
                                      "SELECT DISTINCT epoch, NULL FROM decisions")
                    self.conn.execute("INSERT OR IGNORE INTO epochs VALUES (?, NULL)",
                                      (EARLIER_RUNS,))
            elif "decided" not in {c for (_, c, *_) in self.conn.execute(
                    "PRAGMA table_info(epochs)")}:
                # The runs before each run's last decision was recorded: NULL, not known.
                self.conn.execute("ALTER TABLE epochs ADD COLUMN decided INTEGER")
            # What each backend told it carried out: a data dir older than that is refused.
            self.carried = Carried(self.conn)
            self.conn.execute("COMMIT")
        except BaseException:
            _roll_back(self.conn)
            raise
        # The epochs this log began: it holds every commit decided in them. With each,
        # the highest seq it decided to commit (None: not recorded, a log made before).
        self.decided: dict[str, int | None] = dict(
            self.conn.execute("SELECT epoch, decided FROM epochs"))
        self.epochs = set(self.decided)
        # Epochs this log is behind in: a backend carried out a commit of one that the
        # log never decided, so it is an older copy (`heard`), with that backend and seq.
        self.behind: dict[str, tuple[str, int]] = {}
        self._reported: dict[str, frozenset[Key]] = {}   # by `outside`, per backend
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

    def begin(self, epoch: str) -> None:
        """Record `epoch` as this log's, on disk whatever `synchronous` says, before any
        unit of it goes down a bus: from then on the log answers for its units."""
        if epoch not in self.epochs:
            self._synced("INSERT OR IGNORE INTO epochs VALUES (?, 0)", epoch)
            self.epochs.add(epoch)
            self.decided[epoch] = 0

    def _synced(self, sql: str, epoch: str) -> None:
        """A change of the epochs, on disk when it returns (once per run: no decision is
        being written meanwhile)."""
        if self.path is not None:
            self.conn.execute("PRAGMA synchronous=FULL")
        try:
            self.conn.execute(sql, (epoch,))
        finally:
            if self.path is not None:
                self.conn.execute(f"PRAGMA synchronous={self.synchronous}")

    def covers(self, key: Key) -> bool:
        """Whether this log can tell the unit's outcome: it began the unit's epoch, so it
        holds the decision if the unit was committed (and `outcome` may presume abort),
        and no backend has carried out a commit of that epoch it never decided."""
        return (key[0] in self.epochs or EARLIER_RUNS in self.epochs) and \
            key[0] not in self.behind

    def heard(self, backend: str, committed: Sequence[Key]) -> None:
        """`backend` has carried out commits up to these seqs in these epochs (its Hello):
        one past what this log decided in an epoch it began shows the log to be an older
        copy of itself, which must not presume abort in that epoch."""
        for epoch, seq in committed:
            decided = self.decided.get(epoch)
            if decided is not None and seq > decided and \
                    seq > self.behind.get(epoch, ("", 0))[1]:
                self.behind[epoch] = (backend, seq)

    def met_every_backend(self) -> None:
        """The controller's start has resolved every backend's in-doubt units: a log
        from before epochs were recorded now covers only the epochs it lists."""
        if EARLIER_RUNS in self.epochs:
            self._synced("DELETE FROM epochs WHERE epoch = ?", EARLIER_RUNS)
            self.epochs.discard(EARLIER_RUNS)

    def outside(self, backend: str, keys: Sequence[Key]) -> str:
        """Why `backend` stays unavailable: it is in doubt about `keys`, units of epochs
        this log did not begin. Logged the first time it is said."""
        (epoch, seq), more = keys[0], len(keys) - 1
        first = f"epoch {shorten(epoch, 40)}, seq {seq}"
        units = (f"{len(keys)} in-doubt units ({first}, and {more} more)" if more
                 else f"in-doubt unit ({first})")
        where = f" ({shorten(str(self.path), 200)})" if self.path is not None else ""
        if epoch in self.behind:
            other, through = self.behind[epoch]
            why = (f"backend {backend} holds {units} that this controller's decision log"
                   f"{where} cannot tell the outcome of: backend {other} has carried out "
                   f"the commit of seq {through} of that epoch, which this log never "
                   f"decided (it decided up to seq {self.decided[epoch]}), so the log is "
                   "an older copy of itself; start the controller on its latest --data-dir")
        else:
            why = (f"backend {backend} holds {units} that this controller's decision log"
                   f"{where} does not cover (its --data-dir is new or was replaced): "
                   f"{'their outcome is' if more else 'its outcome is'} unknown here; "
                   "start the controller on the --data-dir that made it")
        if self._reported.get(backend) != frozenset(keys):
            self._reported[backend] = frozenset(keys)
            log.error("%s", why)
        return why

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
            raise
        metrics.child(metrics.COMMIT_GROUP, "").observe(1 + len(drops))
        self.logged[key] = set(participants)
        self._written()

    def _written(self) -> None:
        """A transaction written on the event loop: every CHECKPOINT_EVERY, a checkpoint."""
        if self._unchecked is not None:
            self._unchecked += 1
            if self._unchecked >= CHECKPOINT_EVERY and self._checkpointing is None:
                self._unchecked = 0
                self._checkpointing = asyncio.get_running_loop().run_in_executor(
                    self._io, self._checkpoint)
                self._checkpointing.add_done_callback(self._checkpointed)

    def _checkpoint(self) -> None:
        """Copy the WAL into the file (and sync both) in the log's thread, on a connection
        of its own, so that the event loop never waits for the disk."""
        if self._checkpoint_conn is None:
            self._checkpoint_conn = sqlite3.connect(str(self.path), check_same_thread=False)
        self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

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
        if self.inline:
            self._forget_rows(backend)
        else:
            await asyncio.get_running_loop().run_in_executor(
                self._io, self._forget_rows, backend)

    def _forget_rows(self, backend: str) -> None:
        if self.path is not None:
            self.conn.execute("PRAGMA synchronous=FULL")
        try:
            self.conn.execute("DELETE FROM carried WHERE backend = ?", (backend,))
        finally:
            if self.path is not None:
                self.conn.execute(f"PRAGMA synchronous={self.synchronous}")

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
            decided: dict[str, int] = {}
            for (epoch, seq), _, _ in adds:
                decided[epoch] = max(seq, decided.get(epoch, 0))
            conn.executemany("UPDATE epochs SET decided = max(decided, ?) WHERE epoch = ?",
                             [(seq, epoch) for epoch, seq in decided.items()])
            conn.executemany("DELETE FROM decisions WHERE epoch = ? AND seq = ?",
                             list(drops))
            conn.execute("COMMIT")
            for epoch, seq in decided.items():
                if self.decided.get(epoch) is not None:
                    self.decided[epoch] = max(seq, self.decided[epoch] or 0)
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
