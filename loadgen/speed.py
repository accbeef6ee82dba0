"""A yardstick of the machine's speed at the time of a run.

On a shared VM the same work can cost 30 ms of CPU one second and 55 ms the
next, and the guest sees no steal time. A benchmark records this probe before
and after measuring, so two runs (or two machines) can be compared knowing
how fast the CPU was.
"""

from __future__ import annotations

import sqlite3
import statistics
import time


def speed_probe_ms(rows: int = 100_000, repeats: int = 5) -> float:
    """Median CPU milliseconds of a fixed SQLite scan that encodes every row as JSON,
    RECP's own kind of work (lower is faster)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER, s TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                     ((i, i * 7919 % 100_003, f"value-{i:08d}") for i in range(rows)))
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        for _row in conn.execute("SELECT json_array(a, b, s) FROM t"):
            pass
        times.append((time.process_time() - t0) * 1000)
    conn.close()
    return statistics.median(times)
