"""Non-clustered indexes through the real system: built in every backend's SQLite file,
used by RECP's queries, changed by a re-definition, kept across a restart, and never
changing an answer."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from backend import dm, recp_read
from controller.reqp import Reqp
from mbds.client import ClientError
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from tests.conftest import Running, as_controller, backend_digests, internal_channel

DEF = """
files:
  ITEM:
    attributes: {ID: integer, NUM: integer, TAG: string}
    directory:
      ID: {type: A, ranges: [[1, 50], [51, 100]]}
    indexes: %s
"""
QUERIES = [
    "RETRIEVE ((FILE = ITEM) and (NUM = 77)) (ID, NUM, TAG)",
    "RETRIEVE ((FILE = ITEM) and (NUM > 90)) (ID, NUM)",
    "RETRIEVE ((FILE = ITEM) and (TAG = t3)) (ID)",
    "RETRIEVE ((FILE = ITEM) and (ID <= 50) and (NUM < 20)) (ID, NUM)",
]


def _files(r: Running) -> list[Path]:
    return [r.cluster.data_dir / f"b{i}" / "backend.db" for i in range(len(r.cluster.backends))]


def _indexes(db: Path) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {n for (n,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'ix_ITEM_a_%'")}


def _recp(r: Running, i: int, query: str) -> tuple[list[tuple], list[str]]:
    """RECP's own statements for `query` on backend i, and their query plans.

    The request goes the way a traffic unit does: REQP checks it, DM searches the
    directory (backend i's, asked over gRPC) and plans it, and RECP's read path runs
    the plan on backend i's SQLite file (read-only) with every statement it executes
    traced. Returns RECP's rows and the plan SQLite made for each traced statement.
    """
    address = r.cluster.backends[i].address or ""
    metadata = as_controller(r.cluster, address)
    with internal_channel(r.cluster, address) as ch:
        reply = rpc.BackendStub(ch).Directory(pb.DirectoryRequest(), timeout=10,
                                              metadata=metadata)
    directory = Directory()
    directory.apply(reply.directory)
    prepared, _ = Reqp(directory).prepare(query)
    tu = pb.TrafficUnit(requests=[p.request for p in prepared])
    [plan] = dm.plan_requests(directory, tu, dm.descriptor_search(directory, tu, 0, 1))
    statements: list[str] = []
    with closing(sqlite3.connect(f"file:{_files(r)[i]}?mode=ro", uri=True)) as conn:
        conn.set_trace_callback(statements.append)     # the SQL as run, values bound
        rows = [tuple(row) for msg in recp_read.read(conn, 0, plan)
                for row in json.loads(msg.rows.rows_json)]
        conn.set_trace_callback(None)
        plans = [" ".join(str(step[-1]) for step in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
                 for sql in statements]
    assert plans, f"RECP ran no statement for {query}"
    return rows, plans


def _index_use(r: Running, query: str, answer: list[tuple]) -> list[str]:
    """The plans of RECP's statements for `query` on every backend, after checking that
    those statements are what answers it: their rows, over all backends, are `answer`."""
    rows, plans = [], []
    for i in range(len(r.cluster.backends)):
        got, p = _recp(r, i, query)
        rows += got
        plans += p
    assert sorted(rows) == answer
    return plans


def _answers(r: Running) -> list[list[tuple]]:
    return [sorted(tuple(rec.values()) for rec in r.client.execute(q)[0].records)
            for q in QUERIES]


def test_indexes_are_built_used_changed_and_kept(cluster_factory) -> None:
    r = cluster_factory(2)
    assert list(r.client.define(DEF % "[]").files_created) == ["ITEM"]
    for i in range(1, 101):
        r.client.execute(f"INSERT (<FILE, ITEM>, <ID, {i}>, <NUM, {(i * 37) % 101}>, "
                         f"<TAG, t{i % 7}>)")
    plain = _answers(r)
    nums = {i: (i * 37) % 101 for i in range(1, 101)}
    assert [len(a) for a in plain] == [
        1, sum(n > 90 for n in nums.values()), sum(i % 7 == 3 for i in nums),
        sum(i <= 50 and n < 20 for i, n in nums.items())]
    assert all(_indexes(db) == set() for db in _files(r))
    assert not any("ix_ITEM_a_" in p for p in _index_use(r, QUERIES[0], plain[0]))

    # Adding indexes to a stored file builds them on every backend; answers do not change.
    reply = r.client.define(DEF % "[NUM, TAG]")
    assert list(reply.files_reindexed) == ["ITEM"] and not reply.files_created
    for db in _files(r):
        assert _indexes(db) == {"ix_ITEM_a_NUM", "ix_ITEM_a_TAG"}
    assert _answers(r) == plain
    # RECP's own statements for a predicate on an indexed attribute search the index.
    assert all("USING INDEX ix_ITEM_a_NUM" in p for p in _index_use(r, QUERIES[0], plain[0]))
    assert all("USING INDEX ix_ITEM_a_TAG" in p for p in _index_use(r, QUERIES[2], plain[2]))
    assert len(set(backend_digests(r))) == 1
    assert list(r.client.define(DEF % "[TAG, NUM]").files_unchanged) == ["ITEM"]

    # The index list is kept in the backend's file: a restarted backend has it.
    r.cluster.backends[1].stop()
    r.cluster.restart_backend(1)
    assert len(set(backend_digests(r))) == 1
    assert _answers(r) == plain
    r.client.execute("INSERT (<FILE, ITEM>, <ID, 101>, <NUM, 77>, <TAG, t3>)")
    assert len(r.client.execute(QUERIES[0])[0].records) == 2     # index maintained on insert

    # Leaving an index out of the definition drops it.
    assert list(r.client.define(DEF % "[TAG]").files_reindexed) == ["ITEM"]
    assert all(_indexes(db) == {"ix_ITEM_a_TAG"} for db in _files(r))
    answer = sorted([*plain[0], (101, 77, "t3")])
    assert not any("ix_ITEM_a_NUM" in p for p in _index_use(r, QUERIES[0], answer))
    assert all("USING INDEX ix_ITEM_a_TAG" in p
               for p in _index_use(r, QUERIES[2], sorted([*plain[2], (101,)])))


def test_a_bad_index_definition_changes_nothing(cluster_factory) -> None:
    r = cluster_factory(1)
    r.client.define(DEF % "[NUM]")
    digest = backend_digests(r)
    with pytest.raises(ClientError, match="index attribute PRICE is not an attribute"):
        r.client.define(DEF % "[PRICE]")
    with pytest.raises(ClientError, match="already defined differently"):
        r.client.define(DEF.replace("TAG: string", "TAG: integer") % "[]")
    assert backend_digests(r) == digest
    assert all(_indexes(db) == {"ix_ITEM_a_NUM"} for db in _files(r))
