"""What each backend has told this controller it carried out: per epoch (a controller
run), the highest seq of a unit whose writes it committed — a two-phase commit it
reported `forgotten`, or a one-phase unit it answered `committed`.

A backend whose Hello lists less (`HelloReply.carried`) has lost writes it had
acknowledged: its data dir is an older copy of itself (restored from a backup, or its
disk lost what it had reported durable). It is refused, naming what it lacks, rather
than admitted to answer without those writes, or to have a unit it was in doubt about
presumed aborted after the others committed it.

Kept in the decision log's file (table `carried`), written with the next decisions or
within a second (`Decisions`): a lower bound of what each backend holds. A controller
that stopped before writing the latest checks less, and never refuses a backend wrongly.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from mbds.errors import shorten
from mbds.service import COMMITTED_RUNS

Key = tuple[str, int]       # (epoch, seq)
Row = tuple[str, str, int]  # (backend, epoch, seq)

SCHEMA = ("CREATE TABLE IF NOT EXISTS carried (backend TEXT NOT NULL, epoch TEXT NOT NULL, "
          "seq INTEGER NOT NULL, PRIMARY KEY (backend, epoch))")


class Carried:
    def __init__(self, conn: sqlite3.Connection) -> None:
        """Read from the log (inside its opening transaction, after its `epochs` table is
        made): the rows of epochs older than the log's latest COMMITTED_RUNS go, as a
        backend lists no more than those."""
        conn.execute(SCHEMA)
        conn.execute("DELETE FROM carried WHERE epoch NOT IN "
                     "(SELECT epoch FROM epochs ORDER BY rowid DESC LIMIT ?)", (COMMITTED_RUNS,))
        self.by_backend: dict[str, dict[str, int]] = {}
        for backend, epoch, seq in conn.execute(
                "SELECT backend, carried.epoch, seq FROM carried JOIN epochs "
                "ON carried.epoch = epochs.epoch ORDER BY epochs.rowid"):
            self.by_backend.setdefault(backend, {})[epoch] = seq
        self.new: dict[tuple[str, str], int] = {}     # told since the last write

    def told(self, backend: str, key: Key) -> None:
        """`backend` has committed the writes of unit `key`."""
        epoch, seq = key
        kept = self.by_backend.setdefault(backend, {})
        if seq > kept.get(epoch, 0):
            kept[epoch] = seq
            self.new[(backend, epoch)] = seq
            if len(kept) > COMMITTED_RUNS:        # more runs than a backend lists
                del kept[next(iter(kept))]

    def take(self) -> list[Row]:
        """What was told since the last write, to write now (`put_back` if that fails)."""
        rows = [(b, e, s) for (b, e), s in self.new.items()]
        self.new = {}
        return rows

    def put_back(self, rows: list[Row]) -> None:
        for b, e, s in rows:
            self.new[(b, e)] = max(s, self.new.get((b, e), 0))

    @staticmethod
    def write(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
        """Inside the log's transaction."""
        conn.executemany("INSERT INTO carried VALUES (?, ?, ?) ON CONFLICT (backend, epoch) "
                         "DO UPDATE SET seq = max(seq, excluded.seq)", rows)

    def older(self, backend: str, listed: Sequence[Key]) -> str:
        """Why `backend`, listing `listed` at its Hello, is an older copy of itself: "" if
        it lists at least what it told. An epoch it does not list counts as none carried
        out, unless it lists as many as it keeps (that one may be older than them all)."""
        held = dict(listed)
        full = len(held) >= COMMITTED_RUNS
        for epoch, seq in self.by_backend.get(backend, {}).items():
            has = held.get(epoch)
            if has is None and full or (has or 0) >= seq:
                continue
            holds = f"up to seq {has}" if has else "none"
            return (f"its data dir is an older copy of itself: of the traffic units of "
                    f"controller run {shorten(epoch, 40)} it holds the writes of {holds}, "
                    f"but it told this controller it had committed seq {seq}, so writes it "
                    "acknowledged are lost (its data dir was restored from a copy, or its "
                    "disk lost what it had reported durable). Restore every data dir of "
                    "the cluster, the controller's too, from one copy taken while the "
                    "cluster was stopped; or, to go on without its records, remove it from "
                    "\"served\" in the controller's members.json and start it with an "
                    "empty data dir")
        return ""

    def forget(self, backend: str) -> None:
        """`backend` joins holding no data of the cluster (new, or let go from `served`):
        nothing it told before holds any more (`Decisions.let_go` deletes its rows, on
        disk before it is admitted: a row left would refuse it once it holds data)."""
        self.by_backend.pop(backend, None)
        self.new = {k: s for k, s in self.new.items() if k[0] != backend}
