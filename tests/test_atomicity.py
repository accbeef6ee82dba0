"""A writing traffic unit that fails on one backend changes nothing on any backend:
backends prepare, and commit only on PP's decision."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from mbds.client import ClientError
from tests.conftest import CENSUS_YAML, Running

BIG = 2 ** 62


def contents(r: Running) -> dict[str, list[tuple]]:
    """Every backend's records (rid, cluster, CITY, POP), read from its own SQLite file."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = conn.execute(
                'SELECT rid, cluster_id, "CITY", "POP" FROM "r_CENSUS" ORDER BY rid').fetchall()
    return out


def test_failure_on_one_backend_rolls_back_everywhere(cluster_factory) -> None:
    r = cluster_factory(3)
    c = r.client
    c.define(CENSUS_YAML)
    c.execute("[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, 1>)"
                              for i in range(12)) + "]")
    c.execute(f"INSERT (<FILE, Census>, <CITY, big>, <POP, {BIG}>)")
    before = contents(r)
    # The small records are on every backend (four each), the big one on one of them.
    assert sorted(len(recs) for recs in before.values()) == [4, 4, 5]
    [holder] = [b for b, recs in before.items() if any(x[3] == BIG for x in recs)]
    [res] = c.execute(f"RETRIEVE ((FILE = Census) and (POP = {BIG})) (CITY)")
    assert [b["backend"] for b in res.stats["backends"] if b["records"]] == [holder]
    # POP * 4 overflows 64 bits only for the big record: SQLite makes it a REAL, which
    # RECP refuses, so exactly one backend fails the traffic unit, while the other two
    # have updated their records and prepared.
    with pytest.raises(ClientError) as err:
        c.execute("UPDATE (FILE = Census) <POP = POP * 4>")
    assert err.value.code == "ABORTED" and "out of the range of integer" in str(err.value)
    assert f"backend {holder}:" in str(err.value)
    assert contents(r) == before                  # nothing changed on any backend
    # The same in a transaction: the insert before the failing update is undone too
    # (IIG puts it on a backend that did not fail: the fewest records overall).
    with pytest.raises(ClientError) as err:
        c.execute("[INSERT (<FILE, Census>, <CITY, ghost>, <POP, 1>); "
                  "UPDATE (FILE = Census) <POP = POP * 4>]")
    assert err.value.code == "ABORTED" and f"backend {holder}:" in str(err.value)
    assert contents(r) == before
    [res] = c.execute("RETRIEVE ((FILE = Census) and (CITY = ghost)) (CITY)")
    assert res.records == []
    # And the system goes on working: the same update without the big record commits.
    c.execute("UPDATE ((FILE = Census) and (POP = 1)) <POP = POP * 4>")
    after = contents(r)
    assert after == {b: [(*x[:3], 4 if x[3] == 1 else x[3]) for x in recs]
                     for b, recs in before.items()}
    [res] = c.execute("RETRIEVE ((FILE = Census) and (POP = 4)) (COUNT(CITY))")
    assert res.records == [{"COUNT(CITY)": 12}]


def test_a_rolled_back_unit_gives_every_float_back_exactly(cluster_factory) -> None:
    """The undo log keeps a row as SQLite encodes it to JSON: a float's 17 significant
    digits must survive it, or an aborted DELETE would bring a record back changed."""
    r = cluster_factory(2)
    c = r.client
    c.define(CENSUS_YAML)
    c.execute(f"[INSERT (<FILE, Census>, <CITY, x>, <POP, 1>, <AREA, 0.30000000000000004>); "
              f"INSERT (<FILE, Census>, <CITY, y>, <POP, {BIG}>)]")
    with pytest.raises(ClientError) as err:      # POP + 4 overflows: the unit aborts
        c.execute("[DELETE ((FILE = Census) and (CITY = x)); "
                  "UPDATE ((FILE = Census) and (CITY = y)) <POP = POP * 4>]")
    assert err.value.code == "ABORTED"
    [res] = c.execute("RETRIEVE ((FILE = Census) and (AREA = 0.30000000000000004)) (CITY, AREA)")
    assert res.records == [{"CITY": "x", "AREA": 0.30000000000000004}]
