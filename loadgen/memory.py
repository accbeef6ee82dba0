"""`mbds bench memory` — resident memory of every process per 10,000 traffic units.

Starts a local cluster, warms it up, then drives it with mixed traffic (small
RETRIEVEs, INSERTs, UPDATEs that change a record or move it to another cluster,
aggregates, DELETEs and transactions, from several client threads, each with
its own session) and a bulk load per step (`Client.load`, the path `mbds load`
takes). After every step it reads each process's VmRSS from /proc/<pid>/status
while the cluster is idle. A process whose memory rises from one reading to the
next keeps something of every traffic unit (docs/memory.md).

Every thread inserts and deletes in its own key range and leaves it empty at the
end of each round, so the stored records (but for the bulk loads) and the
directory stay the same size: what grows is the processes, not the data.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
import grpc

from loadgen import paper_db
from loadgen.common import (
    Row,
    cluster_options,
    fail,
    local_cluster_procs,
    machine_facts,
    out_dir,
    print_table,
    progress,
    rng,
    write_csv,
    write_json,
    write_summary,
)
from mbds.client import Client, ClientError, Result
from mbds.cluster import LocalCluster

FILE = "SOAK"
BASE = 1000                 # records K = 0 … BASE-1, loaded once and only read
RANGE = 1000                # keys per type-A range of K; thread j owns range j + 1
GROUPS = ["A", "B", "C"]
WAIT_S = 600.0              # a step fails after this long plus UNIT_S per unit
UNIT_S = 0.05               # …a generous bound (a unit takes a few ms here)


def definition(threads: int) -> str:
    ranges = [[lo, lo + RANGE - 1] for lo in range(0, RANGE * (threads + 1), RANGE)]
    return (f"files:\n  {FILE}:\n"
            f"    attributes: {{K: integer, G: string, V: integer, S: string}}\n"
            f"    directory:\n      K: {{type: A, ranges: {ranges}}}\n"
            f"      G: {{type: B, values: {GROUPS}}}\n")


def rss_mb(pid: int) -> float:
    """The process's resident set (VmRSS) in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def processes(cluster: LocalCluster) -> dict[str, int]:
    """Process name -> pid: the controller, then the backends b0, b1, …"""
    assert cluster.controller is not None
    out = {"controller": cluster.controller.popen.pid}
    out.update({f"b{i}": p.popen.pid for i, p in enumerate(cluster.backends)})
    return out


def sample(cluster: LocalCluster) -> dict[str, float]:
    return {name: rss_mb(pid) for name, pid in processes(cluster).items()}


def round_requests(j: int, i: int, k: int) -> list[tuple[str, list[int]]]:
    """Thread j's round i (seven traffic units; k: a base record to read), each with
    the records every request of it must report."""
    lo = RANGE * (j + 1)
    s = lo + i % RANGE
    g, moved = GROUPS[i % len(GROUPS)], GROUPS[(i + 1) % len(GROUPS)]
    mine = f"(FILE = {FILE}) and (K >= {lo}) and (K <= {lo + RANGE - 1})"
    return [
        (f"RETRIEVE ((FILE = {FILE}) and (K = {k})) (K, G, V)", [1]),
        (f"INSERT (<FILE, {FILE}>, <K, {s}>, <G, {g}>, <V, {i}>, <S, 'round {i}'>)", [1]),
        (f"UPDATE ((FILE = {FILE}) and (K = {s})) <V = V + 1>", [1]),
        (f"UPDATE ((FILE = {FILE}) and (K = {s})) <G = {moved}>", [1]),   # another cluster
        (f"RETRIEVE ({mine}) (COUNT(K), SUM(V)) BY G", [1]),
        (f"DELETE ((FILE = {FILE}) and (K = {s}))", [1]),
        (f"[ INSERT (<FILE, {FILE}>, <K, {s}>, <G, {g}>, <V, 0>); "
         f"UPDATE ((FILE = {FILE}) and (K = {s})) <V = V + 2>; "
         f"RETRIEVE ((FILE = {FILE}) and (K = {s})) (V); "
         f"DELETE ((FILE = {FILE}) and (K = {s})) ]", [1, 1, 1, 1]),
    ]


def _check(text: str, results: list[Result], want: list[int]) -> None:
    got = [r.stats.get("records_retrieved", 0) if r.op != "RETRIEVE"
           else len(r.records) for r in results]
    if got != want:
        raise RuntimeError(f"{text}: records {got}, expected {want}")


class Traffic:
    """Mixed traffic from `threads` clients, each with its own session."""

    def __init__(self, address: str, threads: int, seed: int, timeout: float = 120.0) -> None:
        self.clients = [Client(address, timeout=timeout) for _ in range(threads)]
        for c in self.clients:
            grpc.channel_ready_future(c.channel).result(timeout=30)
        self.streams = [self._requests(j, rng(seed, "memory", j)) for j in range(threads)]
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="traffic")

    @staticmethod
    def _requests(j: int, r: random.Random) -> Iterator[tuple[str, list[int]]]:
        """Thread j's requests, round after round (a step may end inside a round)."""
        i = 0
        while True:
            yield from round_requests(j, i, r.randrange(BASE))
            i += 1

    def setup(self, load_scale: int) -> None:
        """Define the files and load the records every round reads."""
        c = self.clients[0]
        c.define(definition(len(self.clients)))
        if load_scale:
            c.define(paper_db.definition_yaml(load_scale))
        for _ in c.load(FILE, ["K", "G", "V", "S"],
                        (([k, GROUPS[k % len(GROUPS)], k, f"base {k}"], None)
                         for k in range(BASE))):
            pass

    def run(self, units: int, on_unit: Callable[[], None] = lambda: None) -> int:
        """`units` traffic units, split over the threads; returns `units`.
        `on_unit()` is called after each."""
        n = len(self.clients)
        failed = threading.Event()

        def worker(j: int) -> None:
            c, requests = self.clients[j], self.streams[j]
            try:
                for _ in range(units // n + (j < units % n)):
                    if failed.is_set():      # another thread failed: the step is over
                        return
                    text, want = next(requests)
                    _check(text, c.execute(text), want)
                    on_unit()
            except BaseException:
                failed.set()
                raise

        futures = [self.pool.submit(worker, j) for j in range(n)]
        try:
            for f in futures:
                f.result(timeout=WAIT_S + units * UNIT_S)
        finally:
            failed.set()                     # nothing more to do after a failure or timeout
        return units

    def load(self, scale: int) -> int:
        """A bulk load of the paper's records (1,000 × scale); returns the records stored."""
        return sum(d.stats.records_retrieved for d in self.clients[0].load(
            paper_db.FILE, paper_db.ATTRIBUTES, paper_db.records(scale)))

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for c in self.clients:
            c.close()


def measure(cluster: LocalCluster, *, units: int, every: int, threads: int, load_scale: int,
            warmup: int, seed: int, on_unit: Callable[[], None] = lambda: None
            ) -> list[Row]:
    """Warm up (a bulk load, then traffic), then step a bulk load and `every` units at a
    time up to `units`; one row per checkpoint with every process's RSS in MB, read
    after traffic (right after a bulk load the C heap's top is briefly higher)."""
    traffic = Traffic(cluster.address, threads, seed)
    try:
        traffic.setup(load_scale)
        if load_scale:
            traffic.load(load_scale)
        traffic.run(warmup, on_unit)
        rows = [{"units": 0, "loaded": 0, **sample(cluster)}]
        done = loaded = 0
        while done < units:
            if load_scale:
                loaded += traffic.load(load_scale)
            done += traffic.run(min(every, units - done), on_unit)
            rows.append({"units": done, "loaded": loaded, **sample(cluster)})
        return rows
    finally:
        traffic.close()


def growth_per(rows: list[Row], names: list[str], per: int) -> Row:
    """RSS growth per `per` units from after the warm-up to the end, in MB."""
    first, last = rows[0], rows[-1]
    span = max(1, last["units"] - first["units"])
    return {n: (last[n] - first[n]) * per / span for n in names}


@click.command()
@click.option("--units", type=int, default=50_000, show_default=True,
              help="Traffic units (requests or transactions) after the warm-up.")
@click.option("--every", type=int, default=10_000, show_default=True,
              help="Units between two readings of the processes' memory.")
@click.option("--threads", type=int, default=4, show_default=True,
              help="Client threads, each with its own session.")
@click.option("--load-scale", type=int, default=10, show_default=True,
              help="Bulk load of 1,000 × this many paper records at each step "
                   "(and in the warm-up); 0 for none.")
@click.option("--warmup", type=int, default=5_000, show_default=True,
              help="Units before the first reading.")
@cluster_options
def memory(units: int, every: int, threads: int, load_scale: int, warmup: int,
           backends: int, backend_cpus: float | None, split_search_from: int,
           internal_timing: str, seed: int, out: Path | None) -> None:
    """Resident memory per 10,000 traffic units (leaks).

    Of every process of the cluster, as the units run."""
    if units < 1 or every < 1 or threads < 1:
        raise click.BadParameter("--units, --every and --threads must be at least 1")
    folder = out_dir("memory", out)
    facts = machine_facts(backends, backend_cpus, split_search_from)
    try:
        with progress() as bar, local_cluster_procs(
                backends, backend_cpus=backend_cpus, split_search_from=split_search_from,
                internal_timing=internal_timing == "on") as cluster:
            task = bar.add_task("traffic units", total=warmup + units)
            rows = measure(cluster, units=units, every=every, threads=threads,
                           load_scale=load_scale, warmup=warmup, seed=seed,
                           on_unit=lambda: bar.advance(task))
    except (ClientError, RuntimeError) as e:
        fail(e)
    names = [k for k in rows[0] if k not in ("units", "loaded")]
    per = 10_000
    growth = growth_per(rows, names, per)
    table: list[Row] = [{"process": n, **{f"{r['units']:,}": f"{r[n]:.1f}" for r in rows},
                         f"growth/{per:,}": f"{growth[n]:+.1f}"} for n in names]
    cols = ["process", *[f"{r['units']:,}" for r in rows], f"growth/{per:,}"]
    write_csv(folder / "results.csv", rows)
    args: dict[str, Any] = {"units": units, "every": every, "threads": threads,
                            "load_scale": load_scale, "warmup": warmup}
    write_json(folder / "results.json", {
        "mode": "memory", "machine": facts, "seed": seed, **args, "rows": rows,
        f"growth_mb_per_{per}": growth})
    title = "Resident memory (MB) per process after N traffic units"
    notes = [f"Columns: traffic units after a warm-up of {warmup:,}; "
             f"{threads} client threads of mixed requests and transactions.",
             f"growth/{per:,}: MB per {per:,} units from the first column to the last."]
    if load_scale:
        notes.append(f"Each step, and the warm-up, begins with a bulk load of "
                     f"{1000 * load_scale:,} paper records (Client.load, `mbds load`'s path).")
    write_summary(folder / "summary.md", title, facts, cols, table, notes)
    print_table(title, cols, table)
    click.echo(f"results in {folder}")
