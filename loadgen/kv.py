"""`mbds bench kv` — the Berkeley DB 11gR2 key/value tests (docs/spec.md §6).

64-byte keys and values; insert, fetch, update and delete in batches of ten
sequential keys; several runs with mean and standard deviation of ops/s;
durability settings; client threads. The KV file maps a key/value store onto
MBDS (see docs/benchmarks-seeds.md):

    KV: KNO integer  -- the key as a number; directory attribute, type-A ranges
        KEY string   -- the 64-byte key (the number, zero-padded to 64 digits)
        VAL string   -- the 64-byte value

Every operation addresses one key as `KNO = k`, so descriptor search finds
one range and cluster search one cluster (`--range-size` keys): a fetch is a
directory lookup, not a scan of the file.

The seed's sequence per run: fetch random sets, update random sets, delete
every set, repopulate (the reported insert). The first population is a bulk
load, untimed, as the seed's Step 1 is not reported.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import click
import grpc

from loadgen.common import (
    Gate,
    Row,
    cluster_options,
    define,
    fail,
    int_list,
    local_cluster_procs,
    machine_facts,
    out_dir,
    print_table,
    progress,
    quote,
    rng,
    run_counted,
    write_csv,
    write_json,
    write_summary,
)
from loadgen.cpu import run_ms
from loadgen.hist import Hist
from mbds.client import Client, ClientError
from mbds.cluster import LocalCluster

FILE = "KV"
BATCH = 10                        # sequential keys per batch (the seed's spatial locality)
OPS = ["insert", "fetch", "update", "delete"]   # column order of the seed's tables
PHASES = ["fetch", "update", "delete", "insert"]  # order of the seed's Steps 2–5
# Name -> (SQLite synchronous, in-memory store); the seed's SYNC / WNS / NS / INMEM.
DURABILITY = {"full": ("FULL", False), "normal": ("NORMAL", False), "off": ("OFF", False),
              "memory": ("OFF", True)}


def definition(keys: int, range_size: int) -> str:
    ranges = [[lo, min(keys, lo + range_size) - 1] for lo in range(0, keys, range_size)]
    return (f"files:\n  {FILE}:\n    attributes: {{KNO: integer, KEY: string, VAL: string}}\n"
            f"    directory:\n      KNO: {{type: A, ranges: {ranges}}}\n")


def key(k: int) -> str:
    return f"{k:064d}"             # "all key and data values are integers", 64 bytes


def request(op: str, k: int, value: int) -> str:
    where = f"((FILE = {FILE}) and (KNO = {k}))"
    if op == "insert":
        return (f"INSERT (<FILE, {FILE}>, <KNO, {k}>, <KEY, {quote(key(k))}>, "
                f"<VAL, {quote(key(value))}>)")
    if op == "fetch":
        return f"RETRIEVE {where} (KEY, VAL)"
    if op == "update":
        return f"UPDATE {where} <VAL = {quote(key(value))}>"
    return f"DELETE {where}"


def batch_order(op: str, batches: int, seed: int, *tag: object) -> list[int]:
    """Fetch and update pick random sets; delete and insert visit every set once."""
    r = rng(seed, op, *tag)
    if op in ("fetch", "update"):
        return [r.randrange(batches) for _ in range(batches)]
    order = list(range(batches))
    r.shuffle(order)
    return order


def phase(clients: list[Client], op: str, order: list[int], seed: int, hist: Hist,
          tag: tuple[object, ...]) -> float:
    """One timed operation type: thread j does sets j, j+T, …; returns the seconds taken."""
    def worker(j: int) -> Callable[[], None]:
        r = rng(seed, "values", op, j, *tag)

        def go() -> None:
            for b in order[j::len(clients)]:
                for k in range(b * BATCH, (b + 1) * BATCH):
                    t = time.perf_counter()
                    try:
                        got = run_counted(clients[j], request(op, k, r.getrandbits(60)))
                    except ClientError as e:     # say which operation failed, then stop
                        raise RuntimeError(f"{op} key {k}: {e.code}: {e}") from e
                    hist.record((time.perf_counter() - t) * 1000)
                    done = got.rows if op == "fetch" else got.changed
                    if done != 1:     # every key exists (or, for insert, is new) exactly once
                        raise RuntimeError(f"{op} key {k}: {done} records, expected 1")
        return go
    return Gate(len(clients)).run([worker(j) for j in range(len(clients))])


def run_mode(name: str, threads: list[int], batches: int, runs: int, range_size: int,
             seed: int, cluster_kw: Row, bar: object, task: object
             ) -> tuple[list[Row], list[Row]]:
    sync, memory = DURABILITY[name]
    keys = batches * BATCH
    raw: list[Row] = []
    summary: list[Row] = []
    with local_cluster_procs(synchronous=sync, in_memory=memory, **cluster_kw) as cluster:
        address = cluster.address
        meter = PhaseCpu(cluster)
        with Client(address, timeout=600) as c:
            define(c, definition(keys, range_size))
            r = rng(seed, "populate")
            stored = sum(d.stats.records_retrieved for d in c.load(
                FILE, ["KNO", "KEY", "VAL"],
                (([k, key(k), key(r.getrandbits(60))], None) for k in range(keys))))
            if stored != keys:
                raise RuntimeError(f"{name}: populated {stored} keys, expected {keys}")
        for t in threads:
            workers = min(t, batches)    # more threads than sets would sit idle
            clients = [Client(address, timeout=120) for _ in range(workers)]
            for cl in clients:
                grpc.channel_ready_future(cl.channel).result(timeout=30)
            rates: dict[str, list[float]] = {op: [] for op in OPS}
            hists = {op: Hist() for op in OPS}
            spent: dict[str, dict[str, float]] = {op: {} for op in OPS}
            try:
                for run in range(1, runs + 1):
                    for op in PHASES:
                        tag = (name, t, run)
                        order = batch_order(op, batches, seed, *tag)
                        before = meter.read()
                        secs = phase(clients, op, order, seed, hists[op], tag)
                        meter.add(spent[op], before)
                        rates[op].append(keys / secs)
                        raw.append({"durability": name, "threads": t, "run": run, "op": op,
                                    "ops": keys, "seconds": secs, "ops_per_s": keys / secs})
                    bar.advance(task)  # type: ignore[attr-defined]
            finally:
                for cl in clients:
                    cl.close()
            for op in OPS:
                summary.append({
                    "durability": name, "threads": t, "workers": workers, "op": op,
                    "ops": keys, "runs": runs, "ops_per_s": statistics.mean(rates[op]),
                    "sd": statistics.stdev(rates[op]) if runs > 1 else 0.0,
                    "avg_ms": hists[op].mean(), "p95_ms": hists[op].pct(95),
                    **meter.per_op(spent[op], keys * runs)})
    return summary, raw


class PhaseCpu:
    """CPU a phase cost the harness, the controller and the backends (the scheduler's
    count, `loadgen/cpu.run_ms`): per operation, and the rate at which all of it would
    fill the machine's cores — what no number of client threads can pass here."""

    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.controller is not None
        self.pids = {"controller": [cluster.controller.popen.pid],
                     "backends": [b.popen.pid for b in cluster.backends]}
        self.cores = len(os.sched_getaffinity(0))
        # A kernel without per-thread schedstat: no CPU figures rather than zeros.
        self.known = all(run_ms(p) is not None for ps in self.pids.values() for p in ps)

    def read(self) -> dict[str, float]:
        out = {"harness": time.process_time() * 1000}
        for k, pids in self.pids.items():
            out[k] = sum(run_ms(p) or 0.0 for p in pids)
        return out

    def add(self, into: dict[str, float], before: dict[str, float]) -> None:
        for k, v in self.read().items():
            into[k] = into.get(k, 0.0) + v - before[k]

    def per_op(self, spent: dict[str, float], ops: int) -> Row:
        if not self.known:
            return {}
        row = {f"{k}_cpu_ms": v / ops for k, v in spent.items()}
        total = sum(spent.values()) / ops
        return {**row, "cpu_ms": total, "cores_bound_ops_s": self.cores * 1000 / total
                if total > 0 else 0.0}


def pivot(summary: list[Row]) -> list[Row]:
    """The seed's table shape: one row per configuration, ops/s and sd per operation."""
    out: dict[tuple[str, int], Row] = {}
    for s in summary:
        row = out.setdefault((s["durability"], s["threads"]),
                             {"durability": s["durability"], "threads": s["threads"],
                              "workers": s["workers"]})
        row[f"{s['op']}_ops_s"] = s["ops_per_s"]
        row[f"{s['op']}_sd"] = s["sd"]
    return list(out.values())


@click.command()
@click.option("--batches", type=int, default=10, show_default=True,
              help="Sets of ten sequential keys per operation and run (the seed: 57,600).")
@click.option("--runs", type=int, default=5, show_default=True,
              help="Runs per configuration (mean and sd of ops/s).")
@click.option("--durability", default="full,normal,off,memory", show_default=True,
              help="Durability settings, each on its own fresh cluster.")
@click.option("--threads", "threads_list", default="1,2,4,8,16", show_default=True,
              help="Client threads, each with its own connection.")
@click.option("--range-size", type=int, default=1000, show_default=True,
              help="Keys per type-A range of KNO (records one lookup's cluster holds).")
@cluster_options
def kv(batches: int, runs: int, durability: str, threads_list: str, range_size: int,
       backends: int, backend_cpus: float | None, split_search_from: int,
       internal_timing: str, seed: int,
       out: Path | None) -> None:
    """Key/value operations: durability and threads (seed 002).

    Insert, fetch, update and delete, under each durability mode and thread count."""
    modes = [m.strip().lower() for m in durability.split(",") if m.strip()]
    if bad := [m for m in modes if m not in DURABILITY]:
        raise click.BadParameter(f"unknown {bad}; choose from {', '.join(DURABILITY)}",
                                 param_hint="--durability")
    threads = int_list(threads_list)
    folder = out_dir("kv", out)
    facts = machine_facts(backends, backend_cpus, split_search_from)
    cluster_kw = {"backends": backends, "backend_cpus": backend_cpus,
                  "split_search_from": split_search_from,
                  "internal_timing": internal_timing == "on"}
    summary: list[Row] = []
    raw: list[Row] = []
    try:
        with progress() as bar:
            task = bar.add_task("kv runs", total=len(modes) * len(threads) * runs)
            for m in modes:
                s, r = run_mode(m, threads, batches, runs, range_size, seed, cluster_kw,
                                bar, task)
                summary += s
                raw += r
    except (ClientError, RuntimeError) as e:
        fail(e)
    table = pivot(summary)
    cols = ["durability", "threads", "workers"] + [f"{op}_{x}" for op in OPS
                                                   for x in ("ops_s", "sd")]
    write_csv(folder / "results.csv", summary)
    write_csv(folder / "runs.csv", raw)
    write_csv(folder / "table.csv", table)
    write_json(folder / "results.json", {
        "mode": "kv", "machine": facts, "seed": seed, "batches": batches, "runs": runs,
        "durability": {m: {"synchronous": DURABILITY[m][0], "in_memory": DURABILITY[m][1]}
                       for m in modes}, "threads": threads, "rows": summary})
    title = "Key/value operations per second (mean and sd over runs)"
    write_summary(folder / "summary.md", title, facts, cols, table, [
        f"{batches} sets of {BATCH} sequential keys per operation and run "
        f"({batches * BATCH} ops), {runs} runs; 64-byte keys and values.",
        "full/normal/off = SQLite synchronous FULL/NORMAL/OFF (WAL); memory = in-memory store.",
        "Each operation is one ABDL request, one traffic unit: an insert commits on the "
        "backend that stores it (one phase); an update or delete is prepared where it "
        "wrote and committed by the controller's logged decision (docs/commit.md).",
        "workers = threads actually used: a thread needs a set of keys to work on."])
    print_table(title, cols, table)
    cpu_cols = ["durability", "threads", "op", "harness_cpu_ms", "controller_cpu_ms",
                "backends_cpu_ms", "cpu_ms", "cores_bound_ops_s", "ops_per_s"]
    if all("cpu_ms" in s for s in summary):
        print_table("CPU ms per operation (all runs) and the ops/s at which it fills the "
                    "cores", cpu_cols, [{c: s[c] for c in cpu_cols} for s in summary])
    click.echo(f"results in {folder}")
