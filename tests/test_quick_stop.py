"""Stopping promptly: an idle `mbds up` and every process of it are gone soon after
SIGTERM or Ctrl-C, a backend stopped alone does not wait out a grace period, and a busy
cluster stops only after its current answers are out."""

from __future__ import annotations

import itertools
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadgen import paper_db as P
from mbds.client import Client, collect
from mbds.cluster import LocalCluster
from tests.lines import OutputLines

# The goal is 2 s; an idle stop takes a fraction of that (docs/stopping.md). 3 s leaves
# room for a loaded CI machine and still fails anything that waits out a timeout: the
# servers' grace period is 5 s.
STOP_BOUND_S = 3.0


class Up:
    """`mbds up --backends N` in a session of its own, as a terminal runs it."""

    def __init__(self, data: Path, n: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mbds", "up", "--backends", str(n), "--port", "0",
             "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        self.lines = OutputLines(self.proc)
        out = self.lines.until("ready", 90)
        found = [m.group(1) for line in out if (m := re.match(r"controller (\S+)", line))]
        if not (found and "ready" in out[-1]):
            self.proc.kill()
            raise AssertionError("mbds up did not become ready:\n" + "".join(out))
        self.address = found[0]
        self.children = psutil.Process(self.proc.pid).children(recursive=True)
        assert len(self.children) == n + 1, self.children

    def signal(self, sig: int) -> float:
        """SIGTERM to `mbds up` alone (kill, timeout, a service manager); SIGINT to the
        whole process group, as a terminal's Ctrl-C. Returns when it was sent."""
        t0 = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        return t0

    def wait_all_gone(self, t0: float, timeout: float = 30) -> float:
        """Seconds from t0 until `mbds up` and every child of it have exited."""
        self.proc.wait(timeout)
        _, alive = psutil.wait_procs(self.children, timeout=timeout)
        assert alive == [], f"still running {timeout}s after the signal: {alive}"
        return time.monotonic() - t0

    def kill(self) -> None:
        """Whatever a failed test left running."""
        if self.proc.poll() is None:
            self.proc.kill()
        for p in self.children:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_idle_up_and_all_its_processes_stop_within_the_bound(tmp_path: Path,
                                                                sig: int) -> None:
    up = Up(tmp_path / "data", 2)
    try:
        t0 = up.signal(sig)
        elapsed = up.wait_all_gone(t0)
    finally:
        up.kill()
    rest = "".join(up.lines.until("\0", 5))
    assert up.proc.returncode == 0, rest
    assert "stopped" in rest
    assert elapsed <= STOP_BOUND_S, f"stopped {elapsed:.2f}s after {signal.Signals(sig).name}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_a_killed_up_takes_its_processes_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves `mbds up` no chance to stop anything: the kernel sends each of its
    processes SIGTERM as it dies (mbds/cluster.py, end_with_launcher), and they stop as
    they would at `mbds up`'s own SIGTERM, instead of serving on with nobody to stop them."""
    up = Up(tmp_path / "data", 2)
    try:
        t0 = up.signal(signal.SIGKILL)
        elapsed = up.wait_all_gone(t0, timeout=10)
    finally:
        up.kill()
    assert up.proc.returncode == -signal.SIGKILL
    assert elapsed <= STOP_BOUND_S, f"its processes ended {elapsed:.2f}s after the SIGKILL"
    assert _using(tmp_path / "data") == []


def test_ctrl_c_while_up_is_starting_leaves_nothing_running(tmp_path: Path) -> None:
    """The cluster's processes leave Ctrl-C to `mbds up`; one that comes while it is
    starting them still stops every one already started."""
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mbds", "up", "--backends", "3", "--port", "0",
         "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(_using(data)) < 2:             # b0 is up, b1 is starting
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
        deadline = time.monotonic() + 10
        while left := _using(data):
            assert time.monotonic() < deadline, f"left running after Ctrl-C: {left}"
            time.sleep(0.1)
    finally:
        for pid in [proc.pid, *_using(data)]:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def _using(path: Path) -> list[int]:
    """Live processes whose command line names `path` (the backends' data directories)."""
    pids = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(
                str(path) in arg for arg in p.info["cmdline"] or [])\
                and "up" not in (p.info["cmdline"] or []):
            pids.append(p.pid)
    return pids


def test_a_busy_up_stops_after_its_current_answers(tmp_path: Path) -> None:
    """Ctrl-C during a load: the terminal signals every process, yet the load in flight
    is answered in full (the backends stay until the controller is done), then all stop.
    The load (80 chunks, about 1 s here) fits the controller's 5 s grace period."""
    up = Up(tmp_path / "data", 2)
    try:
        with Client(up.address, timeout=60) as client:
            client.define(P.definition_yaml(4))
            acked, t0 = 0, 0.0
            for reply in client.load(P.FILE, P.ATTRIBUTES, P.records(4), chunk=50):
                acked += reply.stats.records_retrieved
                if not t0:
                    t0 = up.signal(signal.SIGINT)     # after the first chunk's answer
        assert acked == 4000
        up.wait_all_gone(t0)
    finally:
        up.kill()
    assert up.proc.returncode == 0, "".join(up.lines.until("\0", 5))


def test_a_backend_stopped_alone_does_not_wait_for_its_peers_streams(tmp_path: Path) -> None:
    """Its peers' id streams and the controller's bus never end on their own; a backend
    stopped alone ends them instead of waiting out its grace period, and comes back."""
    cluster = LocalCluster(tmp_path / "data", 3)
    cluster.start()
    try:
        with Client(cluster.address, timeout=60) as client:
            client.define(P.definition_yaml(1))
            list(client.load(P.FILE, P.ATTRIBUTES, P.records(1)))
            # A search split over the backends opens every peer stream.
            [before] = client.execute("RETRIEVE (FILE = PAPER) (COUNT(INTE1))")
            t0 = time.monotonic()
            assert cluster.backends[1].stop() == 0
            elapsed = time.monotonic() - t0
            assert elapsed <= STOP_BOUND_S, f"a backend alone stopped in {elapsed:.2f}s"
            cluster.restart_backend(1)
            deadline = time.monotonic() + 30
            while True:       # the controller reconnects to it on its own
                try:
                    [after] = client.execute("RETRIEVE (FILE = PAPER) (COUNT(INTE1))")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            assert after.records == before.records
    finally:
        cluster.stop()


def test_a_backend_stopped_after_its_answer_is_out_fails_no_request(tmp_path: Path) -> None:
    """A backend stopped once it has sent the whole of its part of a RETRIEVE (the last
    reply among them) closes its bus while the controller still gathers the other
    backend's part: the request is answered in full, not failed as "bus closed"."""
    cluster = LocalCluster(tmp_path / "data", 2)
    cluster.start()
    try:
        with Client(cluster.address, timeout=60) as client:
            client.define("files:\n  L:\n    attributes: {SEQ: integer, PAD: string}\n")
            # Records are dealt to the backends in turn: one holds the long ones (tens
            # of row batches), the other the short ones (a few, within its credit).
            list(client.load("L", ["SEQ", "PAD"], (
                ([i, "x" * (2000 if i % 2 == 0 else 1)], None) for i in range(16_000))))
            short = []
            for i, b in enumerate(cluster.backends):
                db = cluster.data_dir / f"b{i}" / "backend.db"
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                    [(longest,)] = conn.execute('SELECT max(length("PAD")) FROM "r_L"')
                if longest == 1:
                    short.append(b)
            assert len(short) == 1
            replies = client.stream("RETRIEVE (FILE = L) (SEQ, PAD)")
            first = next(replies)           # the answer has begun; the reader pauses while
            assert short[0].stop() == 0     # the short part's backend sends all and stops
            records = collect(itertools.chain([first], replies))[0].records
        assert sorted(r["SEQ"] for r in records) == list(range(16_000))
    finally:
        cluster.stop()
