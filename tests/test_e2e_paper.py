"""End to end through real gRPC and real SQLite files: the paper's database and its nine
requests with 1, 2 and 3 backends give exactly the right records and Table 2."""

from __future__ import annotations

import contextlib
import operator
import sqlite3
from collections import defaultdict

import pytest

from loadgen import paper_db as P
from loadgen.table2 import run_table2
from tests.conftest import Running, module_cluster

MULTI = 2
OPS = {"=": operator.eq, "<=": operator.le, ">=": operator.ge}


def _paper_loaded(r: Running) -> None:
    r.client.define(P.definition_yaml(1))
    done = sum(d.stats.records_retrieved for d in
               r.client.load(P.FILE, P.ATTRIBUTES, P.records(1, MULTI), chunk=700))
    assert done == 1000 * MULTI


paper_cluster = module_cluster("paper", [1, 2, 3], _paper_loaded)


def expected_inte1(req: P.PaperRequest) -> list[int]:
    """Evaluate the request's predicates directly on i = 1..1000 (INTE1 = INTE2 = i)."""
    out = []
    for i in range(1, 1001):
        for text in req.conjunctions:
            attr, op, value = text.strip("()").split()
            v = int(value.format(**{f"v{n}": n for n in (10, 130, 200, 250, 400, 500, 800,
                                                         1000)},
                                 v201=201, v401=401, v601=601, v801=801))
            if OPS[op](i, v):
                out.append(i)
                break
    return sorted(out * MULTI)


@pytest.mark.parametrize("req", P.REQUESTS, ids=lambda r: f"request{r.number}")
def test_request_returns_exactly_the_right_records(paper_cluster: Running,
                                                   req: P.PaperRequest) -> None:
    [result] = paper_cluster.client.execute(req.abdl())
    assert result.op == "RETRIEVE"
    assert result.columns == P.TARGETS
    assert sorted(r["INTE1"] for r in result.records) == expected_inte1(req)
    for rec in result.records:
        assert rec["INTE2"] == rec["INTE1"] and rec["STR13"] == "Xxxxx"
    stats = result.stats
    assert stats["clusters_examined"] == req.clusters
    assert stats["records_retrieved"] == len(result.records)
    n = len(paper_cluster.cluster.backends)
    assert [b["backend"] for b in stats["backends"]] == [f"b{i}" for i in range(n)]
    assert sum(b["records"] for b in stats["backends"]) == len(result.records)


def test_table2_matches_the_paper(paper_cluster: Running) -> None:
    rows = run_table2(paper_cluster.client, 1, MULTI, runs=1)
    assert [r["clusters_examined"] for r in rows] == [2, 7, 13, 24, 9, 19, 10, 15, 19]
    assert [r["records_retrieved"] for r in rows] == [
        2 * MULTI, 250 * MULTI, 500 * MULTI, 1000 * MULTI, 400 * MULTI, 800 * MULTI,
        201 * MULTI, 401 * MULTI, 402 * MULTI]
    assert all(r["match"] for r in rows)


def test_table2_times_only_the_runs_after_its_warmup(paper_cluster: Running) -> None:
    """Warm-up runs go to the cluster but not into the timed median (steady state)."""
    sent: list[str] = []
    real = paper_cluster.client.execute

    def counting(text: str) -> list:
        sent.append(text)
        return real(text)
    paper_cluster.client.execute = counting   # type: ignore[method-assign]
    try:
        rows = run_table2(paper_cluster.client, 1, MULTI, runs=2, warmup=3)
    finally:
        del paper_cluster.client.execute
    assert len(sent) == 9 * (3 + 2)
    assert sent[:5] == [P.REQUESTS[0].abdl(1)] * 5      # request 1's warm-up, then its runs
    assert all(r["match"] for r in rows)


def test_whole_database_is_spread_evenly(paper_cluster: Running) -> None:
    [result] = paper_cluster.client.execute(P.REQUESTS[3].abdl())
    counts = [b["records"] for b in result.stats["backends"]]
    # 24 clusters, each split within ±1 record over the backends.
    assert max(counts) - min(counts) <= 24


def test_each_clusters_records_are_dealt_out_in_load_order(paper_cluster: Running) -> None:
    """In every backend's SQLite file: a cluster's records, taken in the order they were
    loaded, went one to each backend in turn, across load batches — so the records of a
    range that ends inside a cluster (request 2's INTE2 <= 250, say) are split as evenly
    as the whole cluster, and no backend answers for more of them than its share."""
    n = len(paper_cluster.cluster.backends)
    dealt: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for b in range(n):
        path = paper_cluster.cluster.data_dir / f"b{b}" / "backend.db"
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            for cid, multi, inte1 in db.execute('SELECT cluster_id, MULTI, INTE1 FROM "r_PAPER"'):
                dealt[cid].append((P.MULTI_NAMES.index(multi), inte1, b))
    assert sum(map(len, dealt.values())) == 1000 * MULTI
    for cid, records in dealt.items():
        so_far = [0] * n
        for _, _, b in sorted(records):            # in load order
            so_far[b] += 1
            assert max(so_far) - min(so_far) <= 1, (cid, so_far)
    [result] = paper_cluster.client.execute(P.REQUESTS[1].abdl())
    counts = [b["records"] for b in result.stats["backends"]]
    assert sum(counts) == 250 * MULTI and max(counts) - min(counts) <= 7, counts
