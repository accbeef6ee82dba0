"""A definition's traffic unit on this backend: stored, voted on, kept only on commit.

A definition (files, no requests) is all or nothing over the backends, as a write is
(docs/commit.md, "Definitions"): stage 1 applies it to the directory and queues its
storing (tables, indexes, directory rows) in the writer thread; once stored the unit
votes `prepared` and waits for PP's decision. On abort — or if storing failed, or the
bus closed — its files are taken back, on disk in one writer job and in the directory,
before the error goes up, so no backend keeps a file the controller did not adopt.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

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


class Definitions:
    """The definitions this backend has applied and PP has not yet decided."""

    def __init__(self, store: Store, writer: Writer, directory: Directory) -> None:
        self.store, self.writer, self.directory = store, writer, directory
        self.pending: dict[Key, Before] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self.pending

    def begin(self, key: Key, st: TuState, tu: pb.TrafficUnit) -> None:
        """Before the unit's update is applied: remember what its files were."""
        self.pending[key] = {f.name: self.directory.files.get(f.name)
                             for f in tu.directory.files}
        st.writing = True      # an abort does not interrupt it: it undoes, then answers

    def store_rows(self, conn: sqlite3.Connection, new: pb.DirectoryUpdate) -> None:
        """The writer's job storing a directory update (a definition's files among them)."""
        if new.files:
            faults.hit("backend.before_define")
        self.store.persist_rows(conn, new)

    async def run(self, key: Key, st: TuState,
                  send: Callable[[TuState, pb.BackendReply], None]) -> None:
        """Stored → vote → PP's decision; anything but a commit takes the files back
        and raises (Cancelled for an abort, the storing's own error if it failed)."""
        stored = committed = False
        try:
            if st.stored is not None:
                await st.stored
            stored = True
            if st.cancelled:
                raise Cancelled(st.cancelled)
            st.decision = asyncio.get_running_loop().create_future()
            send(st, pb.BackendReply(prepared=True))
            committed = await st.decision
            if not committed:
                raise Cancelled(st.cancelled or "PP decided to abort")
        finally:
            before = self.pending.pop(key)
            if not committed:
                await self.undo(before, stored)

    async def undo(self, before: Before, stored: bool) -> None:
        if stored:             # else the writer rolled the failed storing back itself
            try:
                await asyncio.wrap_future(self.writer.submit(
                    lambda conn: self.store.restore_files(conn, before)))
            except Exception as e:
                log.error("taking back the definition of %s failed: %s", ", ".join(before), e)
        self.directory.restore_files(before)
