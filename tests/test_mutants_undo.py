"""A backend's undo log and definition markers, on real SQLite files (the store's own
DDL): what a rolled-back unit or definition leaves, what a unit says it wrote, and the
one-time rebuild of a file table made before rowids were AUTOINCREMENT
(docs/mutation.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from backend import undo
from backend.store import Store
from mbds.directory import file_schema_to_pb
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema, parse_definition

YAML = """
files:
  T:
    attributes: {K: integer, S: string}
    directory:
      K: {type: A, ranges: [[0, 99]]}
"""
T = parse_definition(YAML)[0]
ROWS = 'SELECT rid, cluster_id, "K", "S", _body FROM "r_T" ORDER BY rid'


def writer(tmp_path: Path) -> sqlite3.Connection:
    conn = Store(tmp_path / "backend.db").writer()
    conn.executescript(undo.SCHEMA)
    return conn


def with_table(tmp_path: Path, *rows: tuple) -> sqlite3.Connection:
    conn = writer(tmp_path)
    Store.persist_rows(conn, pb.DirectoryUpdate(files=[file_schema_to_pb(T)]))
    conn.executemany('INSERT INTO "r_T" (cluster_id, "K", "S", _body) VALUES (?, ?, ?, ?)',
                     rows)
    return conn


def roll_back(conn: sqlite3.Connection, unit: int) -> dict[str, FileSchema | None]:
    conn.execute("BEGIN")
    before = undo.roll_back(conn, unit, {"T": T})
    conn.execute("COMMIT")
    return before


def test_the_first_insert_into_a_new_table_is_rolled_back_whole(tmp_path: Path) -> None:
    """A table that never had a row has no AUTOINCREMENT counter yet: its rows start at
    rowid 1, and the undo row must name them from 1, or the first stays after a roll
    back."""
    conn = with_table(tmp_path)
    log = undo.UndoLog(conn, ("e", 1))
    before = log.last_rid(T)
    conn.executemany('INSERT INTO "r_T" (cluster_id, "K", "S") VALUES (?, ?, ?)',
                     [(1, 1, "a"), (1, 2, "b")])
    log.inserted(T, before)
    assert log.wrote
    roll_back(conn, log.unit)
    assert conn.execute(ROWS).fetchall() == []
    assert undo.in_doubt(conn) == {}


@pytest.mark.parametrize("change", ['DELETE FROM "r_T" WHERE "K" = 2',
                                    'UPDATE "r_T" SET "S" = \'x\' WHERE "K" = 2'])
def test_a_unit_that_only_deletes_or_updates_one_row_has_written(tmp_path: Path,
                                                                  change: str) -> None:
    """A unit whose log says it wrote nothing is dropped as having nothing to decide:
    a lone DELETE or UPDATE of a single row must say it wrote, and roll back."""
    conn = with_table(tmp_path, (1, 1, "a", None), (1, 2, "b", "body"))
    before = conn.execute(ROWS).fetchall()
    log = undo.UndoLog(conn, ("e", 2))
    log.rows(T, '"K" = ?', [2])
    conn.execute(change)
    assert log.wrote
    assert undo.in_doubt(conn) == {("e", 2): log.unit}
    roll_back(conn, log.unit)
    assert conn.execute(ROWS).fetchall() == before


def test_a_definition_of_a_new_file_is_rolled_back_to_no_file(tmp_path: Path) -> None:
    """A new file's table and directory rows go; the roll back says the file was new."""
    conn = writer(tmp_path)
    conn.execute("BEGIN")
    unit = undo.defining(conn, ("e", 3), ["T"])
    Store.persist_rows(conn, pb.DirectoryUpdate(
        files=[file_schema_to_pb(T)],
        descriptors=[pb.Descriptor(id=1, file="T", attr="K", kind="A")],
        clusters=[pb.Cluster(id=1, file="T", descriptor_ids=[1])]))
    conn.execute("COMMIT")
    assert undo.in_doubt(conn) == {("e", 3): unit}
    assert roll_back(conn, unit) == {"T": None}
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'r_T'").fetchall() == []
    for t in ("files", "descriptors", "clusters", "defined", "prepared"):
        assert conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone() == (0,), t


def test_a_re_indexed_file_is_rolled_back_to_its_old_definition(tmp_path: Path) -> None:
    """A file given an index: rolled back, its old definition is what the roll back
    returns and what the store keeps, the new index is dropped, its rows stay."""
    conn = with_table(tmp_path, (1, 1, "a", None))
    indexed = parse_definition(YAML.replace("    directory:", "    indexes: [S]\n"
                                                              "    directory:"))[0]
    assert indexed.indexes == ["S"] and T.indexes == []
    conn.execute("BEGIN")
    unit = undo.defining(conn, ("e", 4), ["T"])
    Store.persist_rows(conn, pb.DirectoryUpdate(files=[file_schema_to_pb(indexed)]))
    conn.execute("COMMIT")
    assert "ix_T_a_S" in {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    [(name, old)] = roll_back(conn, unit).items()
    assert name == "T" and old is not None and file_schema_to_pb(old) == file_schema_to_pb(T)
    assert "ix_T_a_S" not in {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    [stored] = Store(tmp_path / "backend.db").load_directory().files
    assert stored == file_schema_to_pb(T)
    assert conn.execute(ROWS).fetchall() == [(1, 1, 1, "a", None)]
    assert conn.execute("SELECT COUNT(*) FROM defined").fetchone() == (0,)


def old_table(conn: sqlite3.Connection, rid_column: str) -> None:
    conn.executescript(f"""
        CREATE TABLE "r_T" ({rid_column}, cluster_id INTEGER NOT NULL,
                            "K" INTEGER, "S" TEXT, _body TEXT) STRICT;
        INSERT INTO "r_T" VALUES (1, 1, 1, 'a', NULL), (2, 1, 2, 'b', NULL);
    """)


def test_a_rebuilt_table_never_gives_its_top_rowid_again(tmp_path: Path) -> None:
    """With no undo rows naming it, the rebuilt table's counter starts at its largest
    rowid: a row deleted from its top (by a unit that may yet be rolled back) does not
    have its rowid given to the next INSERT."""
    conn = writer(tmp_path)
    old_table(conn, "rid INTEGER PRIMARY KEY")
    undo.never_reuse_rids(conn)
    conn.execute('DELETE FROM "r_T" WHERE rid = 2')
    conn.execute("""INSERT INTO "r_T" (cluster_id, "K", "S") VALUES (1, 3, 'c')""")
    assert conn.execute('SELECT rid, "S" FROM "r_T" ORDER BY rid').fetchall() == [
        (1, "a"), (3, "c")]


def test_an_old_table_without_the_expected_rowid_column_is_named(tmp_path: Path) -> None:
    """A file table this code cannot rebuild stops the backend, naming the table."""
    conn = writer(tmp_path)
    old_table(conn, "rid INTEGER NOT NULL")
    with pytest.raises(RuntimeError, match='^file table r_T has no rowid column to rebuild: '
                                           'CREATE TABLE "r_T"'):
        undo.never_reuse_rids(conn)
