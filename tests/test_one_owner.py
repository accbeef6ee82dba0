"""One process per data directory and per port: a second backend or controller started
on a directory or an address that a running one holds stops at once with an error that
names what is taken (and by which process), and the running cluster goes on unchanged.
gRPC would otherwise let two servers share a port (SO_REUSEPORT), each with its own
directory, so that clients reached one or the other at random."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mbds.cluster import ProcessFailed
from mbds.dirlock import hold, try_hold
from tests.conftest import CENSUS_YAML, Running

ROWS = "[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>, <STATE, CA>)"
                       for i in range(6)) + "]"


def _mbds(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mbds", *args], capture_output=True,
                          text=True, timeout=60)


def _cities(r: Running) -> list[str]:
    [res] = r.client.execute("RETRIEVE (FILE = Census) (CITY)")
    return sorted(rec["CITY"] for rec in res.records)


def test_a_second_process_on_a_held_directory_or_port_stops_and_changes_nothing(
        cluster_factory, tmp_path: Path) -> None:
    r: Running = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute(ROWS)
    before = _cities(r)
    cluster = r.cluster
    assert cluster.controller is not None
    b0 = cluster.backends[0]
    b0_dir = cluster.data_dir / "b0"
    tls = ["--tls-dir", str(cluster.tls_dir)] if cluster.tls_dir else []

    p = _mbds("backend", "--data-dir", str(b0_dir), "--listen", "127.0.0.1:0", *tls)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"the backend's data directory {b0_dir.resolve()} is in use by another " \
           f"process (process {b0.popen.pid})" in p.stderr, p.stderr

    p = _mbds("backend", "--data-dir", str(tmp_path / "other"), "--listen", b0.address or "",
              *tls)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"the backend cannot listen on {b0.address}: the port is in use" in p.stderr

    backends = ",".join(b.address or "" for b in cluster.backends)
    p = _mbds("controller", "--backends", backends, "--data-dir",
              str(cluster.data_dir / "controller"), "--listen", "127.0.0.1:0", *tls,
              "--client-plaintext")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "the controller's data directory" in p.stderr and "is in use by another " \
           f"process (process {cluster.controller.popen.pid})" in p.stderr, p.stderr

    p = _mbds("controller", "--backends", backends, "--data-dir", str(tmp_path / "c2"),
              "--listen", cluster.address, *tls, "--client-plaintext")
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"the controller's client port cannot listen on {cluster.address}: the port is " \
           "in use" in p.stderr, p.stderr

    # Every client still reaches the one controller, which still has both backends.
    for _ in range(8):
        assert _cities(r) == before
    r.client.execute("INSERT (<FILE, Census>, <CITY, 'late'>, <POP, 7>, <STATE, NY>)")
    assert _cities(r) == sorted([*before, "late"])


def test_a_directory_is_held_once_per_process_and_freed_with_it(tmp_path: Path) -> None:
    d = tmp_path / "b0"
    hold(d, "the backend's")
    assert try_hold(d)                                 # this process holds it already
    claim = ("import sys; from pathlib import Path; from backend.slots import claim_slot; "
             "from mbds.dirlock import hold, DirInUse\n"
             "print(claim_slot(Path(sys.argv[1])).name)\n"
             "try:\n    hold(Path(sys.argv[1]) / 'b0', 'the backend\\'s')\n"
             "except DirInUse as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", claim, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    assert out[0] == "b1"                              # b0 is taken: the next free slot
    assert "is in use by another process" in out[1], out


HOLDING = ("import sys; from pathlib import Path; from backend.slots import claim_slot\n"
           "print(claim_slot(Path(sys.argv[1]), host=sys.argv[2]).name, flush=True)\n"
           "sys.stdin.read()")


def test_replicas_restarted_together_take_back_their_own_slots(tmp_path: Path) -> None:
    """Two replicas (two host names) hold b0 and b1; restarted in the other order, each
    takes back its own slot, not the first free one; a new host takes a free one."""
    def start(host: str) -> tuple[subprocess.Popen, str]:
        p = subprocess.Popen([sys.executable, "-c", HOLDING, str(tmp_path), host],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        return p, p.stdout.readline().strip()

    def stop(*ps: subprocess.Popen) -> None:
        for p in ps:
            p.communicate("", timeout=60)

    (a, slot_a), (b, slot_b) = start("host-a"), start("host-b")
    assert (slot_a, slot_b) == ("b0", "b1")
    stop(a, b)
    (b, slot_b), (a, slot_a) = start("host-b"), start("host-a")
    assert (slot_a, slot_b) == ("b0", "b1")
    stop(b)
    c, slot_c = start("host-c")                       # a re-created container: a new host
    assert slot_c == "b1"
    stop(a, c)


def test_a_local_cluster_restarts_only_a_process_that_has_ended(cluster_factory) -> None:
    r: Running = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.client.execute(ROWS)
    running = r.cluster.backends[0]
    with pytest.raises(ProcessFailed, match="backend b0 is still running"):
        r.cluster.restart_backend(0)
    with pytest.raises(ProcessFailed, match="controller is still running"):
        r.cluster.restart_controller()
    assert r.cluster.backends[0] is running and running.popen.poll() is None
    # A second backend on b0's directory fails at once, and says how it ended.
    with pytest.raises(ProcessFailed, match=r"(?s)backend b0 exited with code 1:.*b0 is "
                                            r"in use by another process"):
        r.cluster.start_backend(0)
    running.stop()
    r.cluster.restart_backend(0)
    assert len(_cities(r)) == 6
