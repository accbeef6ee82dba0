"""An `error` (mbds/faults.py) on a backend once PP has decided to commit: the decision is
carried out all the same and PP is told so, as the controller carries out its own
decision whatever fails after it (tests/test_faults.py). Otherwise a unit would stay
prepared on a backend that serves on, listed in doubt at its Hello, and the controller
would keep its decision."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from mbds.client import ClientError
from tests.conftest import CENSUS_YAML, Running
from tests.crashes import retry, wait_for
from tests.test_faults import (
    COUNT,
    EVERYWHERE,
    NOWHERE,
    UNIT,
    hello,
    per_backend,
    prepared_left,
    with_fault_on_b1,
)

# Three more records on three backends, two-phase: its decision is written with the
# drops of the decisions every backend has carried out meanwhile.
NEXT = "[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, 'n{i}'>, <POP, {i}>)"
                       for i in range(3)) + "]"
NEW_FILE = """
files:
  LATER:
    attributes: {K: integer}
    directory:
      K: {type: C}
"""


def decided(r: Running) -> list[tuple[int, str]]:
    """The decisions in the controller's log, read from its file: (seq, waiting)."""
    db = r.cluster.data_dir / "controller" / "decisions.db"
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return sorted(conn.execute("SELECT seq, waiting FROM decisions").fetchall())


def test_an_error_before_a_backend_carries_out_a_commit_still_commits_it(
        cluster_factory) -> None:
    """b1 fails as the commit reaches it: it commits all the same, so a controller
    started again finds nothing in doubt (it would not start: b1 could not be resolved,
    its unit prepared since it started and never carried out)."""
    r = with_fault_on_b1(cluster_factory, "backend.before_commit=error")
    r.client.execute(UNIT)
    assert per_backend(r) == EVERYWHERE          # and b1 released the unit's locks
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    assert per_backend(r) == EVERYWHERE
    assert not hello(r, 1).in_doubt
    assert prepared_left(r) == NOWHERE


def test_an_error_after_a_backend_carried_out_a_commit_still_says_so(
        cluster_factory) -> None:
    """b1 fails once it has committed: it still tells PP, which drops the decision (it
    would keep it until b1's next Hello)."""
    r = with_fault_on_b1(cluster_factory, "backend.after_commit=error")
    r.client.execute(UNIT)
    wait_for(lambda: prepared_left(r) == NOWHERE, 30, "the commit carried out everywhere")
    r.client.execute(NEXT)
    rows = decided(r)
    assert all(seq == max(s for s, _ in rows) for seq, _ in rows), rows
    assert per_backend(r) == EVERYWHERE


def test_an_error_before_a_backend_keeps_a_definition_still_keeps_it(
        cluster_factory) -> None:
    """A definition decided, b1 failing as the commit reaches it: b1 keeps the files and
    says so, and the decision is dropped once written with the next one."""
    r = with_fault_on_b1(cluster_factory, "backend.before_commit=error")
    r.client.define(NEW_FILE)
    r.client.execute("INSERT (<FILE, Later>, <K, 1>)")
    r.client.execute(NEXT)
    rows = decided(r)
    assert all(seq == max(s for s, _ in rows) for seq, _ in rows), rows
    [res] = r.client.execute("RETRIEVE (FILE = Later) (K)")
    assert res.records == [{"K": 1}]
    r.client.execute(COUNT)


def test_an_error_once_a_one_phase_write_is_durable_still_answers_it_stored(
        cluster_factory) -> None:
    """A one-phase write (one backend's) fails once durable on its backend: the client
    is answered as for a stored write, since it is stored (an error would have a load
    say its records were not loaded, and loading them again would store them twice)."""
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.cluster.backends[0].kill()
    r.cluster.restart_backend(0, env={"MBDS_FAULTS": "backend.one_phase_committed=error"})
    retry(r.client, COUNT, timeout=60)
    [done] = r.client.execute("INSERT (<FILE, Census>, <CITY, late>, <POP, 1>)")
    assert done.stats["records_retrieved"] == 1
    [res] = r.client.execute("RETRIEVE ((FILE = Census) and (CITY = late)) (POP)")
    assert res.records == [{"POP": 1}]


def test_a_write_whose_controller_dies_after_deciding_is_said_perhaps_run(
        cluster_factory) -> None:
    """The controller crashes once its commit is written, the session breaking under the
    client: the client is told the write may or may not have run, not only that the
    stream broke, since it was committed (run again, it would be stored twice)."""
    r = cluster_factory(3)
    r.client.define(CENSUS_YAML)
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller(env={"MBDS_FAULTS": "controller.after_decision=crash"})
    with pytest.raises(ClientError) as err:
        r.client.execute(UNIT)
    assert err.value.code == "UNAVAILABLE"
    assert "the session to the controller broke before the request was answered: it may " \
           "or may not have run (" in str(err.value), str(err.value)
    r.cluster.controller.popen.wait(30)
    r.cluster.restart_controller()
    assert per_backend(r) == EVERYWHERE


def test_a_unit_with_no_commit_decision_is_rolled_back_everywhere_before_the_client_hears(
        cluster_factory) -> None:
    """Every vote in, the decision cannot be written (an `error` at
    `controller.before_decision`), and b1 is slow to undo its part (a stall as the
    abort reaches it): the client is told the unit failed only once b1 has rolled it
    back, so nothing of it is left in any backend's file when the client hears."""
    r = with_fault_on_b1(cluster_factory, "backend.before_roll_back=stall")
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller(env={"MBDS_FAULTS": "controller.before_decision=error"})
    retry(r.client, COUNT, timeout=30)
    with pytest.raises(ClientError) as err:
        r.client.execute(UNIT)
    assert err.value.code == "ABORTED" and "no commit decision" in str(err.value), \
        f"{err.value.code}: {err.value}"
    assert prepared_left(r) == NOWHERE
    assert per_backend(r) == NOWHERE
