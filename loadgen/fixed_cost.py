"""`mbds bench fixed-cost` — the CPU one small traffic unit costs each process.

A request that finds two records through the directory (the paper's request 1)
does microseconds of SQLite work; everything else a process spends on it is the
fixed cost of a traffic unit: the bus messages, DM's stages, CC's lock sets,
RECP's statement, PP's gathering, REQP, metrics. This benchmark runs one small
request over and over on one user's session against a fresh local cluster and
divides each process's CPU time (the scheduler's nanosecond count,
`loadgen/cpu.run_ms_by_thread`) by the number of units, so the figure does not depend on
what else the machine is running; the median response time is printed beside it.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import click

from loadgen import backend_alone, grpc_floor, instructions
from loadgen import paper_db as P
from loadgen.common import (
    fail,
    int_list,
    local_cluster_procs,
    print_table,
    split_search_option,
)
from loadgen.cpu import run_ms_by_thread
from mbds.client import Client, ClientError

# An UPDATE of a non-directory attribute of request 1's two records: a two-phase unit
# on more than one backend (prepare, vote, decision, commit).
UPDATE_1 = ("UPDATE ((FILE = PAPER) and (INTE2 = 10)) or ((FILE = PAPER) and "
            "(INTE2 = 130)) <STR00 = Yyyyy>")
# The paper's requests (r1: two records, two clusters, through the directory) and the update.
REQUESTS = [f"r{i + 1}" for i in range(len(P.REQUESTS))] + ["update"]


def request_text(which: str, scale: int) -> str:
    """The ABDL of `which` on the paper's database at `scale`."""
    return UPDATE_1 if which == "update" else P.REQUESTS[int(which[1:]) - 1].abdl(scale)


# What a small unit should cost: request 1, back to back, on local backends without a
# CPU budget (docs/profile.md).
TARGET_BACKEND_CPU_MS = 0.5
TARGET_MEDIAN_MS = 1.5


def measure(backends: int, text: str, units: int, warmup: int, *,
            internal_timing: bool = False, backend_cpus: float | None = None,
            split_search_from: int = 1, gap_ms: float = 0.0, scale: int = 1
            ) -> dict[str, Any]:
    """CPU ms per unit of every process (in all and by kind of thread) and the response
    times of `units` runs of `text` on a fresh cluster of `backends` backends holding
    the paper's database at `scale`, each run `gap_ms` after the end of the one before."""
    with local_cluster_procs(backends, internal_timing=internal_timing,
                             backend_cpus=backend_cpus,
                             split_search_from=split_search_from) as cluster, \
            Client(cluster.address, timeout=600) as client:
        P.load(client, scale)
        for _ in range(warmup):         # caches, prepared statements, the session
            client.execute(text)
        assert cluster.controller is not None
        pids = {"controller": cluster.controller.popen.pid} | {
            f"b{i}": b.popen.pid for i, b in enumerate(cluster.backends)}
        before = {k: run_ms_by_thread(pid) for k, pid in pids.items()}
        harness0 = time.process_time()
        times = []
        for _ in range(units):
            if gap_ms:
                time.sleep(gap_ms / 1000)
            t0 = time.perf_counter()
            client.execute(text)
            times.append((time.perf_counter() - t0) * 1000)
        harness = (time.process_time() - harness0) * 1000
        after = {k: run_ms_by_thread(pid) for k, pid in pids.items()}
    threads = {}
    for k in pids:
        then, now = before[k], after[k]
        if then is None or now is None:
            raise click.ClickException("this kernel keeps no /proc/<pid>/task/*/schedstat: "
                                       "no per-process CPU time to measure")
        threads[k] = _per_unit(then, now, units)
    cpu = {k: sum(ts.values()) for k, ts in threads.items()}
    times.sort()
    return {"backends": backends, "units": units, "gap_ms": gap_ms,
            **{f"{k}_cpu_ms": v for k, v in cpu.items()},
            "backend_cpu_ms_max": max(v for k, v in cpu.items() if k != "controller"),
            "harness_cpu_ms": harness / units,
            "median_ms": statistics.median(times),
            "p90_ms": times[int(0.9 * (len(times) - 1))],
            "cpu_ms_by_thread": threads}


def _per_unit(before: dict[str, float], after: dict[str, float], units: int
              ) -> dict[str, float]:
    """CPU ms per unit of each kind of thread between two `run_ms_by_thread` reads."""
    return {name: (ms - before.get(name, 0.0)) / units for name, ms in sorted(after.items())}


@click.command("fixed-cost")
@click.option("--backends", "backend_counts", callback=lambda c, p, v: int_list(v),
              default="1,2", show_default=True, help="Cluster sizes to measure, e.g. 1,2.")
@click.option("--request", "which", type=click.Choice(REQUESTS), default="r1",
              show_default=True, help="r1 … r9: the paper's requests; update: an UPDATE "
              "of request 1's two records' STR00.")
@click.option("--scale", type=click.IntRange(min=1), default=1, show_default=True,
              help="The paper's database at this scale (1: 1,000 records). With r2 … r9 "
              "and --instructions, how the work itself divides over the backends.")
@click.option("--units", type=click.IntRange(min=1), default=500, show_default=True,
              help="Traffic units measured per cluster size.")
@click.option("--warmup", type=click.IntRange(min=0), default=50, show_default=True)
@click.option("--internal-timing", type=click.Choice(["on", "off"]), default="off",
              show_default=True, help="Per-handler timing in the servers.")
@click.option("--backend-cpus", type=float, default=None,
              help="CPU budget of each backend (cgroup; needs root). Default: none.")
@split_search_option
@click.option("--gap", "gap_ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Idle milliseconds before each unit. A unit that comes between others "
              "(as in `mbds bench paper`) meets sleeping threads and cold caches; 0 runs "
              "the units back to back.")
@click.option("--by-thread", is_flag=True, help="Also print each process's CPU ms per "
              "unit by kind of thread (the event loop, gRPC's pool and poller threads).")
@click.option("--floor", is_flag=True, help="Also measure one bare gRPC round trip "
              "(an echo over a grpc.aio stream, plaintext and mutual TLS): the least a "
              "message each way costs a process here.")
@click.option("--alone", is_flag=True, help="Also measure one backend's own work per unit "
              "in this process, without gRPC: a BackendNode on the same data, handed the "
              "traffic unit directly (the part of a backend's figure that is not messages).")
@click.option("--instructions", "count", is_flag=True, help="Count instructions instead of "
              "timing: every server process under valgrind's callgrind, instructions per "
              "unit by process and by library (a figure that does not move with the "
              "machine's load; needs valgrind).")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per cluster size.")
def fixed_cost(backend_counts: list[int], which: str, scale: int, units: int, warmup: int,
               internal_timing: str, backend_cpus: float | None,
               split_search_from: int, gap_ms: float, by_thread: bool, floor: bool,
               alone: bool, count: bool, as_json: bool) -> None:
    """CPU ms per small traffic unit, per process.

    Of the controller and each backend, for a small request (the paper's request 1
    unless --request names another)."""
    text = request_text(which, scale)
    if count:
        if floor or alone or backend_cpus or gap_ms or by_thread:
            raise click.UsageError("--instructions counts instructions; --floor, --alone, "
                                   "--backend-cpus, --gap and --by-thread are for timing "
                                   "runs")
        _count(backend_counts, which, text, scale, units, warmup, internal_timing == "on",
               split_search_from, as_json)
        return
    if alone and scale != 1:
        raise click.UsageError("--alone runs on the paper's database at scale 1")
    floors = grpc_floor.measure(max(units, 1000)) if floor else []
    alones = [backend_alone.measure(text, max(units, 2000), warmup)] if alone else []
    rows = []
    for n in backend_counts:
        if n < 1:
            raise click.BadParameter(f"a cluster needs at least one backend, got {n}",
                                     param_hint="--backends")
        try:
            rows.append(measure(n, text, units, warmup,
                                internal_timing=internal_timing == "on",
                                backend_cpus=backend_cpus,
                                split_search_from=split_search_from, gap_ms=gap_ms,
                                scale=scale))
        except ClientError as e:
            fail(e)
    if as_json:
        for r in rows:
            click.echo(json.dumps({"request": which, "scale": scale, **r}))
        for f in floors:
            click.echo(json.dumps({"floor": True, **f}))
        for a in alones:
            click.echo(json.dumps({"request": which, **a}))
        return
    most = max(backend_counts)
    columns = ["backends", "units", "controller_cpu_ms",
               *[f"b{i}_cpu_ms" for i in range(most)], "harness_cpu_ms", "median_ms",
               "p90_ms"]
    spacing = f", {gap_ms:g} ms between units" if gap_ms else ""
    print_table(f"fixed cost per traffic unit: {which}{spacing} (CPU ms per unit per process)",
                columns, [{c: r.get(c, "") for c in columns} for r in rows])
    if by_thread:
        _print_threads(which, rows)
    if which == "r1" and scale == 1 and not backend_cpus and not gap_ms:
        split = ("" if split_search_from == 1 else
                 f"; descriptor search split from {split_search_from} predicates")
        print_table(f"targets of a small unit (request 1 back to back, no CPU budget{split})",
                    ["backends", "busiest backend CPU ms", f"≤ {TARGET_BACKEND_CPU_MS}",
                     "median ms", f"≤ {TARGET_MEDIAN_MS}"], [_verdict(r) for r in rows])
    if floors:
        print_table("one bare gRPC round trip (a small message each way; CPU ms per round "
                    "trip)", list(floors[0]), floors)
    if alones:
        print_table(f"one backend's own work on {which}, without gRPC (CPU ms per unit, "
                    "in this process)", ["units", "backend_cpu_ms"], alones)


def _verdict(r: dict[str, Any]) -> dict[str, Any]:
    cpu, median = r["backend_cpu_ms_max"], r["median_ms"]
    return {"backends": r["backends"], "busiest backend CPU ms": cpu,
            f"≤ {TARGET_BACKEND_CPU_MS}": "met" if cpu <= TARGET_BACKEND_CPU_MS else "missed",
            "median ms": median,
            f"≤ {TARGET_MEDIAN_MS}": "met" if median <= TARGET_MEDIAN_MS else "missed"}


def _print_threads(which: str, rows: list[dict[str, Any]]) -> None:
    """Each process's CPU ms per unit by kind of thread, the main thread first."""
    for r in rows:
        procs = r["cpu_ms_by_thread"]
        names = sorted({t for ts in procs.values() for t in ts}, key=lambda t: (t != "main", t))
        table = [{"process": p, **{t: ts.get(t, 0.0) for t in names}} for p, ts in procs.items()]
        print_table(f"CPU ms per unit by thread: {which}, {r['backends']} backend(s), "
                    f"{r['gap_ms']:g} ms between units", ["process", *names], table)


def _count(backend_counts: list[int], which: str, text: str, scale: int, units: int,
           warmup: int, internal_timing: bool, split_search_from: int, as_json: bool) -> None:
    """`--instructions`: each process's instructions per unit, and by library; from one
    backend to n, the improvement in the busiest backend's count (the work itself divided,
    whatever the machine does to its time)."""
    for n in backend_counts:
        if n < 1:
            raise click.BadParameter(f"a cluster needs at least one backend, got {n}",
                                     param_hint="--backends")
    try:
        rows = [instructions.measure(n, text, units, warmup, internal_timing=internal_timing,
                                     split_search_from=split_search_from, scale=scale)
                for n in backend_counts]
    except ClientError as e:
        fail(e)
    if as_json:
        for r in rows:
            click.echo(json.dumps({"request": which, "scale": scale, **r}))
        return
    libs = [lib for _, lib in instructions.LIBRARIES] + ["other"]
    for r in rows:
        table = [{"process": name, "instructions": sum(counts.values()),
                  **{lib: counts.get(lib, 0) for lib in libs}}
                 for name, counts in r["by_library"].items()]
        print_table(f"instructions per traffic unit: {which} at scale {scale}, "
                    f"{r['backends']} backend(s), {r['units']} units (callgrind; the "
                    "kernel's part not counted)", ["process", "instructions", *libs], table)
    one = next((r for r in rows if r["backends"] == 1), None)
    if one is not None and len(rows) > 1:
        base = one["backend_instructions_max"]
        print_table(f"{which} at scale {scale}: improvement 1→n from the busiest backend's "
                    "instructions", ["backends", "busiest backend", "improvement", "bound"],
                    [{"backends": r["backends"], "busiest backend": r["backend_instructions_max"],
                      "improvement": f"{1 - r['backend_instructions_max'] / base:.2%}",
                      "bound": f"{1 - 1 / r['backends']:.2%}"} for r in rows])
