"""The backend's single writer thread, with group commit.

Jobs (a unit's writes, its commit or roll-back, a directory update's rows) run in
the order they were submitted, each in a savepoint of its own; the jobs queued
while one group ran make the next group, and a group is one SQLite transaction:
one commit (one fsync with `--synchronous FULL`) for all of them. A job's future
is resolved only once its group has committed, so nothing is reported done that
is not on disk; a job that fails is rolled back alone.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from backend import undo
from backend.store import Store
from mbds import metrics
from mbds.service import COMMITTED_RUNS

log = logging.getLogger("mbds.backend")

T = TypeVar("T")
Job = tuple[Callable[[sqlite3.Connection], Any], "Future[Any]"]

MAX_GROUP = 256     # jobs in one transaction at most


class Writer:
    """Runs jobs on the store's writer connection, grouped into transactions."""

    def __init__(self, store: Store, name: str = "") -> None:
        self.conn = store.writer()
        self.group_size = metrics.COMMIT_GROUP.labels(name)
        self.conn.executescript(undo.SCHEMA)
        undo.upgrade(self.conn)
        undo.never_reuse_rids(self.conn)
        # Per epoch, the highest seq whose commit was carried out here, of a two-phase
        # unit and of any unit that wrote (`PreparedUnits`).
        self.committed = undo.committed_through(self.conn, COMMITTED_RUNS)
        self.carried = undo.carried_through(self.conn)
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="recp-writer", daemon=True)
        self._thread.start()
        self.groups = 0          # transactions committed (tests count them)

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Run `fn(conn)` in the writer thread; its result once its group has committed."""
        fut: Future[T] = Future()
        self._jobs.put((fn, fut))
        return fut

    def shutdown(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            group = [job]
            stop = False
            while len(group) < MAX_GROUP and not self._jobs.empty():
                nxt = self._jobs.get_nowait()
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
            self._group(group)
            if stop:
                break

    def _group(self, group: list[Job]) -> None:
        conn = self.conn
        done: list[tuple[Future[Any], Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            for _, fut in group:
                fut.set_exception(e)
            return
        for fn, fut in group:
            if not fut.set_running_or_notify_cancel():
                continue
            conn.execute("SAVEPOINT job")
            try:
                result = fn(conn)
            except BaseException as e:
                if conn.in_transaction:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    fut.set_exception(e)
                    continue
                # SQLite rolled the whole transaction back (a full disk, say): the jobs
                # before this one are undone too, and the rest go in a new transaction.
                for earlier, _ in done:
                    earlier.set_exception(e)
                done = []
                fut.set_exception(e)
                conn.execute("BEGIN IMMEDIATE")
                continue
            conn.execute("RELEASE job")
            done.append((fut, result))
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            log.warning("a group of %d writes failed to commit: %s", len(done), e)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for fut, _ in done:
                fut.set_exception(e)
            return
        self.groups += 1
        self.group_size.observe(len(group))
        for fut, result in done:
            fut.set_result(result)
