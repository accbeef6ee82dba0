"""The control configuration A×n of `mbds bench paper --control`.

C_n asks n backends, each with A's records, for n times A's answer. On one
machine its response time carries two costs besides MBDS's own: n backends
busy at once on shared cores, and one answer that waits for the slowest of n.
A×n measures exactly those two without MBDS's coordination: n independent
one-backend clusters (each its own controller, the same records and CPU budget
as A), asked the same request at the same moment; its time is the slowest of
the n answers. C_n against A×n is then what MBDS itself adds — the bus, the
descriptor-id exchange, one controller gathering n backends — and A×n against
A what the machine adds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loadgen import paper_db as P
from loadgen.common import Counted, run_counted
from loadgen.formulas import mbds_part, reduction
from loadgen.paper_parts import busiest
from loadgen.paper_results import Config, ConfigResult
from mbds.client import Client
from mbds.cluster import LocalCluster, Proc


class Together:
    """n one-backend clusters and their clients, asked as one: the cluster and the client
    of an A×n configuration."""

    def __init__(self) -> None:
        self.clusters: list[LocalCluster] = []
        self.clients: list[Client] = []
        self.pool: ThreadPoolExecutor | None = None

    @property
    def backends(self) -> list[Proc]:      # what BackendCpu reads
        return [b for c in self.clusters for b in c.backends]

    def timed(self, text: str) -> tuple[float, Counted]:
        """(ms from the common start to the last answer, the n answers counted as one)."""
        assert self.pool is not None
        t0 = time.perf_counter()
        got = list(self.pool.map(lambda c: run_counted(c, text), self.clients))
        ms = (time.perf_counter() - t0) * 1000
        return ms, Counted(
            rows=sum(g.rows for g in got), changed=sum(g.changed for g in got),
            clusters=sum(g.clusters for g in got),
            system_ms=max(g.system_ms for g in got), backend_ms=max(g.backend_ms for g in got),
            backend_mean_ms=statistics.fmean(g.backend_mean_ms for g in got))

    def close(self) -> None:
        for c in self.clients:
            c.close()
        if self.pool is not None:
            self.pool.shutdown()

    def stop(self) -> None:
        for c in self.clusters:
            c.stop()


def start_together(cfg: Config, *, scale: int, record_bytes: int, backend_cpus: float | None,
                   workdir: Path, advance: Callable[[int], object] | None = None
                   ) -> tuple[Together, float]:
    """Start and load the n clusters of A×n (each with A's records); (them, load seconds)."""
    t = Together()
    try:
        t0 = time.perf_counter()
        for i in range(cfg.backends):
            cluster = LocalCluster(workdir / cfg.name / f"a{i}", 1, internal_timing=False,
                                   backend_cpus=backend_cpus, timeout=600)
            t.clusters.append(cluster)
            cluster.start()
            client = Client(cluster.address, timeout=600)
            t.clients.append(client)
            P.load(client, scale, 1, record_bytes, advance)
        # One thread per cluster: all n requests leave at once, as C_n's broadcast does.
        t.pool = ThreadPoolExecutor(cfg.backends, thread_name_prefix="together")
        return t, time.perf_counter() - t0
    except BaseException:
        t.close()
        t.stop()
        raise


def control_table(by: dict[str, ConfigResult], reqs: list[int], ns: list[int]) -> dict | None:
    """Table 5 against the machine: A, A×n and C_n, and C_n's reduction split in two."""
    ns = [n for n in ns if f"Ax{n}.E" in by and f"C{n}.E" in by]
    if not ns or "A.E" not in by:
        return None
    a = by["A.E"]
    rows = []
    for q in reqs:
        for n in ns:
            x, c = by[f"Ax{n}.E"], by[f"C{n}.E"]
            row = [str(q), str(n), f"{a.mean(q):.2f}", f"{x.mean(q):.2f}", f"{c.mean(q):.2f}",
                   f"{reduction(a.mean(q), c.mean(q)):.2f}%",
                   f"{reduction(a.mean(q), x.mean(q)):.2f}%",
                   f"{mbds_part(a.mean(q), x.mean(q), c.mean(q)):.2f}%"]
            if all(r.backend_cpu_ms.get(q) for r in (a, x, c)):
                ca, cx, cc = (busiest(r, q) for r in (a, x, c))
                row += [f"{ca:.2f}", f"{cx:.2f}", f"{cc:.2f}",
                        f"{reduction(ca, cx):.2f}%", f"{mbds_part(ca, cx, cc):.2f}%"]
            else:
                row += ["–"] * 5
            rows.append(row)
    return {"title": "Table 5 against the machine: C_n beside A×n (n one-backend clusters "
                     "asked at once; the slowest answer), mean response and busiest "
                     "backend's CPU",
            "columns": ["request", "n", "A.E (ms)", "Ax_n.E (ms)", "C_n.E (ms)",
                        "reduction 1→n", "the machine (A×n vs A)", "MBDS (C_n vs A×n)",
                        "A.E CPU (ms)", "Ax_n.E CPU (ms)", "C_n.E CPU (ms)",
                        "the machine, CPU", "MBDS, CPU"],
            "rows": rows}
