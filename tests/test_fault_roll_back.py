"""The fault point `backend.before_roll_back` (mbds/faults.py): PP's abort has come to a
unit b1 prepared, and b1 crashes, fails or stalls before undoing it. Whichever, the unit
changes no backend: a write of several records that another backend fails, a
definition another backend cannot store, a bulk load batch, a unit whose commit
decision the controller cannot write, a unit in doubt that a restarted controller
resolves (presumed abort). A client told that its unit failed finds it nowhere, in
every backend's file too (b1 crashed: once it is back), acknowledged writes are all
kept, nothing stays prepared, and a controller started afterwards starts. Real
LocalClusters of 3 backends."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import pytest

from mbds.client import ClientError
from mbds.cluster import ProcessFailed
from tests.conftest import CENSUS_YAML, Running
from tests.crashes import retry, wait_for
from tests.test_define_atomic import PARTS
from tests.test_define_atomic import stored as defined
from tests.test_faults import hello, prepared_left

POINT = "backend.before_roll_back"
ACTIONS = ["crash", "error", "stall"]
# Three backends: b1 between a backend that fails the unit and one that does not.
SIZES = [3]

# Acknowledged before any fault: every one must be kept.
KEPT = [f"k{i}" for i in range(3)]
# The unit that fails: three new type-C values, three new clusters, IIG places them on
# the backends with the fewest records, so b1 writes one of them whatever the size.
FAILED = [f"f{i}" for i in range(3)]
LOADED = [f"l{i}" for i in range(12)]     # bulk loaded: new CITY values
ATTRS = ["CITY", "POP", "AREA", "STATE"]     # CENSUS's template order
# The other backend fails its vote, slow to prepare first, so that the abort comes to b1
# once it has prepared its part (sooner, b1 might not have written it yet).
VOTE_FAILS = "backend.before_prepare=stall,backend.before_vote=error"
COUNT = "RETRIEVE ((FILE = Census) and (CITY >= f0) and (CITY <= f9)) (CITY)"


def unit(cities: list[str]) -> str:
    return "[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, '{c}'>, <POP, {i}>)"
                           for i, c in enumerate(cities)) + "]"


def rows(cities: list[str]) -> list[tuple[list[Any], None]]:
    """Bulk load records of CENSUS's attributes, in its template order."""
    return [([c, i, None, "CA"], None) for i, c in enumerate(cities)]


def held(r: Running) -> dict[str, list[str]]:
    """Each backend's census records, by CITY, read from its own SQLite file."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = sorted(c for (c,) in conn.execute('SELECT "CITY" FROM "r_CENSUS"'))
    return out


def anywhere(r: Running) -> list[str]:
    return sorted(c for cities in held(r).values() for c in cities)


def nothing_prepared(r: Running) -> dict[str, int]:
    return dict.fromkeys(prepared_left(r), 0)


def other(n: int) -> int:
    """The backend that fails the unit: b2 of three, b0 of two."""
    return 2 if n == 3 else 0


def rigged(cluster_factory, n: int, action: str, fails: str) -> Running:
    """`n` backends, CENSUS defined and KEPT acknowledged; then b1 restarted with the
    point's `action`, and the unit's failure set up: `backend` (the other backend
    restarted with `fails`, a fault spec) or `decision` (the controller restarted with an
    `error` before it writes its decision)."""
    r = cluster_factory(n)
    r.client.define(CENSUS_YAML)
    r.client.execute(unit(KEPT))
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1, env={"MBDS_FAULTS": f"{POINT}={action}"})
    if fails == "decision":
        assert r.cluster.controller is not None
        r.cluster.controller.stop()
        r.cluster.restart_controller(env={"MBDS_FAULTS": "controller.before_decision=error"})
    else:
        r.cluster.backends[other(n)].kill()
        r.cluster.restart_backend(other(n), env={"MBDS_FAULTS": fails})
    retry(r.client, COUNT, timeout=30)          # every backend has rejoined
    return r


def hit(r: Running, action: str) -> None:
    """b1 passed the point, as `action` does: ended (crash), or said so in its log."""
    b1 = r.cluster.backends[1]
    if action == "crash":
        assert b1.popen.wait(30) == 137, "\n".join(b1.tail)
        return
    said = f"fault injected at {POINT}: stalling" if action == "stall" else \
        f"before its roll-back: fault injected at {POINT}"
    wait_for(lambda: any(said in line for line in b1.tail), 30, f"{said!r} in b1's log")


def undone_on_hearing(r: Running, action: str) -> None:
    """What the client was told failed: with b1 alive (error, stall) it is already
    undone in every file; b1 crashed, b1 undoes it when it comes back (presumed abort)."""
    hit(r, action)
    if action == "crash":
        r.cluster.restart_backend(1)
        retry(r.client, COUNT, timeout=30)      # b1 is back, its unit resolved
    assert prepared_left(r) == nothing_prepared(r)


def settled_again(r: Running) -> None:
    """Every process started again without faults, the controller last: it starts, and
    nothing is in doubt anywhere."""
    for i, b in enumerate(r.cluster.backends):
        b.kill()
        r.cluster.restart_backend(i)
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    retry(r.client, COUNT, timeout=30)
    assert all(not hello(r, i).in_doubt for i in range(len(r.cluster.backends)))
    assert prepared_left(r) == nothing_prepared(r)


def failure_of(fails: str) -> str:
    return "no commit decision" if fails == "decision" else \
        "fault injected at backend.before_vote"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fails", ["backend", "decision"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_write_b1_fails_to_undo_ends_nowhere(cluster_factory, n: int, fails: str,
                                               action: str) -> None:
    """A unit of three records, aborted after b1 prepared its part (another backend
    fails before its vote, or the decision cannot be written): nowhere, the records
    acknowledged before all kept, and the same unit goes through afterwards (b1 holds
    no lock of it)."""
    r = rigged(cluster_factory, n, action,
               VOTE_FAILS if fails == "backend" else fails)
    with pytest.raises(ClientError) as err:
        r.client.execute(unit(FAILED))
    assert err.value.code == "ABORTED" and failure_of(fails) in str(err.value), \
        f"{err.value.code}: {err.value}"
    if action != "crash":            # nowhere when the client hears
        assert anywhere(r) == KEPT
    undone_on_hearing(r, action)
    assert anywhere(r) == KEPT
    settled_again(r)
    assert anywhere(r) == KEPT
    r.client.execute(unit(FAILED))
    assert anywhere(r) == sorted(KEPT + FAILED)
    assert all(held(r).values())      # each backend took part


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("action", ACTIONS)
def test_a_definition_b1_fails_to_undo_is_kept_nowhere(cluster_factory, n: int,
                                                       action: str) -> None:
    """A definition b1 stored and another backend cannot: taken back on b1 whatever
    happens as it is, so no backend keeps it, even after a controller restart (which
    adopts the union of the backends' directories), and it is new when defined again."""
    r = rigged(cluster_factory, n, action, "backend.before_define=error")
    with pytest.raises(ClientError) as err:
        r.client.define(PARTS)
    assert err.value.code == "ABORTED" and "backend.before_define" in str(err.value), \
        f"{err.value.code}: {err.value}"
    nowhere = {f"b{i}": [] for i in range(n)}
    if action != "crash":
        assert defined(r, "PARTS") == nowhere
    undone_on_hearing(r, action)
    assert defined(r, "PARTS") == nowhere
    settled_again(r)
    assert "PARTS" not in r.client.status().files
    assert defined(r, "PARTS") == nowhere
    assert anywhere(r) == KEPT
    assert list(r.client.define(PARTS).files_created) == ["PARTS"]
    r.client.execute("INSERT (<FILE, PARTS>, <NUM, 5>, <NAME, bolt>)")
    [parts] = r.client.execute("RETRIEVE (FILE = PARTS) (NUM, NAME)")
    assert parts.records == [{"NUM": 5, "NAME": "bolt"}]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk", [4], ids=["batches"])
@pytest.mark.parametrize("fails", ["backend", "decision"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_load_batch_b1_fails_to_undo_lands_nowhere(cluster_factory, n: int, chunk: int,
                                                     fails: str, action: str) -> None:
    """A bulk load, one batch or several in flight, each spread over the backends and
    aborted after b1 prepared its share: exactly the records acknowledged are stored
    (none: every batch fails alike), and the load goes through afterwards."""
    r = rigged(cluster_factory, n, action,
               VOTE_FAILS if fails == "backend" else fails)
    acknowledged: list[str] = []
    with pytest.raises(ClientError) as err:
        for done in r.client.load("CENSUS", ATTRS, rows(LOADED), chunk=chunk):
            acknowledged += LOADED[len(acknowledged):][:done.stats.records_retrieved]
    assert err.value.code == "ABORTED" and failure_of(fails) in str(err.value), \
        f"{err.value.code}: {err.value}"
    assert acknowledged == []
    if action != "crash":
        assert anywhere(r) == KEPT
    undone_on_hearing(r, action)
    assert anywhere(r) == KEPT
    settled_again(r)
    assert anywhere(r) == KEPT
    done = list(r.client.load("CENSUS", ATTRS, rows(LOADED), chunk=chunk))
    assert sum(d.stats.records_retrieved for d in done) == len(LOADED)
    assert anywhere(r) == sorted(KEPT + LOADED)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("restarted", [False, True], ids=["prepared-since-start", "on-disk"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_unit_in_doubt_b1_fails_to_undo_at_resolve_ends_nowhere(
        cluster_factory, n: int, restarted: bool, action: str) -> None:
    """The controller crashes before its decision, every backend in doubt; started again
    it resolves the unit (presumed abort), and b1 passes the point as it undoes it — the
    unit waiting in its memory, or (`restarted`: b1 killed meanwhile) found in its file
    at start. The unit ends nowhere, and the controller starts (once b1 is back, if it
    crashed)."""
    r = cluster_factory(n)
    r.client.define(CENSUS_YAML)
    r.client.execute(unit(KEPT))
    fault = {"MBDS_FAULTS": f"{POINT}={action}"}
    if not restarted:
        r.cluster.backends[1].kill()
        r.cluster.restart_backend(1, env=fault)
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller(env={"MBDS_FAULTS": "controller.before_decision=crash"})
    retry(r.client, COUNT, timeout=30)
    with pytest.raises(ClientError) as err:
        r.client.execute(unit(FAILED))
    assert err.value.code == "UNAVAILABLE", f"{err.value.code}: {err.value}"
    assert r.cluster.controller.popen.wait(30) == 137
    if restarted:
        r.cluster.backends[1].kill()
        r.cluster.restart_backend(1, env=fault)
    assert all(len(hello(r, i).in_doubt) == 1 for i in range(n))
    if action == "crash":
        # b1 ends as it undoes the unit the controller's Resolve decided: a backend it
        # cannot admit stops a controller at start, which then starts once b1 is back.
        address = r.cluster.backends[1].address or ""
        with pytest.raises(ProcessFailed, match=f"backend {address} .* unreachable"):
            r.cluster.restart_controller()
        hit(r, action)
        r.cluster.restart_backend(1)
        r.cluster.restart_controller()
    else:
        r.cluster.restart_controller()
        hit(r, action)
    retry(r.client, COUNT, timeout=30)
    assert anywhere(r) == KEPT
    assert prepared_left(r) == nothing_prepared(r)
    settled_again(r)
    assert anywhere(r) == KEPT
    r.client.execute(unit(FAILED))
    assert anywhere(r) == sorted(KEPT + FAILED)
