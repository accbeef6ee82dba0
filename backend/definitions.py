"""A definition's traffic unit on this backend: stored, voted on, kept only on commit.

A definition (files, no requests) is all or nothing over the backends, as a write is
(docs/commit.md, "Definitions"): stage 1 applies it to the directory and queues its
storing (tables, indexes, directory rows) in the writer thread, in the same transaction
as its marker and its files' definitions before (`undo.defining`); once stored it is a
prepared unit (`commit.py`), votes `prepared` and waits for PP's decision. On commit the
marker is forgotten before `committed` goes up. On abort — or if storing failed, or the
bus closed — its files are taken back, on disk in one writer job and in the directory,
before the error goes up, so no backend keeps a file the controller did not adopt. A
backend that stops first finds the marker at its next start: the definition is in doubt
until the controller resolves it, as a prepared write is.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from backend import undo
from backend.commit import PreparedUnits
from backend.state import Cancelled, TuState
from backend.store import Store
from backend.writer import Writer
from mbds import faults
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema

log = logging.getLogger("mbds.backend")

Key = tuple[str, int]
Before = dict[str, FileSchema | None]      # each file's schema before (None: it was new)


def defines(tu: pb.TrafficUnit) -> bool:
    """A definition's traffic unit: files and no requests."""
    return not tu.requests and len(tu.directory.files) > 0


@dataclass(eq=False)
class Pending:
    """A definition applied here and not yet decided."""
    key: Key
    before: Before
    update: pb.DirectoryUpdate           # its traffic unit's directory update
    job: Future[None] | None = None      # the writer's job storing it
    unit: int | None = None              # its marker, once that job has run


class Definitions:
    """The definitions this backend has applied and PP has not yet decided."""

    def __init__(self, store: Store, writer: Writer, directory: Directory,
                 prepared: PreparedUnits) -> None:
        self.store, self.writer, self.directory = store, writer, directory
        self.prepared = prepared
        self.pending: dict[Key, Pending] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self.pending

    def begin(self, key: Key, st: TuState, tu: pb.TrafficUnit) -> None:
        """Before the unit's update is applied: remember what its files were."""
        self.pending[key] = Pending(key, {f.name: self.directory.files.get(f.name)
                                          for f in tu.directory.files}, tu.directory)
        st.writing = True      # an abort does not interrupt it: it undoes, then answers

    def store_rows(self, update: pb.DirectoryUpdate, new: pb.DirectoryUpdate
                   ) -> Future[None]:
        """Queue the writer's job storing the new parts `new` of a directory update; a
        definition's own update is marked pending in the same job (`undo.defining`)."""
        p = next((p for p in self.pending.values() if p.update is update and p.job is None),
                 None)

        def job(conn: sqlite3.Connection) -> None:
            if new.files:
                faults.hit("backend.before_define")
            if p is not None:
                p.unit = undo.defining(conn, p.key, [f.name for f in new.files])
            self.store.persist_rows(conn, new)

        fut = self.writer.submit(job)
        if p is not None:
            p.job = fut
        return fut

    async def run(self, key: Key, st: TuState,
                  send: Callable[[TuState, pb.BackendReply], None]) -> None:
        """Stored → vote → PP's decision, carried out: a commit forgets the marker;
        anything else takes the files back and raises (Cancelled for an abort, the
        storing's own error if it failed)."""
        p = self.pending[key]
        stored = committed = False
        try:
            if st.stored is not None:
                await st.stored
            if p.job is not None:
                await asyncio.wrap_future(p.job)
            stored = True
            st.decision = asyncio.get_running_loop().create_future()
            if p.unit is not None:       # listed at Hello: a Resolve may decide it
                self.prepared.waiting[key] = st
            if st.cancelled:
                raise Cancelled(st.cancelled)
            faults.hit("backend.before_define_vote")
            send(st, pb.BackendReply(prepared=True))
            committed = await st.decision
            if not committed:
                raise Cancelled(st.cancelled or "PP decided to abort")
            try:       # decided: kept, and `committed` goes up, whatever fails here
                faults.hit("backend.before_commit")
            except Exception as e:
                log.error("definition %s, before its commit: %s", key, e)
        finally:
            del self.pending[key]
            await self._carry_out(p, stored, committed)
            self.prepared.waiting.pop(key, None)

    async def take_back(self, key: Key) -> None:
        """A definition refused in stage 1: what of it was applied or stored goes."""
        p = self.pending.pop(key)
        stored = True
        if p.job is not None:
            try:
                await asyncio.wrap_future(p.job)
            except Exception:
                stored = False
        await self._carry_out(p, stored, committed=False)

    async def _carry_out(self, p: Pending, stored: bool, committed: bool) -> None:
        if stored and p.unit is not None:      # forgotten, or taken back (disk, directory)
            await self.prepared.carry_out(p.unit, committed)
        elif not committed:
            await self.undo(p.before, stored)

    async def undo(self, before: Before, stored: bool) -> None:
        if stored:             # else the writer rolled the failed storing back itself
            try:
                await asyncio.wrap_future(self.writer.submit(
                    lambda conn: self.store.restore_files(conn, before)))
            except Exception as e:
                log.error("taking back the definition of %s failed: %s", ", ".join(before), e)
        self.directory.restore_files(before)
