"""`mbds bench load`: bulk-load records/s through MBDS beside `executemany` into a bare
SQLite file, with the same records, measured one after the other in one run.

The records are the paper's (docs/spec.md §5: 33 attributes, about 200 bytes), built before
any clock starts. The floor is what the storage itself takes: one `executemany` of
them into a WAL SQLite file with the records' columns and nothing else (no cluster
index, no undo, no network), in one transaction. MBDS loads them through the client
into a fresh cluster: one backend without a CPU budget (its ratio to the floor is the
figure to watch), and, with --backend-cpus, one and two backends each with that
budget (the gain from a second backend when the backends are the bottleneck).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from loadgen import paper_db as P
from loadgen.common import fail, local_cluster_procs, print_table
from loadgen.cpu import CpuMeter
from mbds.client import LOAD_CHUNK, Client, ClientError
from mbds.service import MAX_LOAD_RECORDS

Record = tuple[list[int | str], None]


def sqlite_floor(records: list[Record]) -> dict[str, Any]:
    """Seconds (and CPU seconds) to `executemany` the records into a bare WAL SQLite
    file, commit included."""
    cols = ", ".join(f'"{a}"' for a in P.ATTRIBUTES)
    with tempfile.TemporaryDirectory(prefix="mbds-bench-load-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "bare.db", isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"CREATE TABLE paper ({cols})")
            rows = [values for values, _ in records]
            t0, cpu0 = time.perf_counter(), time.process_time()
            conn.execute("BEGIN")
            conn.executemany(f"INSERT INTO paper VALUES ({', '.join('?' * len(P.ATTRIBUTES))})",
                             rows)
            conn.execute("COMMIT")
            return {"seconds": time.perf_counter() - t0,
                    "cpu": {"harness": time.process_time() - cpu0}}
        finally:
            conn.close()


def mbds_load(records: list[Record], scale: int, backends: int, cpus: float | None,
              chunk: int) -> dict[str, Any]:
    """Load the records into a fresh cluster; seconds from the first batch sent to the
    last acknowledged, the CPU each part spent, and a count to prove they are all there."""
    with local_cluster_procs(backends, backend_cpus=cpus) as cluster, \
            Client(cluster.address) as client:
        client.define(P.definition_yaml(scale))
        meter = CpuMeter(cluster)
        before = meter.read()
        t0 = time.perf_counter()
        loaded = sum(d.stats.records_retrieved
                     for d in client.load(P.FILE, P.ATTRIBUTES, records, chunk=chunk))
        seconds = time.perf_counter() - t0
        cpu = meter.spent(before, meter.read())
        count = client.execute(f"RETRIEVE (FILE = {P.FILE}) (COUNT(INTE1))")[0]
        stored = count.records[0]["COUNT(INTE1)"]
    if loaded != len(records) or stored != len(records):
        raise click.ClickException(f"{backends} backends: {len(records)} records sent, "
                                   f"{loaded} acknowledged, {stored} stored")
    return {"seconds": seconds, "cpu": cpu}


def _row(name: str, n: int, m: dict[str, Any]) -> dict[str, Any]:
    cpu = m["cpu"]
    return {"load": name, "records": n, "seconds": round(m["seconds"], 3),
            "records/s": round(n / m["seconds"]),
            "cpu s client": round(cpu["harness"], 2),
            "cpu s controller": round(cpu["controller"], 2) if "controller" in cpu else "",
            "cpu s backends": round(cpu["backends"], 2) if "backends" in cpu else ""}


@click.command("load")
@click.option("--records", type=click.IntRange(1000), default=100_000, show_default=True,
              help="Records to load (rounded down to a multiple of 1000: the paper's scale).")
@click.option("--chunk", type=click.IntRange(1, MAX_LOAD_RECORDS), default=LOAD_CHUNK,
              show_default=True,
              help="Records per batch (one traffic unit each).")
@click.option("--backend-cpus", type=float, default=None,
              help="Also load into 1 and 2 backends each held to this CPU budget (cgroups).")
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True,
              help="Measure every load this many times, in turn; the fastest of each counts "
                   "(on a shared machine the others' work only ever slows a run down).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def load(records: int, chunk: int, backend_cpus: float | None, rounds: int,
         as_json: bool) -> None:
    """Bulk-load records/s, beside executemany into bare SQLite.

    MBDS on one backend and on two, side by side with executemany of the same rows."""
    scale = records // 1000
    data: list[Record] = list(P.records(scale))
    n = len(data)
    configs = [(1, None)] + ([(1, backend_cpus), (2, backend_cpus)] if backend_cpus else [])
    best: list[dict[str, Any] | None] = [None] * (1 + len(configs))
    try:
        for _ in range(rounds):
            for i, m in enumerate([sqlite_floor(data)] + [
                    mbds_load(data, scale, b, cpus, chunk) for b, cpus in configs]):
                if best[i] is None or m["seconds"] < best[i]["seconds"]:  # type: ignore[index]
                    best[i] = m
    except ClientError as e:
        fail(e)
    names = ["executemany, bare WAL SQLite file"] + [
        f"MBDS, {b} backend{'s' * (b > 1)}, " + (f"{cpus:g} CPU each" if cpus else
                                                  "no CPU budget") for b, cpus in configs]
    rows = [_row(name, n, m) for name, m in zip(names, best, strict=True) if m is not None]
    ratio = rows[1]["records/s"] / rows[0]["records/s"]
    speedup = (rows[3]["records/s"] / rows[2]["records/s"]) if backend_cpus else None
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        click.echo(json.dumps({"ratio_mbds_1_to_executemany": round(ratio, 3),
                               "speedup_2_to_1_budgeted": speedup and round(speedup, 3)}))
        return
    print_table(f"Bulk load of {n} paper records, batches of {chunk}, best of {rounds}",
                ["load", "records", "seconds", "records/s", "cpu s client",
                 "cpu s controller", "cpu s backends"], rows)
    click.echo(f"ratio MBDS (1 backend, no budget) / executemany: {ratio:.2f}")
    if speedup is not None:
        click.echo(f"2 backends / 1 backend at {backend_cpus:g} CPU each: {speedup:.2f}x")
