"""How long stopping takes: an idle `mbds up --backends 2` from SIGTERM (to it) or SIGINT
(to its process group, as a terminal's Ctrl-C) until it and every child have exited,
and a backend stopped alone while the controller and its peers run.

    python3 scripts/stop_times.py [ROUNDS]

With `bench`, `mbds bench paper` stopped by SIGTERM within 50 ms of starting to
measure (while it waits on replies), ROUNDS times, with two busy loops beside it;
prints the exit codes seen and the slowest stop:

    python3 scripts/stop_times.py bench [ROUNDS]
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from loadgen import paper_db as P
from mbds.client import Client
from mbds.cluster import LocalCluster


def up_stop(sig: int) -> float:
    with tempfile.TemporaryDirectory() as data:
        up = subprocess.Popen([sys.executable, "-m", "mbds", "up", "--backends", "2",
                               "--port", "0", "--data-dir", data], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert up.stdout is not None
        for line in up.stdout:
            if "ready" in line:
                break
        children = psutil.Process(up.pid).children(recursive=True)
        time.sleep(0.5)
        t0 = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(up.pid, sig)
        else:
            up.send_signal(sig)
        assert up.wait(30) == 0
        psutil.wait_procs(children, timeout=30)
        return time.monotonic() - t0


def backend_alone() -> float:
    with tempfile.TemporaryDirectory() as data:
        cluster = LocalCluster(data, 3)
        cluster.start()
        try:
            with Client(cluster.address) as client:
                client.define(P.definition_yaml(1))
                list(client.load(P.FILE, P.ATTRIBUTES, P.records(1)))
                client.execute("RETRIEVE (FILE = PAPER) (COUNT(INTE1))")
            t0 = time.monotonic()
            assert cluster.backends[1].stop() == 0
            return time.monotonic() - t0
        finally:
            cluster.stop()


def bench_stop(sig: int) -> tuple[int | None, float]:
    """Exit code (None: still running after 60 s) and seconds until every process of an
    `mbds bench paper` signalled while it measures has exited."""
    with tempfile.TemporaryDirectory() as tmp:
        bench = subprocess.Popen(
            [sys.executable, "-m", "mbds", "bench", "paper", "--backends", "1,2", "--scale",
             "2", "--runs", "500", "--timing", "off", "--out", f"{tmp}/out"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "TMPDIR": tmp})
        assert bench.stdout is not None
        for line in bench.stdout:
            if "loaded 3 configurations" in line:
                break
        children = psutil.Process(bench.pid).children(recursive=True)
        time.sleep(random.uniform(0, 0.05))
        t0 = time.monotonic()
        bench.send_signal(sig)
        try:
            code: int | None = bench.wait(60)
        except subprocess.TimeoutExpired:
            code = None
            bench.kill()
            for p in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()
        psutil.wait_procs(children, timeout=30)
        return code, time.monotonic() - t0


def bench_rounds(rounds: int) -> None:
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        runs = [bench_stop(signal.SIGTERM) for _ in range(rounds)]
    finally:
        for b in busy:
            b.kill()
    codes = collections.Counter("hung" if c is None else c for c, _ in runs)
    print(f"bench paper, SIGTERM while measuring, {rounds} rounds: exit codes "
          + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items(), key=str))
          + f"; slowest stop {max(t for _, t in runs):.2f}s")


def main() -> None:
    if sys.argv[1:2] == ["bench"]:
        bench_rounds(int(sys.argv[2]) if len(sys.argv) > 2 else 20)
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for name, measure in [("idle up, SIGTERM", lambda: up_stop(signal.SIGTERM)),
                          ("idle up, SIGINT to the group", lambda: up_stop(signal.SIGINT)),
                          ("a backend alone, SIGTERM", backend_alone)]:
        times = [measure() for _ in range(rounds)]
        print(f"{name:30s} " + " ".join(f"{t:.2f}s" for t in times), flush=True)


if __name__ == "__main__":
    main()
