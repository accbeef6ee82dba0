"""The seed-document benchmarks (`mbds bench users|tp|kv`): tiny end-to-end runs on real
local clusters, checking the files they write and that their numbers are consistent."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from loadgen import kv as kv_mod
from loadgen import tp as tp_mod
from loadgen import users as users_mod
from loadgen.cpu import CpuMeter, ceiling
from loadgen.hist import Hist


def run(cmd: click.Command, out: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cmd, [*args, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (out / "summary.md").read_text().startswith("# ")
    assert "mbds bench" in (out / "summary.md").read_text()
    data = json.loads((out / "results.json").read_text())
    assert data["machine"]["speed_probe_ms"] > 0      # how fast the CPU was, recorded
    return data


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


# --- no cluster: determinism and the mappings -------------------------------------------

def test_hist_percentiles_and_merge() -> None:
    a, b = Hist(), Hist()
    for ms in (1.0, 2.0, 3.0, 50.0):
        a.record(ms)
    b.record(0.5)
    a.merge(b)
    s = a.summary()
    assert s["count"] == 5
    assert s["min_ms"] <= s["p95_ms"] <= s["max_ms"]
    assert abs(s["min_ms"] - 0.5) < 0.01 and abs(s["max_ms"] - 50) < 0.1


def test_workloads_are_reproducible_from_the_seed() -> None:
    def p(seed: int) -> list[Any]:
        return [(t.user, t.think_ms, t.keys)
                for u in tp_mod.plan(3, 4, 5, True, 10.0, 100, seed) for t in u]
    assert p(7) == p(7) and p(7) != p(8)
    assert users_mod.scripts_for(2, 0, 3, "IDM", 500, 1) == \
        users_mod.scripts_for(2, 0, 3, "IDM", 500, 1)
    script = users_mod.scripts_for(0, 0, 1, "IDM", 500, 1)[0]
    assert len(script) == 10 and sum("(NUM =" in r for r in script) == 7
    # Delete and insert visit every set of ten keys exactly once.
    assert sorted(kv_mod.batch_order("delete", 20, 1, "x")) == list(range(20))


def test_kv_file_makes_each_key_a_directory_lookup() -> None:
    d = yaml.safe_load(kv_mod.definition(2500, 1000))["files"]["KV"]
    assert d["directory"]["KNO"]["ranges"] == [[0, 999], [1000, 1999], [2000, 2499]]
    assert len(kv_mod.key(42)) == 64 and kv_mod.key(42).endswith("42")
    assert kv_mod.request("fetch", 7, 0) == "RETRIEVE ((FILE = KV) and (KNO = 7)) (KEY, VAL)"


# --- end to end ---------------------------------------------------------------------------

def test_users_file_gives_each_access_path_its_attribute() -> None:
    d = yaml.safe_load(users_mod.definition("IDM", 250, 100))["files"]["IDM"]
    assert d["directory"] == {"ID": {"type": "A", "ranges": [[1, 100], [101, 200], [201, 250]]}}
    assert d["indexes"] == ["NUM"]
    assert yaml.safe_load(users_mod.definition("IDM", 250, 100, False))["files"]["IDM"][
        "indexes"] == []
    assert users_mod.retrieve("F", "AMT", 4).endswith("(AMT = 6.0)) (" + users_mod.TARGETS + ")")


def test_users_throughput(tmp_path: Path) -> None:
    out = tmp_path / "users"
    data = run(users_mod.users, out, "--users", "2,3", "--records", "300", "--scripts", "2",
               "--repeats", "1", "--backends", "1")
    by_users = {r["users"]: r for r in data["rows"]}
    assert sorted(by_users) == [0, 1, 2, 3]          # 1 is added: it is the base
    assert by_users[1]["normalised"] == 1.0
    assert by_users[2]["idm_thruput"] == 1.688
    for u in (1, 2, 3):
        r = by_users[u]
        assert r["requests"] == u * 2 * 10
        assert r["records"] == r["requests"]           # every retrieve finds one record
        assert r["normalised"] > 0 and r["p95_ms"] > 0
        assert abs(r["requests_per_s"] - 10 * r["scripts_per_s"]) < 1e-6
        # Where the CPU went: the parts add up, work was done, and no more cores were
        # busy than the machine has (the kernel counts CPU in 10 ms ticks: 3 processes,
        # read twice, may be off by 60 ms in a run this short).
        parts = [r[f"{k}_cpu_ms"] for k in ("harness", "controller", "backends")]
        assert abs(sum(parts) - r["cpu_ms_per_req"]) < 1e-6 and r["cpu_ms_per_req"] > 0
        assert 0 < r["cores_busy"] <= (os.cpu_count() or 1) + 0.06 / r["time_s"]
        assert r["ceiling"] > 0
    assert by_users[0]["normalised"] == by_users[0]["cores_busy"] == ""   # the harness alone
    assert len(rows(out / "runs.csv")) == 4
    assert len(rows(out / "results.csv")) == 4


def test_users_file_size(tmp_path: Path) -> None:
    out = tmp_path / "filesize"
    data = run(users_mod.users, out, "--test", "2", "--sizes", "100,500", "--reps", "3",
               "--cluster-size", "50", "--backends", "1")
    got = {r["records"]: r for r in data["rows"]}
    assert sorted(got) == [100, 500]
    for n, r in got.items():
        assert r["clustered_clusters"] == 1           # the directory attribute: one cluster
        assert r["nonclustered_clusters"] == n // 50   # indexed, but not a directory attribute
        assert r["scan_clusters"] == n // 50           # the plain attribute: every cluster
        assert r["clustered_ms"] > 0 and r["nonclustered_ms"] > 0 and r["scan_ms"] > 0


def test_tp_closed_loop(tmp_path: Path) -> None:
    out = tmp_path / "tp"
    data = run(tp_mod.tp, out, "--users", "2", "--transactions", "5", "--requests", "3",
               "--think-ms", "5", "--records", "200", "--record-bytes", "256",
               "--backends", "1")
    s = data["summary"]
    assert s["transactions"] == 10 and s["requests"] == 30
    assert s["min_ms"] <= s["avg_ms"] <= s["max_ms"]
    assert s["min_ms"] <= s["p95_ms"] <= s["max_ms"]
    assert abs(s["tps"] - 10 / s["elapsed_s"]) < 1e-6
    log = (out / "transactions.log").read_text().splitlines()
    lines = [ln for ln in log if " response " in ln]
    assert len(lines) == 10 and {ln.split()[0] for ln in lines} == {"101", "102"}
    assert all(" think " in ln for ln in lines)
    assert len(rows(out / "transactions.csv")) == 10


def test_tp_open_loop(tmp_path: Path) -> None:
    out = tmp_path / "tp-open"
    data = run(tp_mod.tp, out, "--users", "2", "--transactions", "5", "--requests", "2",
               "--random-requests", "--rate", "40", "--max-inflight", "3", "--records", "200",
               "--record-bytes", "256", "--backends", "1")
    s = data["summary"]
    txns = rows(out / "transactions.csv")
    assert s["mode"] == "open" and s["transactions"] == len(txns) == 10
    assert s["requests"] == sum(int(t["requests"]) for t in txns)
    assert s["min_ms"] <= s["p95_ms"] <= s["max_ms"]
    # Response runs from the intended start, so it is never shorter than the service time.
    assert all(float(t["response_ms"]) >= float(t["service_ms"]) - 0.01 for t in txns)


def test_kv_durability_and_threads(tmp_path: Path) -> None:
    out = tmp_path / "kv"
    data = run(kv_mod.kv, out, "--batches", "2", "--runs", "2", "--threads", "1,2",
               "--durability", "full,normal,off,memory", "--backends", "1")
    summary = data["rows"]
    assert {r["durability"] for r in summary} == {"full", "normal", "off", "memory"}
    assert {r["op"] for r in summary} == {"insert", "fetch", "update", "delete"}
    assert len(summary) == 4 * 2 * 4
    for r in summary:
        assert r["ops"] == 2 * 10 and r["runs"] == 2
        assert r["ops_per_s"] > 0 and r["sd"] >= 0
        # Every process worked for every operation; the parts add up to the whole, and
        # the cores' bound is what that whole allows on this machine.
        for part in ("harness", "controller", "backends"):
            assert 0.01 < r[f"{part}_cpu_ms"] < 1000, r
        assert r["cpu_ms"] == pytest.approx(
            r["harness_cpu_ms"] + r["controller_cpu_ms"] + r["backends_cpu_ms"])
        assert r["cores_bound_ops_s"] == pytest.approx(
            len(os.sched_getaffinity(0)) * 1000 / r["cpu_ms"])
    assert len(rows(out / "runs.csv")) == 4 * 2 * 2 * 4
    assert len(rows(out / "table.csv")) == 4 * 2
    assert data["durability"]["memory"]["in_memory"] is True
    assert data["durability"]["full"]["synchronous"] == "FULL"


def test_users_ceiling_is_bound_by_the_backends_budget_when_it_binds() -> None:
    """2 cores, a request costing 4 ms of CPU of which 1 ms in the backends, one user at
    5 ms per request: the cores allow 2.5×; a 0.5-CPU budget for the backends allows
    5 / (1 / 0.5) = 2.5× too, and a 0.25-CPU one only 1.25×."""
    assert ceiling(5.0, 4.0, 1.0, 2) == 2.5
    assert ceiling(5.0, 4.0, 1.0, 2, backend_budget=0.5) == 2.5
    assert ceiling(5.0, 4.0, 1.0, 2, backend_budget=0.25) == 1.25
    # A run too short to measure any CPU has no ceiling to give (and no division by 0).
    assert ceiling(5.0, 0.0, 0.0, 2) is None


def test_cpu_meter_resolves_less_than_a_clock_tick() -> None:
    """A few small requests on a fast machine take less CPU than psutil's 10 ms clock
    tick; the meter reads the scheduler's nanosecond count, so 2 ms of work is 2 ms
    and not 0 or 10."""
    meter = CpuMeter(SimpleNamespace(controller=None, backends=[], backend_cpus=None))
    before = meter.read()
    start = time.thread_time()
    while time.thread_time() - start < 0.002:
        pass
    spent = meter.spent(before, meter.read())
    assert 0.0015 < spent["harness"] < 0.009, spent
    assert spent["controller"] == spent["backends"] == 0
