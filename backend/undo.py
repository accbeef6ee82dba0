"""A prepared traffic unit's durable state: its marker and its undo log.

A two-phase unit's writes are committed to SQLite when it is prepared, together with
a marker (`prepared`) and, in the same transaction, what undoes each write (`undo`):
the rowid range of each INSERT and the whole old row of each record an UPDATE or
DELETE touches. After a crash the backend can therefore still do either: commit is
forgetting the marker and its undo rows, roll back is applying the undo rows in
reverse order. CC keeps other units off the unit's clusters until the decision.

A definition is prepared the same way: the transaction that stores its files inserts
its marker and, for each file, its definition before (`defined`; none: the file is
new). Commit forgets them; roll back takes the files back (a new file's table and
directory rows dropped, a re-indexed file's old definition and indexes restored).
"""

from __future__ import annotations

import json
import sqlite3
from itertools import groupby

from backend.recp_sql import json_array
from backend.store import ROWID, Store, as_json, col, file_def, table, transaction
from mbds.directory import file_schema_from_pb
from mbds.schema import FileSchema

SCHEMA = """
    CREATE TABLE IF NOT EXISTS prepared (
        id INTEGER PRIMARY KEY, epoch TEXT NOT NULL, seq INTEGER NOT NULL,
        UNIQUE (epoch, seq));
    CREATE TABLE IF NOT EXISTS undo (
        id INTEGER PRIMARY KEY, unit INTEGER NOT NULL, file TEXT NOT NULL,
        lo INTEGER, hi INTEGER, image TEXT);
    CREATE INDEX IF NOT EXISTS undo_unit ON undo (unit, id);
    CREATE TABLE IF NOT EXISTS defined (
        unit INTEGER NOT NULL, file TEXT NOT NULL, was TEXT, PRIMARY KEY (unit, file));
    CREATE TABLE IF NOT EXISTS committed (
        epoch TEXT PRIMARY KEY, seq INTEGER NOT NULL, carried INTEGER NOT NULL DEFAULT 0);
"""


def upgrade(conn: sqlite3.Connection) -> None:
    """A file made before `committed` kept the one-phase units' seqs gets the column
    (writer's connection, at start, after SCHEMA)."""
    if "carried" not in {c for (_, c, *_) in conn.execute("PRAGMA table_info(committed)")}:
        conn.execute("ALTER TABLE committed ADD COLUMN carried INTEGER NOT NULL DEFAULT 0")

Key = tuple[str, int]      # (epoch, seq): a traffic unit of one controller's bus


def _columns(schema: FileSchema) -> list[str]:
    return ["cluster_id", *(col(a.name) for a in schema.attributes), "_body"]


class UndoLog:
    """What undoes one unit's writes, recorded inside the transaction that makes them."""

    def __init__(self, conn: sqlite3.Connection, key: Key) -> None:
        self.conn = conn
        cur = conn.execute("INSERT INTO prepared (epoch, seq) VALUES (?, ?)", key)
        assert cur.lastrowid is not None
        self.unit: int = cur.lastrowid
        self.wrote = False

    def rows(self, schema: FileSchema, where: str, params: list[object]) -> None:
        """Before an UPDATE or DELETE: the old rows it will touch, whole."""
        image = json_array(["cluster_id", *map(as_json, schema.attributes), "_body"])
        n = self.conn.execute(
            f"INSERT INTO undo (unit, file, lo, image) SELECT ?, ?, rid, {image} "
            f"FROM {table(schema.name)} WHERE {where}", [self.unit, schema.name, *params]
        ).rowcount
        self.wrote = self.wrote or n > 0

    def last_rid(self, schema: FileSchema) -> int:
        """Before an INSERT: rows it adds get rowids above this, the largest the table
        has ever given (AUTOINCREMENT's), not only the largest it holds now."""
        return last_rid(self.conn, schema.name)

    def inserted(self, schema: FileSchema, before: int) -> None:
        """After an INSERT: its rows are exactly the rowids above `before`."""
        hi = self.last_rid(schema)
        if hi > before:
            self.conn.execute("INSERT INTO undo (unit, file, lo, hi) VALUES (?, ?, ?, ?)",
                              (self.unit, schema.name, before + 1, hi))
            self.wrote = True

    def drop(self) -> None:
        """The unit wrote nothing here: no prepared state to keep."""
        forget(self.conn, self.unit)


def last_rid(conn: sqlite3.Connection, file: str) -> int:
    """The largest rowid `file`'s table has given (0: none yet), as AUTOINCREMENT keeps it."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?",
                       (f"r_{file}",)).fetchone()
    return int(row[0]) if row else 0


def never_reuse_rids(conn: sqlite3.Connection) -> None:
    """Rebuild, once, each file table made before its rowids were AUTOINCREMENT, with
    its rows, rowids and indexes, and its sequence above every rowid an undecided
    unit's undo rows name (writer's connection, at start)."""
    old = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                       "AND name LIKE 'r\\_%' ESCAPE '\\' "
                       "AND sql NOT LIKE '%AUTOINCREMENT%'").fetchall()
    for name, sql in old:
        file = name[2:]
        new_sql = sql.replace("rid INTEGER PRIMARY KEY,", f"rid {ROWID},", 1)
        if new_sql == sql:
            raise RuntimeError(f"file table {name} has no rowid column to rebuild: {sql}")
        indexes = [s for (s,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
            "AND sql IS NOT NULL", (name,))]
        with transaction(conn):
            conn.execute(f'ALTER TABLE {table(file)} RENAME TO "{name}_old_rids"')
            conn.execute(new_sql)
            conn.execute(f'INSERT INTO {table(file)} SELECT * FROM "{name}_old_rids"')
            conn.execute(f'DROP TABLE "{name}_old_rids"')
            for index in indexes:
                conn.execute(index)
            row = conn.execute("SELECT max(max(coalesce(lo, 0)), max(coalesce(hi, 0))) "
                               "FROM undo WHERE file = ?", (file,)).fetchone()
            floor = max(int(row[0] or 0), last_rid(conn, file))
            conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
            conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)",
                         (name, floor))


def defining(conn: sqlite3.Connection, key: Key, files: list[str]) -> int:
    """Before a definition's files are stored, in the same transaction: its marker and
    each file's stored definition (none if it is new). Returns the marker."""
    cur = conn.execute("INSERT INTO prepared (epoch, seq) VALUES (?, ?)", key)
    assert cur.lastrowid is not None
    conn.executemany("INSERT INTO defined (unit, file, was) "
                     "SELECT ?, ?, (SELECT def FROM files WHERE name = ?)",
                     [(cur.lastrowid, f, f) for f in files])
    return cur.lastrowid


def commit(conn: sqlite3.Connection, unit: int) -> Key | None:
    """Commit of a prepared unit: `forget` it, and keep its seq if it is the highest of
    its epoch committed here, which tells a decision log restored from an older copy
    (`committed_through`). Returns the unit's (epoch, seq); None if it was forgotten
    already (a commit carried out twice changes nothing)."""
    row = conn.execute("SELECT epoch, seq FROM prepared WHERE id = ?", (unit,)).fetchone()
    if row is None:
        return None
    conn.execute("INSERT INTO committed (epoch, seq, carried) VALUES (?, ?, ?) "
                 "ON CONFLICT (epoch) DO UPDATE SET seq = max(seq, excluded.seq), "
                 "carried = max(carried, excluded.carried)", (*row, row[1]))
    forget(conn, unit)
    return row[0], row[1]


def carried_out(conn: sqlite3.Connection, key: Key) -> None:
    """A one-phase unit's writes, in their own transaction: keep its seq if it is the
    highest of its epoch carried out here, which tells a data dir restored from an older
    copy of itself (`carried_through`)."""
    conn.execute("INSERT INTO committed (epoch, seq, carried) VALUES (?, 0, ?) "
                 "ON CONFLICT (epoch) DO UPDATE SET carried = max(carried, excluded.carried)",
                 key)


def committed_through(conn: sqlite3.Connection, runs: int) -> dict[str, int]:
    """The highest seq of a two-phase unit committed here in each of the latest `runs`
    epochs; older ones are dropped (writer's connection, at start)."""
    with transaction(conn):
        conn.execute("DELETE FROM committed WHERE rowid NOT IN "
                     "(SELECT rowid FROM committed ORDER BY rowid DESC LIMIT ?)", (runs,))
    return dict(conn.execute("SELECT epoch, seq FROM committed WHERE seq > 0 ORDER BY rowid"))


def carried_through(conn: sqlite3.Connection) -> dict[str, int]:
    """The highest seq of a unit whose writes were committed here, in two phases or in
    one, in each epoch `committed_through` kept."""
    return dict(conn.execute("SELECT epoch, max(seq, carried) FROM committed ORDER BY rowid"))


def forget(conn: sqlite3.Connection, unit: int) -> None:
    """A prepared unit done with: its writes (or files) stay, its undo rows and marker go."""
    conn.execute("DELETE FROM undo WHERE unit = ?", (unit,))
    conn.execute("DELETE FROM defined WHERE unit = ?", (unit,))
    conn.execute("DELETE FROM prepared WHERE id = ?", (unit,))


def roll_back(conn: sqlite3.Connection, unit: int,
              files: dict[str, FileSchema]) -> dict[str, FileSchema | None]:
    """Roll back a prepared unit: each write undone, newest first, or a definition's
    files taken back; then forgotten. Returns the files a definition had before (None:
    new), for the directory to take back too; empty for a write."""
    before = {file: None if was is None else file_schema_from_pb(file_def(was))
              for file, was in conn.execute("SELECT file, was FROM defined WHERE unit = ?",
                                            (unit,))}
    undo = conn.execute("SELECT file, lo, hi, image FROM undo WHERE unit = ? ORDER BY id DESC",
                        (unit,)).fetchall()
    # Newest first; a run of one file's entries of one kind is one executemany, in order
    # (of two old images of a row, the older is put back last). The images are decoded
    # here: SQLite's json_extract would cut a string at a NUL.
    for (file, whole), run in groupby(undo, key=lambda u: (u[0], u[3] is not None)):
        if not whole:          # the rows an INSERT added
            conn.executemany(f"DELETE FROM {table(file)} WHERE rid BETWEEN ? AND ?",
                             [(lo, hi) for _, lo, hi, _ in run])
            continue
        cols = _columns(files[file])   # rows as they were before an UPDATE or DELETE
        conn.executemany(f"INSERT OR REPLACE INTO {table(file)} (rid, {', '.join(cols)}) "
                         f"VALUES (?{', ?' * len(cols)})",
                         [(lo, *json.loads(image)) for _, lo, _, image in run])
    Store.restore_files(conn, before)
    forget(conn, unit)
    return before


def in_doubt(conn: sqlite3.Connection) -> dict[Key, int]:
    """Every unit prepared here and not yet decided: (epoch, seq) → its marker."""
    return {(epoch, seq): unit for unit, epoch, seq in
            conn.execute("SELECT id, epoch, seq FROM prepared ORDER BY id")}
