"""The paper's Table 2 on a loaded cluster: clusters examined and records retrieved by its
nine requests, beside the paper's figures, with response times."""

from __future__ import annotations

import statistics
import time

from loadgen import paper_db as P
from mbds.client import Client


def run_table2(client: Client, scale: int, multi: int, runs: int, warmup: int = 0
               ) -> list[dict]:
    """One row per request; `match` says whether both counts are the paper's.

    Each request is first run `warmup` times untimed: the response times are then of
    a cluster in its steady state, not of its first requests after an idle spell or a
    load (request 1 takes several times its steady time for its first few runs)."""
    rows = []
    for req in P.REQUESTS:
        times, result = [], None
        for _ in range(warmup):
            client.execute(req.abdl(scale))
        for _ in range(runs):
            t0 = time.perf_counter()
            result = client.execute(req.abdl(scale))[0]
            times.append((time.perf_counter() - t0) * 1000)
        assert result is not None
        expected = req.expected_records(scale, multi)
        rows.append({
            "request": req.number, "clusters_examined": result.stats["clusters_examined"],
            "records_retrieved": result.stats["records_retrieved"],
            "paper_clusters": req.clusters, "paper_records": expected,
            "match": result.stats["clusters_examined"] == req.clusters
            and result.stats["records_retrieved"] == expected == len(result.records),
            "median_ms": round(statistics.median(times), 3),
            "mean_ms": round(statistics.fmean(times), 3),
            "sd_ms": round(statistics.stdev(times), 3) if len(times) > 1 else 0.0,
        })
    return rows
