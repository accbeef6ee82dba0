"""A record's rowid on a backend is never given twice: a DELETE that is prepared but not
yet decided frees rowids that its roll-back will put its rows back into, so no other
unit's INSERT may take them meanwhile (AUTOINCREMENT). A file table made before rowids
were AUTOINCREMENT is rebuilt once, at start, keeping its rows, rowids and indexes.
Real processes, real SQLite files."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from backend import undo
from backend.store import Store
from mbds.client import Client, ClientError
from tests.crashes import retry, wait_for

DEFINITION = """
files:
  T:
    attributes: {K: integer, TAG: string}
    directory:
      K: {type: A, ranges: [[0, 9], [10, 19]]}
"""
ROWS = 'SELECT rid, "K", "TAG" FROM "r_T" ORDER BY rid'


def rows(db: Path) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute(ROWS).fetchall()


def test_an_aborted_delete_does_not_overwrite_an_insert_made_meanwhile(
        cluster_factory) -> None:
    """b0 prepares a DELETE of the records at the top of its table; b1 stalls before its
    vote, so the DELETE misses its deadline and is rolled back. Meanwhile an INSERT into
    another cluster, on b0 alone, is acknowledged. Given a rowid the DELETE freed, it
    would be replaced by the roll-back: an acknowledged write lost without a word."""
    # The search is not split: b0 goes on with the DELETE without b1's descriptor ids.
    r = cluster_factory(2, split_search_from=100)
    r.client.define(DEFINITION)
    for i in range(4):             # the cluster K 10-19 first: the lowest rowids…
        r.client.execute(f"INSERT (<FILE, T>, <K, 15>, <TAG, 'b{i}'>)")
    for i in range(4):             # …then K 0-9: the highest, two on each backend
        r.client.execute(f"INSERT (<FILE, T>, <K, 5>, <TAG, 'a{i}'>)")
    b0 = r.cluster.data_dir / "b0" / "backend.db"
    before = rows(b0)
    assert [row[1] for row in before] == [15, 15, 5, 5]

    r.cluster.backends[1].stop()
    r.cluster.restart_backend(1, env={"MBDS_FAULTS": "backend.before_vote=stall",
                                      "MBDS_FAULTS_STALL_S": "8"})
    retry(r.client, "RETRIEVE ((FILE = T) and (K = 15)) (TAG)", timeout=60)
    outcome: dict[str, object] = {}

    def delete() -> None:
        try:
            with Client(r.cluster.address, timeout=3) as c:
                outcome["ok"] = c.execute("DELETE ((FILE = T) and (K < 10))")
        except ClientError as e:
            outcome["error"] = e
    deleting = threading.Thread(target=delete)
    deleting.start()
    wait_for(lambda: any("stalling" in line for line in r.cluster.backends[1].tail), 30,
             "b1 stalled before its vote")
    wait_for(lambda: [row[1] for row in rows(b0)] == [15, 15], 30,
             "b0 prepared the DELETE")
    r.client.execute("INSERT (<FILE, T>, <K, 15>, <TAG, 'NEW'>)")
    during = rows(b0)
    assert [row[2] for row in during] == ["b0", "b2", "NEW"], during   # on b0, one phase
    deleting.join(60)
    assert "error" in outcome, outcome          # the DELETE missed its deadline

    wait_for(lambda: len(rows(b0)) == 5, 30, "b0 rolled the DELETE back")
    after = rows(b0)
    assert sorted(after) == sorted(before + during[2:]), after
    [res] = retry(r.client, "RETRIEVE (FILE = T) (TAG)", timeout=60)
    assert sorted(x["TAG"] for x in res.records) == [
        "NEW", "a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]


def test_a_table_made_before_autoincrement_is_rebuilt_with_its_rows(tmp_path: Path) -> None:
    """An old table (rowids SQLite may give again), with a gap at its top that an
    undecided unit's undo rows name: rebuilt at start, every row keeps its rowid, its
    indexes are back, and the next rowid given is above the gap."""
    store = Store(tmp_path / "backend.db")
    conn = store.writer()
    conn.executescript(undo.SCHEMA)
    conn.executescript("""
        CREATE TABLE "r_T" (rid INTEGER PRIMARY KEY, cluster_id INTEGER NOT NULL,
                            "K" INTEGER, "TAG" TEXT, _body TEXT) STRICT;
        CREATE INDEX "ix_T_cluster" ON "r_T" (cluster_id);
        CREATE INDEX "ix_T_a_K" ON "r_T" ("K");
        INSERT INTO "r_T" VALUES (1, 1, 15, 'b0', NULL), (2, 1, 15, 'b1', NULL);
        INSERT INTO prepared (id, epoch, seq) VALUES (1, 'e', 7);
        INSERT INTO undo (unit, file, lo, image) VALUES (1, 'T', 4, '[2, 5, "a1", null]');
    """)
    undo.never_reuse_rids(conn)
    undo.never_reuse_rids(conn)            # once: a rebuilt table is left as it is
    [sql] = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'r_T'").fetchone()
    assert "AUTOINCREMENT" in sql
    assert conn.execute(ROWS).fetchall() == [(1, 15, "b0"), (2, 15, "b1")]
    assert {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'r_T'")} == {
        "ix_T_cluster", "ix_T_a_K"}
    assert undo.last_rid(conn, "T") == 4
    conn.execute("""INSERT INTO "r_T" (cluster_id, "K", "TAG") VALUES (1, 15, 'new')""")
    assert conn.execute('SELECT max(rid) FROM "r_T"').fetchone() == (5,)
    store.close()
