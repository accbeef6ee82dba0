"""The backend's own SQLite file: its copy of the directory and its slice of the records.

Tables: `meta` (identity), `files`, `descriptors` (DDIT, with AT derivable
from it), `clusters` (CDT), and one STRICT table `r_<FILE>` per file whose
`cluster_id` index is the CDT's address list: a cluster's records on this
backend are found through it (address generation, docs/spec.md §4 step 5).

Connections: one writer connection, used only from the single writer thread
(datasette's pattern: one writer, many readers); read-only connections for the
reads of traffic units, which run on the event loop (a small pool, one per unit
reading at the time); and one for the thread that counts records per cluster
for the controller's Directory call. WAL lets the reads run beside the writer.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from pathlib import Path

from mbds.directory import file_schema_from_pb, file_schema_to_pb
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from mbds.values import from_pb, to_pb

SQL_TYPES = {"integer": "INTEGER", "float": "REAL", "string": "TEXT"}
SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def table(file: str) -> str:
    # File and attribute names are validated identifiers, so quoting them is safe;
    # values never reach SQL text (always bound parameters).
    return f'"r_{file}"'


def col(attr: str) -> str:
    return f'"{attr}"'


def as_json(a: Attribute) -> str:
    """The attribute's column as `json_array` should carry it. SQLite 3.40 writes a float
    with 15 significant digits, and its printf's 17 are not always the stored value's
    either; Python's repr of a float is its shortest literal that gives it back."""
    c = col(a.name)
    return f"CASE typeof({c}) WHEN 'real' THEN json({FLOAT_LITERAL}({c})) ELSE {c} END" \
        if a.type == "float" else c


FLOAT_LITERAL = "mbds_float"      # the SQL function `as_json` calls: a float's repr
ROWID = "INTEGER PRIMARY KEY AUTOINCREMENT"     # a file table's `rid`


def add_functions(conn: sqlite3.Connection) -> sqlite3.Connection:
    """The connection, with the SQL functions RECP's statements call."""
    conn.create_function(FLOAT_LITERAL, 1, repr, deterministic=True)
    return conn


def index_name(file: str, attr: str) -> str:
    """A non-clustered index's name in SQLite (`ix_<FILE>_cluster` is the address list)."""
    return f"ix_{file}_a_{attr}"


class Store:
    def __init__(self, path: Path, *, synchronous: str = "NORMAL", memory: bool = False) -> None:
        if synchronous.upper() not in SYNC_MODES:
            raise ValueError(f"synchronous must be one of {SYNC_MODES}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.memory = memory
        self._local = threading.local()
        self._writer: sqlite3.Connection | None = None
        self._pool: list[sqlite3.Connection] = []     # read-only, for the event loop
        if memory:
            # One shared in-memory database (benchmarks of durability modes only).
            self.uri = f"file:mbds-{uuid.uuid4().hex}?mode=memory&cache=shared"
            self._keepalive = sqlite3.connect(self.uri, uri=True, check_same_thread=False)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.uri = path.resolve().as_uri()
        conn = self.writer()
        conn.executescript("""
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS files (name TEXT PRIMARY KEY, def TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS descriptors (
                id INTEGER PRIMARY KEY, file TEXT NOT NULL, attr TEXT NOT NULL,
                kind TEXT NOT NULL, low TEXT, high TEXT, value TEXT);
            CREATE TABLE IF NOT EXISTS clusters (
                id INTEGER PRIMARY KEY, file TEXT NOT NULL, dids TEXT NOT NULL);
        """)

    # --------------------------------------------------------- connections --
    def _connect(self, readonly: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(self.uri, uri=True, isolation_level=None,
                               check_same_thread=False, timeout=30)
        add_functions(conn)
        if not self.memory:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        if readonly:
            conn.execute("PRAGMA query_only=ON")
            if self.memory:
                # Shared-cache memory databases lock whole tables; CC already keeps
                # readers off clusters a writer holds, so reading uncommitted pages is safe.
                conn.execute("PRAGMA read_uncommitted=ON")
        return conn

    def writer(self) -> sqlite3.Connection:
        """The writer connection; call only from the writer thread (or at startup)."""
        if self._writer is None:
            self._writer = self._connect(readonly=False)
        return self._writer

    def checkout_reader(self) -> sqlite3.Connection:
        """A read-only connection for one traffic unit on the event loop (see checkin)."""
        pool = self._pool
        return pool.pop() if pool else self._connect(readonly=True)

    def checkin_reader(self, conn: sqlite3.Connection) -> None:
        self._pool.append(conn)

    def reader(self) -> sqlite3.Connection:
        """This thread's read-only connection (the cluster-counting thread's)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect(readonly=True)
        return conn

    # ------------------------------------------------------------ identity --
    def identity(self, default: str) -> str:
        """This backend's name, fixed the first time the data directory is used."""
        conn = self.writer()
        row = conn.execute("SELECT value FROM meta WHERE key = 'name'").fetchone()
        if row:
            return row[0]
        conn.execute("INSERT INTO meta (key, value) VALUES ('name', ?)", (default,))
        return default

    def cluster(self) -> str:
        """The cluster this backend belongs to: "" until a controller's bus gives it one."""
        row = self.writer().execute("SELECT value FROM meta WHERE key = 'cluster'").fetchone()
        return row[0] if row else ""

    @staticmethod
    def join_cluster(conn: sqlite3.Connection, cluster: str) -> None:
        """Keep `cluster` as this backend's, once (writer thread). Kept again by a bus
        whose first try was cancelled after the row was written: the same id is no
        error, another one is."""
        conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('cluster', ?)",
                     (cluster,))
        kept = conn.execute("SELECT value FROM meta WHERE key = 'cluster'").fetchone()[0]
        if kept != cluster:
            raise ValueError(f"it already belongs to cluster {kept}")

    def members(self) -> list[str]:
        """The names of the cluster's backends, as its last bus hello gave them."""
        row = self.writer().execute("SELECT value FROM meta WHERE key = 'members'").fetchone()
        return json.loads(row[0]) if row else []

    @staticmethod
    def keep_members(conn: sqlite3.Connection, names: list[str]) -> None:
        """Keep the names of the cluster's backends (writer thread)."""
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('members', ?)",
                     (json.dumps(names),))

    # ----------------------------------------------------------- directory --
    def load_directory(self) -> pb.DirectoryUpdate:
        conn = self.writer()
        upd = pb.DirectoryUpdate()
        for (text,) in conn.execute("SELECT def FROM files ORDER BY rowid"):
            upd.files.append(file_def(text))
        for row in conn.execute("SELECT id, file, attr, kind, low, high, value FROM descriptors"):
            d = upd.descriptors.add(id=row[0], file=row[1], attr=row[2], kind=row[3])
            for field, text in zip(("low", "high", "value"), row[4:], strict=True):
                to_pb(json.loads(text) if text is not None else None, getattr(d, field))
        for cid, file, dids in conn.execute("SELECT id, file, dids FROM clusters"):
            upd.clusters.add(id=cid, file=file, descriptor_ids=json.loads(dids))
        return upd

    @staticmethod
    def persist_rows(conn: sqlite3.Connection, new: pb.DirectoryUpdate) -> None:
        """Store the new parts of a directory update inside the caller's transaction (the
        writer's, `writer.py`), creating file tables."""
        for f in new.files:
            schema = file_schema_from_pb(f)
            # An upsert, not a replace: load_directory lists files in rowid order.
            conn.execute("INSERT INTO files (name, def) VALUES (?, ?) ON CONFLICT (name) "
                         "DO UPDATE SET def = excluded.def", (
                f.name, json.dumps({"name": f.name, "revision": f.revision, "attributes": [
                    [a.name, a.type, a.directory, a.indexed] for a in schema.attributes]})))
            Store._create_file_table(conn, schema)
        conn.executemany(
            "INSERT OR IGNORE INTO descriptors VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(d.id, d.file, d.attr, d.kind, *(_json(getattr(d, f)) for f in
                                              ("low", "high", "value")))
             for d in new.descriptors])
        conn.executemany("INSERT OR IGNORE INTO clusters VALUES (?, ?, ?)", [
            (c.id, c.file, json.dumps(list(c.descriptor_ids))) for c in new.clusters])

    @staticmethod
    def restore_files(conn: sqlite3.Connection, before: dict[str, FileSchema | None]) -> None:
        """Take back a definition's files inside the caller's transaction: a new file's
        table (its indexes go with it) and directory rows; a re-indexed file's old
        definition and indexes."""
        for name, old in before.items():
            if old is not None:
                Store.persist_rows(conn, pb.DirectoryUpdate(files=[file_schema_to_pb(old)]))
                continue
            conn.execute(f"DROP TABLE IF EXISTS {table(name)}")
            conn.execute("DELETE FROM descriptors WHERE file = ?", (name,))
            conn.execute("DELETE FROM clusters WHERE file = ?", (name,))
            conn.execute("DELETE FROM files WHERE name = ?", (name,))

    @staticmethod
    def _create_file_table(conn: sqlite3.Connection, schema: FileSchema) -> None:
        cols = ", ".join(f"{col(a.name)} {SQL_TYPES[a.type]}" for a in schema.attributes)
        # AUTOINCREMENT: a rowid is never given twice, so the rows an undecided DELETE
        # freed are not taken by another unit's INSERT before the DELETE may be rolled
        # back into them (`undo.roll_back`).
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table(schema.name)} ("
                     f"rid {ROWID}, cluster_id INTEGER NOT NULL, {cols}, "
                     f"_body TEXT) STRICT")
        conn.execute(f'CREATE INDEX IF NOT EXISTS "ix_{schema.name}_cluster" '
                     f"ON {table(schema.name)} (cluster_id)")
        # Non-clustered indexes: exactly the definition's list (an index left out of a
        # re-definition is dropped). Built here, in the writer's transaction.
        for a in schema.attributes:
            name = f'"{index_name(schema.name, a.name)}"'
            if a.indexed:
                conn.execute(f"CREATE INDEX IF NOT EXISTS {name} "
                             f"ON {table(schema.name)} ({col(a.name)})")
            else:
                conn.execute(f"DROP INDEX IF EXISTS {name}")

    def cluster_counts(self, ranges: dict[str, tuple[int, int]]) -> list[tuple[int, int]]:
        """(cluster id, records here) of every non-empty cluster of each file with its id
        in the file's (low, high) range: IIG's placement state, a part of the directory
        at a time (through the cluster index; in the counting thread)."""
        conn = self.reader()
        out: list[tuple[int, int]] = []
        for f, (low, high) in ranges.items():
            out += conn.execute(f"SELECT cluster_id, COUNT(*) FROM {table(f)} WHERE "
                                "cluster_id BETWEEN ? AND ? GROUP BY cluster_id",
                                (low, high)).fetchall()
        return out

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def file_def(text: str) -> pb.FileDef:
    """A file's definition as the `files` table keeps it (`def`)."""
    d = json.loads(text)
    # Files stored before indexes existed have no revision and three fields.
    attrs = [pb.AttributeDef(name=a[0], type=a[1], directory=a[2],
                             indexed=len(a) > 3 and bool(a[3]))
             for a in d["attributes"]]
    return pb.FileDef(name=d["name"], revision=d.get("revision", 0), attributes=attrs)


def _json(v: pb.Value) -> str | None:
    value = from_pb(v)
    return None if value is None else json.dumps(value)


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error (autocommit connections)."""

    def __init__(self, conn: sqlite3.Connection, mode: str = "IMMEDIATE") -> None:
        self.conn, self.mode = conn, mode

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute(f"BEGIN {self.mode}")
        return self.conn

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


transaction = _transaction
