"""LocalCluster, the embedded default's process manager: a failed start leaves nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mbds import cluster as local_cluster
from mbds.client import Client
from mbds.cluster import LocalCluster, Proc, ProcessFailed
from tests.lines import OutputLines


def _processes_using(path: Path) -> list[int]:
    """Pids whose command line names `path` (the backends' data directories)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(path).encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue          # the process ended meanwhile
    return pids


def _mbds_descendants(pid: int) -> list[psutil.Process]:
    """Every `python -m mbds …` process below `pid`: backends and controllers alike
    (a controller's command line names no data directory)."""
    out = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if "mbds" in p.cmdline():
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_stop_ends_the_controller_and_every_backend(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 2)
    cluster.start()
    try:
        procs = _mbds_descendants(os.getpid())
        names = sorted(p.cmdline()[p.cmdline().index("mbds") + 1] for p in procs)
        assert names == ["backend", "backend", "controller"]
    finally:
        cluster.stop()
    assert _alive(procs) == []


def test_the_services_run_the_code_that_started_them(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Started from a directory that holds another `mbds` (an older checkout, say), the
    services still run this one, as the command that starts them does."""
    impostor = tmp_path / "elsewhere" / "mbds"
    impostor.mkdir(parents=True)
    (impostor / "__init__.py").write_text("")
    (impostor / "__main__.py").write_text("raise SystemExit('the mbds of the directory ran')\n")
    monkeypatch.chdir(impostor.parent)
    cluster = LocalCluster(tmp_path / "data", 1)
    cluster.start()
    try:
        with Client(cluster.address, ca=cluster.ca) as client:
            assert [b.name for b in client.status().backends] == ["b0"]
    finally:
        cluster.stop()


def test_an_installed_package_is_not_put_before_the_standard_library(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From a checkout the services get its root first on PYTHONPATH; from
    site-packages nothing is added (it would go ahead of the standard library)."""
    root = str(Path(local_cluster.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert local_cluster._same_code() == {"PYTHONPATH": root + os.pathsep + "/elsewhere"}
    monkeypatch.setattr(local_cluster.site, "getsitepackages", lambda: [root])
    assert local_cluster._same_code() == {}


def _taken_port_after_a_free_one() -> socket.socket:
    """A socket listening on a loopback port P whose neighbour P - 1 is free just now:
    Linux gives outgoing connections ports of P - 1's parity first, and one holding
    P - 1 would stop b0 instead of b1."""
    for _ in range(100):
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", taken.getsockname()[1] - 1))
                return taken
            except OSError:
                taken.close()
    raise AssertionError("no loopback port with a free port below it")


def test_a_backend_that_fails_to_start_takes_the_started_ones_down(tmp_path: Path) -> None:
    """Backend b1 cannot serve /metrics (its port is taken): start() fails with a named
    error, and b0, already running, is stopped too instead of being left behind."""
    with _taken_port_after_a_free_one() as taken:
        port = taken.getsockname()[1]
        # Controller on port - 2, b0 on port - 1, b1 on port: only b1's is taken (the
        # controller is never started, b1 failing first).
        cluster = LocalCluster(tmp_path, 2, metrics_port=port - 2)
        with pytest.raises(ProcessFailed, match="backend b1"):
            cluster.start()
    assert [p.name for p in cluster.backends] == ["backend b0"]
    assert cluster.backends[0].popen.poll() is not None
    assert _processes_using(tmp_path) == []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 128 + signal.SIGTERM),
                                              (signal.SIGINT, 1)])     # click: "Aborted!"
def test_a_benchmark_stopped_by_a_signal_stops_its_clusters(tmp_path: Path, signum: int,
                                                            code: int) -> None:
    """`mbds bench` owns clusters of child processes: SIGTERM (a stopped job, `timeout`)
    or Ctrl-C, arriving while it waits on a reply, stops its clusters with it instead of
    leaving them running (or hanging on a lock the signal broke: cli/supervise.py)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mbds", "bench", "paper", "--backends", "1,2", "--scale", "2",
         "--runs", "500", "--timing", "off", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)})   # the clusters' data dirs go here
    lines = OutputLines(proc).until("loaded 3 configurations", 120)   # every one up, loaded
    assert any("loaded 3 configurations" in x for x in lines), lines
    assert _processes_using(tmp_path), "the benchmark's clusters never started"
    children = _mbds_descendants(proc.pid)     # controllers too, not only backends
    assert any("controller" in p.cmdline() for p in children)
    proc.send_signal(signum)
    assert proc.wait(60) == code
    assert _processes_using(tmp_path) == [] and _alive(children) == []


def test_an_interrupted_start_stops_the_backend_being_started(tmp_path: Path,
                                                              monkeypatch) -> None:
    """SIGTERM or Ctrl-C while a backend is starting (here: just as b1 reports ready)
    interrupts start(); b1, not yet in the cluster's list, is stopped with b0."""
    original = Proc.wait_ready

    def interrupted(self: Proc, timeout: float) -> str:
        address = original(self, timeout)
        if self.name == "backend b1":
            raise KeyboardInterrupt
        return address

    monkeypatch.setattr(Proc, "wait_ready", interrupted)
    cluster = LocalCluster(tmp_path, 2)
    with pytest.raises(KeyboardInterrupt):
        cluster.start()
    assert _processes_using(tmp_path) == []


def test_a_signal_right_after_a_backend_is_spawned_does_not_leave_it_running(
        tmp_path: Path, monkeypatch) -> None:
    """SIGTERM under a handler that raises (as `mbds up`'s does while starting) arriving
    just after a backend's fork, before the cluster has recorded it, waits until it is
    recorded: the start unwinds and the backend is stopped with the rest."""
    original = Proc.__init__
    sent = []

    def spawn_then_signal(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        if self.name == "backend b1" and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)    # before start_backend gets `self`

    def exit_on_sigterm(signum: int, _frame: object) -> None:
        sys.exit(128 + signum)

    monkeypatch.setattr(Proc, "__init__", spawn_then_signal)
    previous = signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        cluster = LocalCluster(tmp_path, 2)
        with pytest.raises(SystemExit):
            cluster.start()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sent and _processes_using(tmp_path) == []
