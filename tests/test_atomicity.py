"""A writing traffic unit that fails on one backend changes nothing on any backend:
backends prepare, and commit only on PP's decision."""

from __future__ import annotations

import pytest

from mbds.client import ClientError
from tests.conftest import CENSUS_YAML

BIG = 2 ** 62


def test_failure_on_one_backend_rolls_back_everywhere(cluster_factory) -> None:  # noqa: ANN001
    r = cluster_factory(3)
    c = r.client
    c.define(CENSUS_YAML)
    c.execute("[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, 1>)"
                              for i in range(12)) + "]")
    c.execute(f"INSERT (<FILE, Census>, <CITY, big>, <POP, {BIG}>)")
    [res] = c.execute("RETRIEVE (FILE = Census) (POP)")
    holders = [b["backend"] for b in res.stats["backends"] if b["records"]]
    assert len(holders) == 3          # the small records are on every backend
    before = sorted(x["POP"] for x in res.records)
    # POP * 4 overflows 64 bits only for the big record: SQLite makes it a REAL, which
    # the STRICT table refuses, so exactly one backend fails the traffic unit.
    with pytest.raises(ClientError) as err:
        c.execute("UPDATE (FILE = Census) <POP = POP * 4>")
    assert err.value.code == "ABORTED" and "INTEGER" in str(err.value)
    [res] = c.execute("RETRIEVE (FILE = Census) (POP)")
    assert sorted(x["POP"] for x in res.records) == before     # nothing changed anywhere
    # The same in a transaction: the insert before the failing update is undone too.
    with pytest.raises(ClientError):
        c.execute("[INSERT (<FILE, Census>, <CITY, ghost>, <POP, 1>); "
                  "UPDATE (FILE = Census) <POP = POP * 4>]")
    [res] = c.execute("RETRIEVE ((FILE = Census) and (CITY = ghost)) (CITY)")
    assert res.records == []
    # And the system goes on working.
    c.execute("UPDATE ((FILE = Census) and (POP = 1)) <POP = 2>")
    [res] = c.execute("RETRIEVE ((FILE = Census) and (POP = 2)) (COUNT(CITY))")
    assert res.records == [{"COUNT(CITY)": 12}]
