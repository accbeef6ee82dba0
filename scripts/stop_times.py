"""How long stopping takes: an idle `mbds up --backends 2` from SIGTERM (to it) or SIGINT
(to its process group, as a terminal's Ctrl-C) until it and every child have exited,
and a backend stopped alone while the controller and its peers run.

    python3 scripts/stop_times.py [ROUNDS]
"""

from __future__ import annotations

import os
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


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for name, measure in [("idle up, SIGTERM", lambda: up_stop(signal.SIGTERM)),
                          ("idle up, SIGINT to the group", lambda: up_stop(signal.SIGINT)),
                          ("a backend alone, SIGTERM", backend_alone)]:
        times = [measure() for _ in range(rounds)]
        print(f"{name:30s} " + " ".join(f"{t:.2f}s" for t in times), flush=True)


if __name__ == "__main__":
    main()
