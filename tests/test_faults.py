"""Faults at named points of the commit protocol (mbds/faults.py): a writing unit changes
every backend or none whichever process crashes at whichever step, a client told that
its unit failed finds it nowhere, and an acknowledged one is everywhere once every
process is back. A backend restarted with a prepared unit opens no bus until the
controller has resolved it."""

from __future__ import annotations

import shutil
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from mbds import faults
from mbds.client import Client, ClientError
from mbds.cluster import ProcessFailed
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from tests.conftest import CENSUS_YAML, Running, backend_digests, internal_channel
from tests.crashes import retry

# Three new type-C values: three new clusters, IIG puts their first records on three
# different backends, so every backend takes part in the unit.
UNIT = "[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, 'f{i}'>, <POP, {i}>)"
                       for i in range(3)) + "]"
COUNT = "RETRIEVE ((FILE = Census) and (CITY >= f0) and (CITY <= f9)) (CITY)"
NOWHERE = {"b0": 0, "b1": 0, "b2": 0}
EVERYWHERE = {"b0": 1, "b1": 1, "b2": 1}


def per_backend(r: Running) -> dict[str, int]:
    [res] = retry(r.client, COUNT, timeout=30)
    return {b["backend"]: b["records"] for b in res.stats["backends"]}


def prepared_left(r: Running) -> dict[str, int]:
    """Prepared units and undo rows still kept in each backend's file."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db: Path = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = sum(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                               for t in ("prepared", "undo"))
    return out


def hello(r: Running, i: int) -> pb.HelloReply:
    with internal_channel(r.cluster, r.cluster.backends[i].address or "") as ch:
        return rpc.BackendStub(ch).Hello(pb.HelloRequest(), timeout=10)


def with_fault_on_b1(cluster_factory, spec: str) -> Running:
    r = cluster_factory(3)
    r.client.define(CENSUS_YAML)
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1, env={"MBDS_FAULTS": spec})
    retry(r.client, COUNT, timeout=30)          # b1 has rejoined
    return r


def crash_b1_and_restart(r: Running) -> None:
    r.cluster.backends[1].popen.wait(30)         # it crashed at the point
    r.cluster.restart_backend(1)


@pytest.mark.parametrize("point", ["backend.before_prepare", "backend.before_vote"])
def test_a_backend_crashing_before_its_vote_leaves_the_unit_nowhere(cluster_factory,
                                                                     point: str) -> None:
    """Before its writes are durable, or prepared but before it voted: either way PP
    aborts, and the restarted backend undoes what it had prepared."""
    r = with_fault_on_b1(cluster_factory, f"{point}=crash")
    with pytest.raises(ClientError) as err:
        r.client.execute(UNIT)
    assert "b1" in str(err.value)
    crash_b1_and_restart(r)
    assert per_backend(r) == NOWHERE
    assert prepared_left(r) == NOWHERE
    # The same unit goes through now, placed as if the failed one had never been.
    r.client.execute(UNIT)
    assert per_backend(r) == EVERYWHERE


@pytest.mark.parametrize("point", ["backend.before_prepare", "backend.before_vote"])
def test_a_backend_failing_before_its_vote_aborts_the_unit_everywhere(cluster_factory,
                                                                      point: str) -> None:
    r = with_fault_on_b1(cluster_factory, f"{point}=error")
    with pytest.raises(ClientError) as err:
        r.client.execute(UNIT)
    assert f"fault injected at {point}" in str(err.value)
    assert per_backend(r) == NOWHERE
    assert prepared_left(r) == NOWHERE


def test_a_backend_crashing_after_its_vote_ends_all_or_nothing(cluster_factory) -> None:
    """Its vote may or may not have reached PP before its bus broke: the answer says
    which, and the unit is everywhere or nowhere accordingly."""
    r = with_fault_on_b1(cluster_factory, "backend.after_vote=crash")
    try:
        r.client.execute(UNIT)
        acked = True
    except ClientError:
        acked = False
    crash_b1_and_restart(r)
    assert per_backend(r) == (EVERYWHERE if acked else NOWHERE)
    assert prepared_left(r) == NOWHERE


@pytest.mark.parametrize("point", ["backend.before_commit", "backend.after_commit"])
def test_a_backend_crashing_after_the_decision_commits_on_its_return(cluster_factory,
                                                                      point: str) -> None:
    """The decision was on disk before any Commit went out: the client is told the unit
    committed, and the crashed backend commits its part when it comes back."""
    r = with_fault_on_b1(cluster_factory, f"{point}=crash")
    r.client.execute(UNIT)
    crash_b1_and_restart(r)
    assert per_backend(r) == EVERYWHERE
    assert prepared_left(r) == NOWHERE


def controller_crash(cluster_factory, point: str) -> Running:
    """The controller restarted with a fault at `point`; the unit sent; the controller
    crashed there and is started again."""
    r = cluster_factory(3)
    r.client.define(CENSUS_YAML)
    r.cluster.controller.kill()
    r.cluster.restart_controller(env={"MBDS_FAULTS": f"{point}=crash"})
    with pytest.raises(ClientError) as err:     # the answer never comes: outcome unknown
        r.client.execute(UNIT)
    assert err.value.code == "UNAVAILABLE"
    assert r.cluster.controller.popen.wait(30) == 137
    return r


def test_a_controller_crashing_before_its_decision_leaves_the_unit_nowhere(cluster_factory
                                                                           ) -> None:
    r = controller_crash(cluster_factory, "controller.before_decision")
    # Every backend prepared the unit and waits, in doubt, with the unit's locks held.
    assert all(len(hello(r, i).in_doubt) == 1 for i in range(3))
    r.cluster.restart_controller()
    assert per_backend(r) == NOWHERE             # presumed abort
    assert prepared_left(r) == NOWHERE


@pytest.mark.parametrize("point", ["controller.after_decision", "controller.mid_commit"])
def test_a_controller_crashing_after_its_decision_commits_the_unit_on_its_return(
        cluster_factory, point: str) -> None:
    r = controller_crash(cluster_factory, point)
    r.cluster.restart_controller()
    assert per_backend(r) == EVERYWHERE          # the decision log had it
    assert prepared_left(r) == NOWHERE


@pytest.mark.parametrize("point", ["controller.after_decision", "controller.mid_commit"])
def test_an_error_after_the_decision_still_commits_the_unit_everywhere(cluster_factory,
                                                                        point: str) -> None:
    """Anything that fails once the decision is on disk (the point's `error`: before the
    first Commit, or after it) is logged, and Commit still goes to every backend: the
    client is told the unit committed, it is everywhere, and no backend holds its locks
    (the next request is answered)."""
    r = cluster_factory(3)
    r.client.define(CENSUS_YAML)
    r.cluster.controller.kill()
    r.cluster.restart_controller(env={"MBDS_FAULTS": f"{point}=error"})
    r.client.execute(UNIT)
    [res] = r.client.execute("RETRIEVE (FILE = Census) (COUNT(CITY))")
    assert res.records[0]["COUNT(CITY)"] > 0
    assert per_backend(r) == EVERYWHERE
    assert prepared_left(r) == NOWHERE
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    assert any("after the commit decision of traffic unit" in line and point in line
               for line in r.cluster.controller.tail), r.cluster.controller.tail


def test_a_restarted_backend_serves_nothing_before_its_units_are_resolved(cluster_factory
                                                                          ) -> None:
    """Controller and a backend both down after the decision: the backend, stopped while
    in doubt, exits at once and decides nothing on its own; it comes back alone, lists
    its in-doubt unit and refuses a bus; the controller resolves it."""
    r = controller_crash(cluster_factory, "controller.after_decision")
    r.cluster.backends[1].signal(signal.SIGTERM)
    assert r.cluster.backends[1].popen.wait(30) == 0      # stopped, not killed at the end
    r.cluster.restart_backend(1)
    [unit] = hello(r, 1).in_doubt
    with internal_channel(r.cluster, r.cluster.backends[1].address or "") as ch:
        with pytest.raises(grpc.RpcError) as err:
            next(iter(rpc.BackendStub(ch).Bus(iter([pb.BusBatch()]), timeout=10)))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "prepared units to resolve first" in (err.value.details() or "")
    r.cluster.restart_controller()
    assert per_backend(r) == EVERYWHERE
    assert not hello(r, 1).in_doubt
    assert prepared_left(r) == NOWHERE


def test_a_controller_on_a_new_data_dir_leaves_a_unit_it_never_logged_in_doubt(
        cluster_factory) -> None:
    """The unit is acknowledged (its decision logged), b1 dies before it commits, and the
    controller comes back on an empty --data-dir: that log never began the unit's epoch,
    so it cannot presume the unit aborted. b1 keeps it prepared and the controller does
    not start, naming the unit and its log; on its own data dir again, it commits the
    unit on b1 too."""
    r = with_fault_on_b1(cluster_factory, "backend.before_commit=crash")
    r.client.execute(UNIT)
    r.cluster.backends[1].popen.wait(30)         # it crashed at the point, in doubt
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    kept = r.cluster.data_dir / "controller.kept"
    (r.cluster.data_dir / "controller").rename(kept)
    r.cluster.restart_backend(1)
    [unit] = hello(r, 1).in_doubt
    port = int(r.cluster.address.rsplit(":", 1)[1])
    with pytest.raises(ProcessFailed) as err:
        r.cluster.start_controller(port)
    log = r.cluster.data_dir / "controller" / "decisions.db"
    assert (f"backend b1 holds in-doubt unit (epoch {unit.epoch}, seq {unit.seq}) that "
            f"this controller's decision log ({log}) does not cover (its --data-dir is "
            "new or was replaced): its outcome is unknown here; start the controller on "
            "the --data-dir that made it") in str(err.value)
    # Neither half applied nor aborted: b0 and b2 hold their records, b1 keeps its part
    # prepared (its undo rows, its locks) and still waits for the decision.
    assert [u.seq for u in hello(r, 1).in_doubt] == [unit.seq]
    assert prepared_left(r)["b1"] > 0
    assert stored(r) == EVERYWHERE
    shutil.rmtree(r.cluster.data_dir / "controller")
    kept.rename(r.cluster.data_dir / "controller")
    r.cluster.restart_controller()
    assert per_backend(r) == EVERYWHERE          # the log that made it had the decision
    assert prepared_left(r) == NOWHERE


def test_a_controller_on_an_older_copy_of_its_log_leaves_a_unit_it_decided_in_doubt(
        cluster_factory) -> None:
    """The controller's --data-dir is copied while it runs; then a unit is acknowledged
    (its decision logged), b0 and b2 commit it, and b1 dies before it does. Restored
    from the copy, the log began the unit's epoch but never decided the unit: presuming
    it aborted would roll b1's part back under the others' committed ones. b0's hello
    tells the log is older than its commits: the controller does not start, and b1
    keeps the unit prepared; on its latest data dir the unit commits on b1 too."""
    r = with_fault_on_b1(cluster_factory, "backend.before_commit=crash")
    older = r.cluster.data_dir / "controller.older"
    older.mkdir()
    db = r.cluster.data_dir / "controller" / "decisions.db"
    with closing(sqlite3.connect(db)) as src, closing(sqlite3.connect(older / db.name)) as dst:
        src.backup(dst)                          # a consistent copy of the live log
    for f in (r.cluster.data_dir / "controller").iterdir():
        if not f.name.startswith("decisions.db"):
            shutil.copy2(f, older / f.name)
    r.client.execute(UNIT)
    r.cluster.backends[1].popen.wait(30)         # it crashed at the point, in doubt
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    latest = r.cluster.data_dir / "controller.latest"
    (r.cluster.data_dir / "controller").rename(latest)
    older.rename(r.cluster.data_dir / "controller")
    r.cluster.restart_backend(1)
    [unit] = hello(r, 1).in_doubt
    port = int(r.cluster.address.rsplit(":", 1)[1])
    with pytest.raises(ProcessFailed) as err:
        r.cluster.start_controller(port)
    assert (f"backend b1 holds in-doubt unit (epoch {unit.epoch}, seq {unit.seq}) that "
            f"this controller's decision log ({db}) cannot tell the outcome of: backend "
            f"b") in str(err.value)
    assert (f"has carried out the commit of seq {unit.seq} of that epoch, which this log "
            "never decided") in str(err.value)
    assert [u.seq for u in hello(r, 1).in_doubt] == [unit.seq]
    assert prepared_left(r)["b1"] > 0
    assert stored(r) == EVERYWHERE
    shutil.rmtree(r.cluster.data_dir / "controller")
    latest.rename(r.cluster.data_dir / "controller")
    r.cluster.restart_controller()
    assert per_backend(r) == EVERYWHERE
    assert prepared_left(r) == NOWHERE


def stored(r: Running) -> dict[str, int]:
    """The unit's records in each backend's file, committed or prepared."""
    out = {}
    for i in range(len(r.cluster.backends)):
        db: Path = r.cluster.data_dir / f"b{i}" / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[f"b{i}"] = conn.execute('SELECT COUNT(*) FROM "r_CENSUS" WHERE "CITY" '
                                        "BETWEEN 'f0' AND 'f9'").fetchone()[0]
    return out


def test_a_fault_spec_names_what_is_wrong() -> None:
    assert faults.parse("backend.after_vote=crash, controller.mid_commit=error") == {
        "backend.after_vote": "crash", "controller.mid_commit": "error"}
    with pytest.raises(ValueError, match="'backend.nowhere=crash'"):
        faults.parse("backend.nowhere=crash")
    with pytest.raises(ValueError, match="'backend.after_vote=explode'"):
        faults.parse("backend.after_vote=explode")


def test_a_backend_a_directory_push_fails_gets_the_entries_with_the_next_unit(
        cluster_factory) -> None:
    """An UPDATE moving a record to a new type-C value makes IIG allocate a descriptor and
    a cluster, pushed to the other backends outside bus order. Every backend but the
    mover fails that push here: the next traffic unit must bring them the entries."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Mover>, <POP, 10>, <STATE, CA>)")
    for i in (0, 1):
        r.cluster.backends[i].kill()
        r.cluster.restart_backend(i, env={"MBDS_FAULTS": "backend.apply_directory=error"})
    retry(r.client, COUNT, timeout=30)              # both have rejoined
    r.client.execute("UPDATE ((FILE = Census) and (CITY = Mover)) <CITY = 'Brand New Town'>")
    [moved] = r.client.execute(
        "RETRIEVE ((FILE = Census) and (CITY = 'Brand New Town')) (CITY, POP)")
    assert moved.records == [{"CITY": "Brand New Town", "POP": 10}]
    assert moved.stats["clusters_examined"] == 1
    assert len(set(backend_digests(r))) == 1
    assert backend_digests(r)[0] == r.client.status().directory_digest


def test_a_unit_past_its_deadline_names_the_backends_that_did_not_answer(
        cluster_factory) -> None:
    """b1 stops (SIGSTOP) and never answers; b0 answers a unit it alone searches. The
    unit fails at its deadline as DEADLINE_EXCEEDED naming b1 only (not b0, which
    answered, nor "unreachable": b1's bus is up), and once b1 runs again so do units."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    b1 = r.cluster.backends[1]
    b1.signal(signal.SIGSTOP)
    try:
        with Client(r.cluster.address, timeout=3) as c, pytest.raises(ClientError) as err:
            c.execute("RETRIEVE (FILE = Census) (CITY)")
    finally:
        b1.signal(signal.SIGCONT)
    assert err.value.code == "DEADLINE_EXCEEDED"
    assert str(err.value) == ("traffic unit aborted: no answer within the 3 s deadline "
                              f"from backend b1 ({b1.address})")
    retry(r.client, "RETRIEVE (FILE = Census) (COUNT(CITY))", timeout=30)


def test_a_one_phase_unit_its_abort_came_too_late_for_is_not_told_as_failed(
        cluster_factory) -> None:
    """A one-phase unit (one backend) made durable, then its backend stalls before it
    says so, past the unit's deadline and the abort's grace: the client is not told
    that its unit failed, as if it were nowhere, but that its writes may be stored; they
    are, once the backend goes on."""
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.cluster.backends[0].kill()
    r.cluster.restart_backend(0, env={"MBDS_FAULTS": "backend.one_phase_committed=stall"})
    retry(r.client, COUNT, timeout=60)          # back (a read does not pass the point)
    with Client(r.cluster.address, timeout=0.5) as c, pytest.raises(ClientError) as err:
        c.execute("INSERT (<FILE, Census>, <CITY, late>, <POP, 1>)")
    assert err.value.code == "DEADLINE_EXCEEDED"
    assert str(err.value).endswith(
        "; backend b0, which writes it in one phase, has not answered the abort: its "
        "writes may have been stored")
    [res] = retry(r.client, "RETRIEVE ((FILE = Census) and (CITY = late)) (POP)", timeout=60)
    assert res.records == [{"POP": 1}]
    assert faults.STALL_S > 0.5 + 1.0           # the deadline, then the abort's grace
