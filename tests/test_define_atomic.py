"""A definition is all or nothing across the controller and every backend, as a write
is: when one backend cannot store its files, no backend keeps them, the controller does
not adopt them, the client is told which backend failed and why, and the same
definition succeeds once the fault is gone. Real LocalClusters, faults from
mbds/faults.py."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from mbds.client import ClientError
from tests.conftest import CENSUS_YAML, Running, backend_digests
from tests.crashes import retry

PARTS = """
files:
  PARTS:
    attributes: {NUM: integer, NAME: string}
    directory:
      NUM: {type: A, ranges: [[0, 99], [100, 999]]}
    indexes: [NAME]
"""
CENSUS_ANY = "RETRIEVE (FILE = Census) (CITY)"
FAULT = {"MBDS_FAULTS": "backend.before_define=error"}


def stored(r: Running, file: str) -> dict[str, list[str]]:
    """What each backend's SQLite file holds of `file`: its table, directory rows, indexes."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            found = [f"{kind} {name}" for kind, name in conn.execute(
                "SELECT type, name FROM sqlite_master WHERE tbl_name = ?", (f"r_{file}",))]
            found += [f"{n} {t} rows" for t, n in (
                (t, conn.execute(f"SELECT COUNT(*) FROM {t} WHERE {c} = ?", (file,)
                                 ).fetchone()[0])
                for t, c in (("files", "name"), ("descriptors", "file"))) if n]
        out[f"b{i}"] = sorted(found)
    return out


def restart_b1(r: Running, env: dict[str, str] | None = None) -> None:
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1, env=env)
    retry(r.client, CENSUS_ANY, timeout=30)        # b1 has rejoined


def test_a_definition_one_backend_cannot_store_is_kept_nowhere(cluster_factory) -> None:
    r = cluster_factory(3)
    r.client.define(CENSUS_YAML)
    restart_b1(r, FAULT)
    digests = backend_digests(r)

    with pytest.raises(ClientError) as e:
        r.client.define(PARTS)
    assert e.value.code == "ABORTED", e.value
    assert "backend b1" in str(e.value) and "backend.before_define" in str(e.value)

    # No phantom: not listed, refused as unknown, on no backend's disk or directory.
    assert "PARTS" not in r.client.status().files
    with pytest.raises(ClientError, match="unknown file PARTS") as e:
        r.client.execute("RETRIEVE (FILE = PARTS) (NUM)")
    assert stored(r, "PARTS") == {"b0": [], "b1": [], "b2": []}
    assert backend_digests(r) == digests
    assert r.client.status().directory_digest == digests[0]     # the controller's too
    [census] = r.client.execute(CENSUS_ANY)         # the rest goes on as before
    assert census.records == []

    # The fault gone, the same definition is new, everywhere.
    restart_b1(r)
    assert list(r.client.define(PARTS).files_created) == ["PARTS"]
    r.client.execute("INSERT (<FILE, PARTS>, <NUM, 5>, <NAME, bolt>)")
    [parts] = r.client.execute("RETRIEVE (FILE = PARTS) (NUM, NAME)")
    assert parts.records == [{"NUM": 5, "NAME": "bolt"}]
    assert all("table r_PARTS" in s and "index ix_PARTS_a_NAME" in s
               for s in stored(r, "PARTS").values())
    assert len(set(backend_digests(r))) == 1


def test_a_reindexing_one_backend_cannot_store_leaves_the_old_indexes(cluster_factory
                                                                       ) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML + PARTS.replace("files:\n", ""))
    restart_b1(r, FAULT)
    before = stored(r, "PARTS")

    with pytest.raises(ClientError, match="backend b1"):
        r.client.define(PARTS.replace("[NAME]", "[NUM]"))
    assert stored(r, "PARTS") == before
    assert list(r.client.define(PARTS).files_unchanged) == ["PARTS"]   # still [NAME]


NEWF = """
files:
  NEWF:
    attributes: {A: integer, B: string}
    directory:
      A: {type: A, ranges: [[0, 9], [10, 99]]}
"""
NEWF_AGAIN = """
files:
  NEWF:
    attributes: {A: integer, C: float}
    directory:
      A: {type: A, ranges: [[0, 49], [50, 99]]}
"""


def pending(r: Running) -> dict[str, tuple[int, int]]:
    """Each backend's durably pending units (`prepared`) and their files (`defined`)."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = tuple(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                                 for t in ("prepared", "defined"))
    return out


def test_a_definition_a_crashed_backend_had_stored_is_taken_back_when_it_returns(
        cluster_factory) -> None:
    """A backend stores the files durably and crashes before its vote: the client is
    told the definition failed; the backend's file still holds the files, marked
    pending, and when it returns the controller's decision (presumed abort) takes them
    back, so neither it nor the controller restarted after it brings them back."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    restart_b1(r, {"MBDS_FAULTS": "backend.before_define_vote=crash"})

    with pytest.raises(ClientError) as e:
        r.client.define(NEWF)
    assert "definition not applied" in str(e.value) and "backend b1" in str(e.value)
    assert r.cluster.backends[1].popen.wait(30) == 137       # crashed at the point
    assert "table r_NEWF" in stored(r, "NEWF")["b1"]        # stored durably, undecided

    restart_b1(r)
    assert stored(r, "NEWF") == {"b0": [], "b1": []}
    assert pending(r) == {"b0": (0, 0), "b1": (0, 0)}
    r.cluster.controller.kill()
    r.cluster.restart_controller()
    assert "NEWF" not in r.client.status().files
    with pytest.raises(ClientError, match="unknown file NEWF"):
        r.client.execute("RETRIEVE (FILE = NEWF) (A)")
    assert stored(r, "NEWF") == {"b0": [], "b1": []}

    # Defined again, differently: new everywhere.
    assert list(r.client.define(NEWF_AGAIN).files_created) == ["NEWF"]
    r.client.execute("INSERT (<FILE, NEWF>, <A, 1>, <C, 1.5>)")
    [newf] = r.client.execute("RETRIEVE (FILE = NEWF) (A, C)")
    assert newf.records == [{"A": 1, "C": 1.5}]
    assert pending(r) == {"b0": (0, 0), "b1": (0, 0)}
    assert len(set(backend_digests(r))) == 1


def test_an_adopted_definition_survives_backends_stopping_before_they_keep_it(
        cluster_factory) -> None:
    """Every backend stops after PP's commit came and before it forgot the definition's
    marker, and the controller restarts before they return: the decision log holds the
    definition as committed, so each backend keeps the files when it is resolved."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    for i in range(2):
        r.cluster.backends[i].kill()
        r.cluster.restart_backend(i, env={"MBDS_FAULTS": "backend.before_commit=crash"})
    retry(r.client, CENSUS_ANY, timeout=30)

    assert list(r.client.define(NEWF).files_created) == ["NEWF"]
    for i in range(2):
        assert r.cluster.backends[i].popen.wait(30) == 137
    assert pending(r) == {"b0": (1, 1), "b1": (1, 1)}          # stored, undecided here
    r.cluster.controller.kill()
    for i in range(2):
        r.cluster.restart_backend(i)
    r.cluster.restart_controller()

    assert "NEWF" in r.client.status().files
    r.client.execute("INSERT (<FILE, NEWF>, <A, 1>, <B, x>)")
    [newf] = r.client.execute("RETRIEVE (FILE = NEWF) (A, B)")
    assert newf.records == [{"A": 1, "B": "x"}]
    assert pending(r) == {"b0": (0, 0), "b1": (0, 0)}
