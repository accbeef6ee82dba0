"""Files as wide as a definition allows (256 attributes, with FILE and BODY) through the
real system: SQLite lets one function call have at most 127 arguments, and a record's
row, read or kept in the undo log, is one JSON array of every value it has."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import Any

import pytest

from backend import recp_sql
from backend.store import add_functions
from mbds.client import ClientError
from mbds.schema import MAX_ATTRIBUTES
from tests.conftest import Running
from tests.crashes import retry

TYPES = ("string", "integer", "float")
NAMES = [f"A{i:03}" for i in range(MAX_ATTRIBUTES)]
KIND = {name: TYPES[i % 3] for i, name in enumerate(NAMES)}
# A000 (string, type B) and A001 (integer, type A) are directory attributes; A002 (a
# float) has a non-clustered index, so a predicate on it is read row by row.
WIDE_YAML = f"""
files:
  WIDE:
    attributes: {{{', '.join(f'{n}: {t}' for n, t in KIND.items())}}}
    directory:
      A000: {{type: B, values: [x, y]}}
      A001: {{type: A, ranges: [[0, 99], [100, 199]]}}
    indexes: [A002]
"""
BIG = 2 ** 62           # × 4 leaves 64 bits: the update that fails the unit below


def value(i: int, k: int) -> Any:
    """Record k's value of attribute i: strings, integers and floats of 17 significant
    digits (some near the ends of the float range), and some nulls."""
    name = NAMES[i]
    if i == 0:
        return "x" if k % 2 == 0 else "y"
    if i == 1:
        return k * 10 if k < 3 else 100 + k
    if i == 4 and k == 6:
        return BIG
    if k == 5 and i % 5 == 4:
        return None
    if KIND[name] == "string":
        return f"s{i} k{k} \"q\" é"
    if KIND[name] == "integer":
        return (i * 1_000_003 + k) * (-1) ** i
    f = (i * 7 + k + 1) / 3 * 10.0 ** (i % 11 - 5)
    # Near the ends of the float range, with room for a group's sum (one beyond it is
    # refused, tests/test_e2e_requests.py).
    return f * 1e-300 if i % 9 == 2 else f * 1e295 if i % 9 == 5 else -f if i % 4 == 0 else f


def literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(v)


RECORDS = [{"FILE": "WIDE", **{n: value(i, k) for i, n in enumerate(NAMES)},
            "BODY": f"body of {k} }}{{" if k % 3 else None} for k in range(7)]


def insert(rec: dict[str, Any]) -> str:
    kws = ", ".join(f"<{n}, {literal(rec[n])}>" for n in NAMES if rec[n] is not None)
    body = "" if rec["BODY"] is None else " {" + rec["BODY"].replace("}", "\\}") + "}"
    return f"INSERT (<FILE, Wide>, {kws}){body}"


def typed(records: list[dict[str, Any]]) -> list[list[tuple[str, str, Any]]]:
    """Records in a comparable form that tells 1 from 1.0, in A001's order."""
    return sorted(([(c, type(v).__name__, v) for c, v in r.items()] for r in records),
                  key=lambda r: next(v for c, _, v in r if c == "A001"))


def stored(r: Running) -> dict[str, list[tuple]]:
    """Every backend's rows of WIDE, whole (rid, cluster, every attribute, body), read
    from its own SQLite file."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = conn.execute('SELECT * FROM "r_WIDE" ORDER BY rid').fetchall()
    return out


def loaded(cluster_factory) -> Running:
    r = cluster_factory(2)
    r.client.define(WIDE_YAML)
    r.client.execute("[" + "; ".join(insert(rec) for rec in RECORDS) + "]")
    assert all(stored(r).values())       # both backends hold records of the file
    return r


def retrieve_all(r: Running, where: str = "FILE = Wide") -> list[list[tuple[str, str, Any]]]:
    [res] = r.client.execute(f"RETRIEVE ({where}) (ALL)")
    assert res.columns == ["FILE", *NAMES, "BODY"]
    return typed(res.records)


# ------------------------------------------------------------------ the SQL helper --

def test_a_json_array_of_any_length_is_what_one_json_array_call_gives() -> None:
    """Up to 127 values it is the one call, as text; past it, spliced calls give the
    same bytes as each value encoded by SQLite on its own, joined (floats included)."""
    with closing(add_functions(sqlite3.connect(":memory:"))) as conn:
        conn.execute("CREATE TABLE t (s TEXT, i INTEGER, f REAL, n TEXT)")
        conn.execute("INSERT INTO t VALUES ('a]\"[b', -7, 0.30000000000000004, NULL)")
        f = "CASE typeof(f) WHEN 'real' THEN json(mbds_float(f)) ELSE f END"
        pool = ["s", "i", f, "n", "'['", "']'", "?"]
        assert recp_sql.json_array(["s", "i"]) == "json_array(s, i)"
        assert recp_sql.json_array([]) == "json_array()"
        for n in (1, 2, 126, 127, 128, 129, 200, 253, 254, 255, 256, 258, 381, 382, 600):
            exprs = [pool[j % len(pool)] for j in range(n)]
            params = [f"p{j}" for j in range(n) if exprs[j] == "?"]
            sql = recp_sql.json_array(exprs)
            got = conn.execute(f"SELECT {sql} FROM t", params).fetchone()[0]
            one_by_one = iter(params)
            alone = [conn.execute(f"SELECT json_array({e}) FROM t",
                                  [next(one_by_one)] if e == "?" else []).fetchone()[0][1:-1]
                     for e in exprs]
            assert got == "[" + ",".join(alone) + "]", n
            assert json.loads(got)[:4] == ["a]\"[b", -7, 0.30000000000000004, None][:n]
            assert (sql == f"json_array({', '.join(exprs)})") == (n <= 127)
            assert sql.count("json_array(") == -(-n // recp_sql.MAX_FUNCTION_ARGS)


def test_one_json_array_call_stops_at_sqlites_limit_and_the_helper_does_not() -> None:
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(f"SELECT json_array({', '.join(['1'] * recp_sql.MAX_FUNCTION_ARGS)})")
        with pytest.raises(sqlite3.OperationalError, match="too many arguments"):
            conn.execute(f"SELECT json_array({', '.join(['1'] * 128)})")
        got = conn.execute(f"SELECT {recp_sql.json_array(['1'] * 1000)}").fetchone()[0]
        assert got == "[" + ",".join(["1"] * 1000) + "]"


# --------------------------------------------------------------- the real system --

def test_every_read_of_a_file_of_256_attributes(cluster_factory) -> None:
    r = loaded(cluster_factory)
    c = r.client
    assert retrieve_all(r) == typed(RECORDS)
    # A cluster-restricted read (pages through A000 = x's clusters), and one row by row
    # (a predicate the index on A002 could answer).
    assert retrieve_all(r, "(FILE = Wide) and (A000 = x)") == typed(
        [rec for rec in RECORDS if rec["A000"] == "x"])
    assert retrieve_all(r, "(FILE = Wide) and (A002 > 0)") == typed(
        [rec for rec in RECORDS if rec["A002"] is not None and rec["A002"] > 0])
    [res] = c.execute(f"RETRIEVE (FILE = Wide) ({', '.join(NAMES)})")
    assert res.columns == NAMES
    assert typed(res.records) == typed([{n: rec[n] for n in NAMES} for rec in RECORDS])
    # Every attribute, FILE and BODY counted at once; and the usual aggregates.
    every = ["FILE", *NAMES, "BODY"]
    [res] = c.execute(f"RETRIEVE (FILE = Wide) ({', '.join(f'COUNT({a})' for a in every)})")
    assert res.records == [{f"COUNT({a})": sum(rec[a] is not None for rec in RECORDS)
                            for a in every}]
    [res] = c.execute("RETRIEVE (FILE = Wide) (A000, SUM(A001), AVG(A004), MIN(A005), "
                      "MAX(A254), COUNT(A255)) BY A000")
    want = []
    for key in ("x", "y"):
        group = [rec for rec in RECORDS if rec["A000"] == key]
        a4 = [rec["A004"] for rec in group if rec["A004"] is not None]
        want.append({"A000": key, "SUM(A001)": sum(rec["A001"] for rec in group),
                     "AVG(A004)": pytest.approx(sum(a4) / len(a4)),
                     "MIN(A005)": min(rec["A005"] for rec in group if rec["A005"] is not None),
                     "MAX(A254)": max(rec["A254"] for rec in group if rec["A254"] is not None),
                     "COUNT(A255)": sum(rec["A255"] is not None for rec in group)})
    assert sorted(res.records, key=lambda g: g["A000"]) == want
    # Every aggregate of every name at once: 1,114 items, four result columns each, more
    # than one SQLite statement may have, so each backend's groups come from several.
    numeric = [n for n in NAMES if KIND[n] != "string"]
    items = [(g, a) for g in ("COUNT", "MIN", "MAX") for a in every] + [
        (g, a) for g in ("SUM", "AVG") for a in numeric]
    [res] = c.execute(f"RETRIEVE (FILE = Wide) (A000, "
                      f"{', '.join(f'{g}({a})' for g, a in items)}) BY A000")
    want = []
    for key in ("x", "y"):
        group = [rec for rec in RECORDS if rec["A000"] == key]
        expected: dict[str, Any] = {"A000": key}
        for g, a in items:
            vs = [rec[a] for rec in group if rec[a] is not None]
            expected[f"{g}({a})"] = (
                len(vs) if g == "COUNT" else min(vs) if g == "MIN" else max(vs) if g == "MAX"
                else sum(vs) if g == "SUM" and KIND[a] == "integer"   # exact
                else pytest.approx(sum(vs) / (len(vs) if g == "AVG" else 1)))
        want.append(expected)
    assert sorted(res.records, key=lambda g: g["A000"]) == want


def test_updates_and_deletes_of_a_file_of_256_attributes(cluster_factory) -> None:
    r = loaded(cluster_factory)
    c = r.client
    want = [dict(rec) for rec in RECORDS]
    # A plain attribute (a float: SQLite's product is Python's), nulls staying null.
    c.execute("UPDATE (FILE = Wide) <A005 = A005 * 3>")
    for rec in want:
        rec["A005"] = None if rec["A005"] is None else rec["A005"] * 3
    assert retrieve_all(r) == typed(want)
    # A directory attribute: the records of A001's first range move to the second's
    # clusters, which other records of the same A000 are in already.
    # Stored rows are (rid, cluster_id, A000, A001, …, body).
    before = {row[3]: row[1] for rows in stored(r).values() for row in rows}   # A001 → cid
    c.execute("UPDATE ((FILE = Wide) and (A001 < 100)) <A001 = A001 + 100>")
    for rec in want:
        rec["A001"] += 100 if rec["A001"] < 100 else 0
    assert retrieve_all(r) == typed(want)
    after = [row for rows in stored(r).values() for row in rows]
    clusters: dict[tuple[str, bool], set[int]] = {}
    for row in after:
        clusters.setdefault((row[2], row[3] >= 100), set()).add(row[1])
    assert {key: len(ids) for key, ids in clusters.items()} == {("x", True): 1, ("y", True): 1}
    for row in after:
        if row[3] - 100 in before:                  # a moved record
            assert row[1] != before[row[3] - 100]
    # DELETE of the y records.
    c.execute("DELETE ((FILE = Wide) and (A000 = y))")
    want = [rec for rec in want if rec["A000"] != "y"]
    assert retrieve_all(r) == typed(want)
    # An UPDATE inside a committed transaction with a read of every attribute.
    [_, res] = c.execute("[UPDATE (FILE = Wide) <A006 = 'changed'>; "
                         "RETRIEVE (FILE = Wide) (ALL)]")
    for rec in want:
        rec["A006"] = "changed"
    assert typed(res.records) == typed(want)
    assert retrieve_all(r) == typed(want)


# Every backend deletes, updates in place, moves records and inserts.
WRITES = ("DELETE ((FILE = Wide) and (A000 = y)); "
          "UPDATE (FILE = Wide) <A009 = 'rolled back'>; "
          "UPDATE (FILE = Wide) <A002 = A002 * 3>; "
          "UPDATE (FILE = Wide) <A001 = A001 + 50>; "
          "INSERT (<FILE, Wide>, <A000, x>, <A001, 1>, <A255, ghost>) {ghost}")


def undo_left(r: Running) -> list[int]:
    """Prepared units and undo rows each backend still keeps."""
    out = []
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out.append(sum(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                           for t in ("prepared", "undo")))
    return out


def test_a_failed_unit_gives_every_wide_row_back_exactly(cluster_factory) -> None:
    """The undo log keeps each old row whole: 256 attributes, cluster and body, floats
    to their last digit, restored when the unit aborts."""
    r = loaded(cluster_factory)
    c = r.client
    before = stored(r)
    assert retrieve_all(r) == typed(RECORDS)
    # A004 × 4 overflows only for the BIG record: its backend fails the unit, and the
    # other one undoes whatever it wrote.
    with pytest.raises(ClientError) as err:
        c.execute(f"[{WRITES}; UPDATE (FILE = Wide) <A004 = A004 * 4>]")
    assert err.value.code == "ABORTED" and "out of the range of integer" in str(err.value)
    assert stored(r) == before and undo_left(r) == [0, 0]
    # b1 failing after it prepared (durably, with its undo log) and before its vote: it
    # rolls its writes back from the undo log, whatever b0 did meanwhile.
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1, env={"MBDS_FAULTS": "backend.before_vote=error"})
    retry(c, "RETRIEVE (FILE = Wide) (COUNT(A000))", timeout=30)      # b1 has rejoined
    with pytest.raises(ClientError) as err:
        c.execute(f"[{WRITES}]")
    assert "b1: fault injected at backend.before_vote" in str(err.value)
    assert stored(r) == before and undo_left(r) == [0, 0]
    assert retrieve_all(r) == typed(RECORDS)
    # Without the fault the same writes commit.
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1)
    retry(c, "RETRIEVE (FILE = Wide) (COUNT(A000))", timeout=30)
    c.execute(f"[{WRITES}]")
    want = [dict(rec, A009="rolled back", A001=rec["A001"] + 50,
                 A002=None if rec["A002"] is None else rec["A002"] * 3)
            for rec in RECORDS if rec["A000"] == "x"]
    want.append({"FILE": "WIDE", **dict.fromkeys(NAMES), "A000": "x", "A001": 1,
                 "A255": "ghost", "BODY": "ghost"})
    assert retrieve_all(r) == typed(want)
