"""`mbds bench users` — the Britton Lee IDM 500 tests (docs/spec.md §6).

Test 1: throughput as concurrent users grow. Each user is a coroutine with its
own gRPC channel (users_run.py) running scripts of ten single-record retrieves, two thirds on an
attribute with a non-clustered index (the file's `indexes`: a B-tree on every
backend) and one third on a directory attribute (the clustered access path:
one cluster). Throughput is normalised to the single-user rate, as the IDM's
`thruput` column is. A zero-user run times the harness alone.

Test 2 (`--test 2`): one user's retrieval time against relation size, with
the restriction on the directory attribute ("clustered"), on an attribute
with a non-clustered index ("nonclustered") and on a plain one ("scan").
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import click

from loadgen.common import (
    Counted,
    Row,
    cluster_options,
    define,
    fail,
    int_list,
    local_cluster_procs,
    machine_facts,
    out_dir,
    padded,
    print_table,
    progress,
    rng,
    run_counted,
    write_csv,
    write_json,
    write_summary,
)
from loadgen.cpu import CpuMeter, ceiling
from loadgen.hist import Hist
from loadgen.users_run import run_users
from mbds.client import Client, ClientError

# Nine attributes, 100 bytes per record as the IDM counted them: 3 integers of 4 bytes,
# one 8-byte float and five fixed-width strings (8 + 24 + 16 + 24 + 8 = 80 bytes).
STRINGS = {"CODE": 8, "NAME": 24, "CITY": 16, "NOTE": 24, "TAG": 8}
ATTRS = {"ID": "integer", "NUM": "integer", "GRP": "integer", "AMT": "float",
         **{s: "string" for s in STRINGS}}
TARGETS = ", ".join(ATTRS)
# The IDM's three access paths: the clustered index is a directory attribute (type-A
# ranges), the non-clustered one an attribute in the file's `indexes`, and no index a
# plain attribute (AMT = 1.5 ID: also unique).
CLUSTERED, NONCLUSTERED, SCAN = "ID", "NUM", "AMT"
SCRIPT = [NONCLUSTERED] * 7 + [CLUSTERED] * 3   # ten retrieves, about 2/3 non-clustered
# The IDM's Test 1 `thruput` (time for 1 user 12.1 s). The scan prints 2.1690 at 18 users;
# its own formula 18 * 12.1 / 83.17 gives 2.619, which is what we show.
IDM_THRUPUT = {1: 1.0, 2: 1.688, 4: 2.123, 8: 2.574, 14: 2.689, 16: 2.659, 18: 2.619,
               24: 2.734}
# The IDM's Test 2 (with the accelerator): ms per retrieve, clustered index / no index.
IDM_CLUSTERED = {100: 128.75, 1000: 137.25, 5000: 170.5, 10000: 191.25, 25000: 178.75,
                 50000: 183.0, 100000: 195.75, 150000: 195.5}
IDM_NONCLUSTERED = {100: 145.75, 1000: 150.0, 5000: 174.75, 10000: 191.5, 25000: 178.75,
                    50000: 212.0, 100000: 233.0, 150000: 195.5}
IDM_NO_INDEX = {100: 158.0, 1000: 250.0, 5000: 8203.75, 10000: 16462.25, 25000: 40716.5,
                50000: 85541.0, 100000: 176666.25, 150000: 268270.5}


def definition(file: str, n: int, cluster_size: int, nonclustered: bool = True) -> str:
    """ID gets type-A ranges of `cluster_size` values, so an ID lookup examines one cluster;
    NUM a non-clustered index (unless `nonclustered` is off: then its lookups are scans)."""
    ranges = [[lo, min(n, lo + cluster_size - 1)] for lo in range(1, n + 1, cluster_size)]
    attrs = ", ".join(f"{a}: {t}" for a, t in ATTRS.items())
    indexes = [NONCLUSTERED] if nonclustered else []
    return (f"files:\n  {file}:\n    attributes: {{{attrs}}}\n    directory:\n"
            f"      {CLUSTERED}: {{type: A, ranges: {ranges}}}\n"
            f"    indexes: [{', '.join(indexes)}]\n")


def records(file: str, n: int, seed: int) -> list[tuple[list[Any], None]]:
    """Record i has ID = i and NUM = a seeded permutation of 1..n: both unique keys."""
    nums = list(range(1, n + 1))
    rng(seed, "num", file).shuffle(nums)
    return [([i, nums[i - 1], i % 100, i * 1.5,
              *(padded(f"{a[0]}{i}-", w) for a, w in STRINGS.items())], None)
            for i in range(1, n + 1)]


def load(client: Client, file: str, n: int, cluster_size: int, seed: int,
         nonclustered: bool = True) -> None:
    define(client, definition(file, n, cluster_size, nonclustered))
    stored = sum(d.stats.records_retrieved for d in client.load(
        file, list(ATTRS), records(file, n, seed), chunk=2000))
    if stored != n:
        raise click.ClickException(f"{file}: loaded {stored} records, expected {n}")


def retrieve(file: str, attr: str, key: int) -> str:
    """The retrieve of record `key` through `attr` (AMT holds 1.5 × ID)."""
    value = key * 1.5 if attr == SCAN else key
    return f"RETRIEVE ((FILE = {file}) and ({attr} = {value})) ({TARGETS})"


def scripts_for(user: int, rep: int, count: int, file: str, n: int, seed: int
                ) -> list[list[str]]:
    """User `user`'s scripts: prepared in advance, as the IDM's IDL scripts were."""
    r = rng(seed, "user", user, rep)
    out = []
    for _ in range(count):
        kinds = SCRIPT[:]
        r.shuffle(kinds)
        out.append([retrieve(file, k, r.randint(1, n)) for k in kinds])
    return out


def test1(address: str, users_list: list[int], n: int, per_user: int, repeats: int,
          seed: int, file: str, meter: CpuMeter) -> tuple[list[Row], list[Row]]:
    summary: list[Row] = []
    raw: list[Row] = []
    plan = [0, *users_list]
    with progress() as bar:
        task = bar.add_task("users", total=len(plan) * repeats)
        for users in plan:
            times, hist, rows_seen = [], Hist(), 0
            cpu = dict.fromkeys(meter.procs, 0.0)
            for rep in range(repeats):
                scripts = [scripts_for(u, rep, per_user, file, n, seed)
                           for u in range(max(users, 1))]
                before = meter.read()
                elapsed, rows = run_users(address, users, scripts, hist, dry=users == 0)
                for k, v in meter.spent(before, meter.read()).items():
                    cpu[k] += v
                expected = max(users, 1) * per_user * len(SCRIPT)
                if rows != expected:
                    raise click.ClickException(
                        f"{users} users: {rows} records retrieved, expected {expected}")
                times.append(elapsed)
                rows_seen += rows
                raw.append({"users": users, "repeat": rep + 1, "time_s": elapsed})
                bar.advance(task)
            t = statistics.mean(times)
            nscripts = max(users, 1) * per_user
            done = nscripts * len(SCRIPT) * repeats
            summary.append({
                "users": users, "scripts": nscripts, "requests": nscripts * len(SCRIPT),
                "records": rows_seen // repeats, "time_s": t,
                "time_sd": statistics.stdev(times) if len(times) > 1 else 0.0,
                "s_per_user": t / max(users, 1), "scripts_per_s": nscripts / t,
                "requests_per_s": nscripts * len(SCRIPT) / t, "avg_ms": hist.mean(),
                "p95_ms": hist.pct(95),
                # CPU per request (ms) of each part and in all, and the cores it kept busy.
                **{f"{k}_cpu_ms": 1000 * v / done for k, v in cpu.items()},
                "cpu_ms_per_req": 1000 * sum(cpu.values()) / done,
                "cores_busy": sum(cpu.values()) / sum(times)})
    one = next(r for r in summary if r["users"] == 1)
    base = one["scripts_per_s"]
    for r in summary:
        if r["users"] == 0:       # the harness alone: no work done, nothing to normalise
            # (nor cores kept busy: over its fraction of a millisecond, a stray tick of
            # the idle servers' CPU would read as several cores)
            r.update(s_per_user="", scripts_per_s="", requests_per_s="", normalised="",
                     idm_thruput="", ceiling="", cores_busy="")
            continue
        # The most users can gain: L (one user's time per request) over the time per
        # request of a saturated system (C, the CPU a request costs at this load, over
        # the cores — batching makes C fall with load — or the backends' budget).
        most = ceiling(1000 / one["requests_per_s"], r["cpu_ms_per_req"],
                       r["backends_cpu_ms"], meter.cores, meter.backend_budget)
        r["ceiling"] = "" if most is None else most
        r["normalised"] = r["scripts_per_s"] / base
        r["idm_thruput"] = IDM_THRUPUT.get(r["users"], "")
    return summary, raw


def test2(client: Client, sizes: list[int], reps: int, cluster_size: int,
          seed: int) -> list[Row]:
    r = rng(seed, "filesize")
    paths = (("clustered", CLUSTERED), ("nonclustered", NONCLUSTERED), ("scan", SCAN))
    samples: dict[tuple[int, str], list[Counted]] = {(n, p): [] for n in sizes for p, _ in paths}
    times: dict[tuple[int, str], list[float]] = {k: [] for k in samples}
    with progress() as bar:
        task = bar.add_task("load + retrieve", total=len(sizes) + reps)
        for n in sizes:
            load(client, f"R{n}", n, cluster_size, seed)
            for _, attr in paths:
                run_counted(client, retrieve(f"R{n}", attr, 1))     # warm each path once
            bar.advance(task)
        # Rounds over every (size, path): load from other processes on the machine then
        # falls on all sizes alike instead of on whichever size was being measured.
        for _ in range(reps):
            for n in sizes:
                for name, attr in paths:
                    t = time.perf_counter()
                    got = run_counted(client, retrieve(f"R{n}", attr, r.randint(1, n)))
                    times[n, name].append((time.perf_counter() - t) * 1000)
                    samples[n, name].append(got)
                    if got.rows != 1:
                        raise click.ClickException(f"R{n}: {got.rows} records, expected 1")
            bar.advance(task)
    out: list[Row] = []
    for n in sizes:
        row: Row = {"records": n}
        for name, _ in paths:
            got_list = samples[n, name]
            # Medians: one user on a shared machine sees outliers the IDM never did.
            row[f"{name}_ms"] = statistics.median(times[n, name])
            row[f"{name}_mean_ms"] = statistics.mean(times[n, name])
            row[f"{name}_system_ms"] = statistics.median(g.system_ms for g in got_list)
            row[f"{name}_backend_ms"] = statistics.median(g.backend_ms for g in got_list)
            row[f"{name}_clusters"] = got_list[-1].clusters
        row["idm_clustered_ms"] = IDM_CLUSTERED.get(n, "")
        row["idm_nonclustered_ms"] = IDM_NONCLUSTERED.get(n, "")
        row["idm_no_index_ms"] = IDM_NO_INDEX.get(n, "")
        out.append(row)
    return out


@click.command()
@click.option("--test", type=click.Choice(["1", "2"]), default="1", show_default=True,
              help="1: throughput against users; 2: retrieval time against relation size.")
@click.option("--users", "users_list", default="1,2,4,8,14,16,18,24", show_default=True,
              help="Concurrent users to try (test 1; 1 is always added: it is the base).")
@click.option("--records", type=int, default=15_000, show_default=True,
              help="Relation size for test 1 (the IDM used 150,000).")
@click.option("--scripts", "per_user", type=int, default=20, show_default=True,
              help="Scripts of ten retrieves per user per run (the IDM ran one).")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="Timed runs per user count (mean reported; all in runs.csv).")
@click.option("--sizes", default="100,1000,5000,10000,25000,50000", show_default=True,
              help="Relation sizes for test 2.")
@click.option("--reps", type=int, default=30, show_default=True,
              help="Retrieves per size and access path (test 2).")
@click.option("--cluster-size", type=int, default=100, show_default=True,
              help="Values per type-A range of ID: records one clustered retrieve examines.")
@click.option("--nonclustered/--no-nonclustered", default=True, show_default=True,
              help="Test 1: NUM has a non-clustered index (the IDM's); without it the "
                   "two thirds of retrieves on NUM examine every record.")
@cluster_options
def users(test: str, users_list: str, records: int, per_user: int, repeats: int, sizes: str,
          reps: int, cluster_size: int, nonclustered: bool, backends: int,
          backend_cpus: float | None,
          split_search_from: int, internal_timing: str, seed: int, out: Path | None) -> None:
    """IDM tests 1 and 2: users, and relation size (seed 000).

    Test 1: throughput against the number of users; test 2: time against the
    relation's size."""
    folder = out_dir("users" if test == "1" else "filesize", out)
    facts = machine_facts(backends, backend_cpus, split_search_from)
    ulist = sorted(set(int_list(users_list)) | {1})
    try:
        with local_cluster_procs(backends, backend_cpus=backend_cpus,
                                 split_search_from=split_search_from,
                                 internal_timing=internal_timing == "on") as cluster, \
                Client(cluster.address, timeout=600) as client:
            address = cluster.address
            if test == "1":
                meter = CpuMeter(cluster)        # fails at once if psutil is missing
                load(client, "IDM", records, cluster_size, seed, nonclustered)
                run_users(address, 1, [scripts_for(0, -1, 1, "IDM", records, seed)], Hist())
                rows, raw = test1(address, ulist, records, per_user, repeats, seed, "IDM",
                                  meter)
            else:
                rows = test2(client, int_list(sizes), reps, cluster_size, seed)
    except ClientError as e:
        fail(e)
    if test == "1":
        cols = ["users", "requests", "time_s", "s_per_user", "requests_per_s", "avg_ms",
                "p95_ms", "cpu_ms_per_req", "cores_busy", "ceiling", "normalised",
                "idm_thruput"]
        write_csv(folder / "runs.csv", raw)
        notes = [f"{records:,} records of 9 attributes (the IDM used 150,000); {per_user} "
                 f"scripts of ten retrieves per user, {repeats} runs each (mean time).",
                 "7 of 10 retrieves on NUM " + ("(non-clustered index)" if nonclustered else
                                                "(no index: every record examined)")
                 + ", 3 on ID (directory attribute: one cluster).",
                 "users 0 = the harness alone: the same loop and scripts, nothing sent.",
                 "normalised = scripts/s divided by the single-user scripts/s.",
                 "cpu_ms_per_req: CPU of the harness, the controller and the backends per "
                 "request (each part in the CSV); cores_busy: that CPU over the time; "
                 "ceiling = one user's ms per request / (cpu_ms_per_req / cores): the "
                 "most throughput can grow over one user's on these cores; with a CPU "
                 "budget per backend, the divisor is at least backends_cpu_ms / the "
                 "backends' summed budget."]
        title = "IDM Test 1: simple retrieves, varying the number of users"
    else:
        cols = ["records", "clustered_ms", "clustered_backend_ms", "clustered_clusters",
                "nonclustered_ms", "nonclustered_backend_ms", "scan_ms", "scan_backend_ms",
                "scan_clusters", "idm_clustered_ms", "idm_nonclustered_ms", "idm_no_index_ms"]
        notes = [f"{reps} single-record retrieves per size and path, medians; ID ranges of "
                 f"{cluster_size} values.",
                 "*_ms: response at the client; *_backend_ms: the slowest backend's own time "
                 "(the IDM's 'set 5' times were also taken inside the database machine); "
                 "*_system_ms (CSV): the controller's time.",
                 "clustered: ID, a directory attribute; nonclustered: NUM, in the file's "
                 "indexes; scan: AMT, a plain attribute.",
                 "IDM figures: Test 2 Tables 1, 2 and 3 (with DAC)."]
        title = "IDM Test 2: simple retrieves, varying the number of records"
    write_csv(folder / "results.csv", rows)
    write_json(folder / "results.json", {"mode": "users", "test": int(test), "machine": facts,
                                         "seed": seed, "records": records, "rows": rows})
    write_summary(folder / "summary.md", title, facts, cols, rows, notes)
    print_table(title, cols, rows)
    click.echo(f"results in {folder}")
