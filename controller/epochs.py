"""Which units the controller's decision log can answer for: those of the epochs (a
controller run's numbering, `Bus.epoch`) it began.

Presumed abort is sound only for a unit this log would hold had it been committed:
one of an epoch this log began. Each epoch is recorded here, on disk, before any unit
of it can be prepared; a unit of an epoch the log never began (its data directory is
new, or another one's) is left in doubt at its backend, with its locks held, and
reported (`outside`), never aborted. Nor may the log presume abort in an epoch where a
backend has carried out a commit past the last one the log decided (`heard`): the log
is then an older copy of itself.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from mbds.errors import shorten

log = logging.getLogger("mbds.controller")

Key = tuple[str, int]       # (epoch, seq)

# In the epochs table of a log made before epochs were recorded: the epochs of its
# runs until then, which it cannot list (see EpochLog._open_epochs).
EARLIER_RUNS = "*"


class EpochLog:
    """The epochs of the decision log (`Decisions`, which keeps its connection)."""

    conn: sqlite3.Connection
    path: Path | None
    synchronous: str

    def _open_epochs(self, tables: set[str]) -> None:
        """Inside the log's opening transaction: the epochs table, made or brought up to
        date (`tables`: those the file held before it was opened)."""
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

    def _load_epochs(self) -> None:
        # The epochs this log began: it holds every commit decided in them. With each,
        # the highest seq it decided to commit (None: not recorded, a log made before).
        self.decided: dict[str, int | None] = dict(
            self.conn.execute("SELECT epoch, decided FROM epochs"))
        self.epochs = set(self.decided)
        # Epochs this log is behind in: a backend carried out a commit of one that the
        # log never decided, so it is an older copy (`heard`), with that backend and seq.
        self.behind: dict[str, tuple[str, int]] = {}
        self._reported: dict[str, frozenset[Key]] = {}   # by `outside`, per backend

    def begin(self, epoch: str) -> None:
        """Record `epoch` as this log's, on disk whatever `synchronous` says, before any
        unit of it goes down a bus: from then on the log answers for its units."""
        if epoch not in self.epochs:
            self._synced("INSERT OR IGNORE INTO epochs VALUES (?, 0)", epoch)
            self.epochs.add(epoch)
            self.decided[epoch] = 0

    def _synced(self, sql: str, arg: str) -> None:
        """A change of the log that is on disk when it returns, whatever `synchronous`
        says (rare: once per run, or a backend joining empty)."""
        if self.path is not None:
            self.conn.execute("PRAGMA synchronous=FULL")
        try:
            self.conn.execute(sql, (arg,))
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

    def _record_decided(self, keys: Sequence[Key]) -> dict[str, int]:
        """Inside the log's transaction that writes decisions to commit `keys`: each
        epoch's highest decided seq, raised to theirs."""
        decided: dict[str, int] = {}
        for epoch, seq in keys:
            decided[epoch] = max(seq, decided.get(epoch, 0))
        self.conn.executemany("UPDATE epochs SET decided = max(decided, ?) WHERE epoch = ?",
                              [(seq, epoch) for epoch, seq in decided.items()])
        return decided

    def _decided_written(self, decided: dict[str, int]) -> None:
        """The transaction of `_record_decided` is committed."""
        for epoch, seq in decided.items():
            if self.decided.get(epoch) is not None:
                self.decided[epoch] = max(seq, self.decided[epoch] or 0)
