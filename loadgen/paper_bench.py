"""`mbds bench paper`: the paper's experiments (docs/spec.md §5) for any list of backend counts.

Configurations: A (1 backend, the database), B_n (n backends, the same
database), C_n (n backends, n times the database: MULTI = One, Two, …), each
with internal timing off (.E) and, for A and B_n, on (.I). Every
configuration gets a fresh cluster, so no run sees another's data or caches.
Response time is measured as the paper did — from issuing the request to
receiving the whole answer — by a client that counts the streamed rows
without decoding them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import click
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from loadgen import paper_db as P
from loadgen import paper_report
from loadgen.common import Counted, run_counted, split_search_option
from loadgen.compose_cluster import ComposeCluster
from loadgen.cpu import BackendCpu
from loadgen.paper_control import Together, start_together
from loadgen.paper_results import Config, ConfigResult, write_json
from loadgen.paper_summary import console_for_summary
from loadgen.speed import speed_probe_ms
from loadgen.table8 import Scrape, handler_rows, scrape, settle
from mbds.client import Client
from mbds.cluster import LocalCluster

console = console_for_summary()


def configurations(backends: list[int], timings: list[bool], control: bool = False
                   ) -> list[Config]:
    out = []
    for timing in timings:
        tag = "I" if timing else "E"
        out.append(Config(f"A.{tag}", "A", 1, 1, timing))
        for n in (b for b in backends if b > 1):
            out.append(Config(f"B{n}.{tag}", "B", n, 1, timing))
            if not timing:    # like the paper, C is measured without internal timing
                out.append(Config(f"C{n}.{tag}", "C", n, n, timing))
            if control and not timing:    # multi 1: each of its n clusters holds A's records
                out.append(Config(f"Ax{n}.{tag}", "X", n, 1, timing))
    return out


def timed_request(client: Client | Together, text: str) -> tuple[float, Counted]:
    """(response time ms, what came back) of one request."""
    if isinstance(client, Together):
        return client.timed(text)
    t0 = time.perf_counter()
    counted = run_counted(client, text)
    return (time.perf_counter() - t0) * 1000, counted


def handler_means(before: Scrape, after: Scrape, runs: int) -> list[dict]:
    """Table 8 rows as the report files keep them: each handler's mean time per call and
    calls per request, by (process, handler, backend)."""
    return [{"process": r.process, "handler": r.handler, "backend": r.backend or "-",
             "mean_ms": r.ms_per_call, "calls_per_request": r.calls_per_request}
            for r in sorted(handler_rows(before, after, runs),
                            key=lambda r: (r.process, r.handler, r.backend))]


@dataclass
class Running:
    """One configuration's cluster, up and loaded, with its client."""
    result: ConfigResult
    cluster: LocalCluster | ComposeCluster | Together
    client: Client | Together
    urls: list[str]
    cpu: BackendCpu | None = None


def start_config(cfg: Config, *, scale: int, record_bytes: int, backend_cpus: float | None,
                 workdir: Path, metrics_port: int, compose: bool = False,
                 split_search_from: int = 1,
                 advance: Callable[[int], object] | None = None) -> Running:
    """Start a fresh cluster for `cfg` and load its database (untimed); `advance` hears
    each loaded chunk's record count."""
    if cfg.kind == "X":
        together, load_s = start_together(cfg, scale=scale, record_bytes=record_bytes,
                                          backend_cpus=backend_cpus, workdir=workdir,
                                          advance=advance)
        meter = BackendCpu(together)
        return Running(ConfigResult(cfg, load_s=load_s), together, together, [],
                       None if meter.read() is None else meter)
    cluster: LocalCluster | ComposeCluster
    if compose:
        cluster = ComposeCluster(cfg.backends, internal_timing=cfg.timing,
                                 backend_cpus=backend_cpus)
    else:
        cluster = LocalCluster(workdir / cfg.name, cfg.backends, internal_timing=cfg.timing,
                               backend_cpus=backend_cpus,
                               metrics_port=metrics_port if cfg.timing else None, timeout=600,
                               split_search_from=split_search_from)
    cluster.start()
    res = ConfigResult(cfg)
    try:
        c = Client(cluster.address, timeout=600, ca=cluster.ca)
        t0 = time.perf_counter()
        P.load(c, scale, cfg.multi, record_bytes, advance)
        res.load_s = time.perf_counter() - t0
        urls: list[str] = []
        if cfg.timing:
            s = c.status()
            urls = [s.metrics_url] + [b.metrics_url for b in s.backends]
    except BaseException:
        cluster.stop()
        raise
    cpu: BackendCpu | None = None
    if isinstance(cluster, LocalCluster):
        cpu = BackendCpu(cluster)
        if cpu.read() is None:      # no per-thread CPU counts on this kernel
            cpu = None
    return Running(res, cluster, c, urls, cpu)


def work(cfg: Config, request: int, scale: int) -> float:
    """A run's expected cost, for the progress bar's ETA: the records its busiest backend
    retrieves (B_n splits A's among n; C_n and A×n give each backend A's), plus a fixed
    part for the request's round trip (request 1 retrieves almost nothing)."""
    records = P.REQUESTS[request - 1].expected_records(scale, 1)
    return records / (cfg.backends if cfg.kind == "B" else 1) + 10 * scale + 100


def measure(running: list[Running], *, scale: int, runs: int, requests: list[int],
            table8: list[int], progress: Progress) -> None:
    """Every request `runs` times on every configuration, interleaved.

    Run r of a request goes to every configuration in turn (the order rotating with r),
    so a slow spell of the machine falls on all configurations alike instead of on
    whichever one happened to be measured then.
    """
    task = progress.add_task("measuring", total=sum(
        (runs + 1) * work(r.result.config, q, scale) for q in requests for r in running))
    for n in requests:
        progress.update(task, description=f"measuring request {n}")
        text = P.REQUESTS[n - 1].abdl(scale)
        for r in running:
            timed_request(r.client, text)            # warm-up: caches as in steady state
            progress.advance(task, work(r.result.config, n, scale))
        before = {id(r): scrape(r.urls) for r in running if r.urls and n in table8}
        times: dict[int, list[float]] = {id(r): [] for r in running}
        own: dict[int, list[tuple[float, float]]] = {id(r): [] for r in running}
        cpu: dict[int, list[tuple[float, float]]] = {id(r): [] for r in running}
        for k in range(runs):
            for r in running[k % len(running):] + running[:k % len(running)]:
                cpu0 = r.cpu.read() if r.cpu else None
                ms, got = timed_request(r.client, text)
                cpu1 = r.cpu.read() if r.cpu else None
                times[id(r)].append(ms)
                own[id(r)].append((got.backend_mean_ms, got.backend_ms))
                if cpu0 is not None and cpu1 is not None:
                    spent = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
                    cpu[id(r)].append((statistics.fmean(spent), max(spent)))
                r.result.records[n], r.result.clusters[n] = got.rows, got.clusters
                progress.advance(task, work(r.result.config, n, scale))
        for r in running:
            r.result.times_ms[n] = times[id(r)]
            r.result.backend_ms[n] = own[id(r)]
            if cpu[id(r)]:
                r.result.backend_cpu_ms[n] = cpu[id(r)]
            if id(r) in before:
                r.result.handlers[n] = handler_means(before[id(r)],
                                                     settle(r.urls, scrape(r.urls)), runs)
    progress.remove_task(task)


def machine(backend_cpus: float | None, compose: bool, split_search_from: int = 1) -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(),
            "backend_cpus": backend_cpus or (0.5 if compose else None),
            "mode": "docker-compose" if compose else "local processes",
            "split_search_from": split_search_from}


@click.command()
@click.option("--backends", default="1,2,4", show_default=True,
              help="Backend counts n: A is 1, B_n and C_n for each n > 1.")
@click.option("--scale", type=int, default=1, show_default=True,
              help="k: the database has 1000k records (C_n: n times that).")
@click.option("--record-bytes", type=int, default=200, show_default=True)
@click.option("--runs", type=int, default=10, show_default=True, help="Runs per request.")
@click.option("--requests", default="1,2,3,4,5,6,7,8,9", show_default=True)
@click.option("--timing", default="off,on", show_default=True,
              help="Internal timing: off (.E configurations), on (.I), or both.")
@click.option("--table8", default="1,2", show_default=True,
              help="Requests whose per-handler means make Table 8 (needs timing on).")
@click.option("--backend-cpus", type=float, default=None,
              help="CPU budget per backend (cgroup), e.g. 0.5: a backend is its own machine.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Results directory (default results/paper-<time>).")
@click.option("--metrics-base", type=int, default=None,
              help="First /metrics port; configuration i uses a block from base + (max n + 1) i. "
                   "Default: each process binds a free port of its own and reports it.")
@split_search_option
@click.option("--control", is_flag=True,
              help="Also run A×n for each n > 1: n one-backend clusters (A's records and "
                   "budget each) asked at once, timed to the slowest answer. C_n against it "
                   "is what MBDS adds; A×n against A what the machine adds.")
@click.option("--compose", is_flag=True,
              help="Run each configuration on docker-compose (images from "
                   "docker/build-images.sh); --backend-cpus is each container's CPU limit.")
@click.option("--table2", "table2_file", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path), default=None,
              help="Table 2 as `mbds paper table2 --save` wrote it: into the report, and "
                   "request 1's median on 2 backends without a budget into the verdicts.")
@click.option("--tables", "all_tables", is_flag=True,
              help="Print every table (Tables 3–8 and their parts), not only the summary.")
def paper(backends: str, scale: int, record_bytes: int, runs: int, requests: str, timing: str,
          table8: str, backend_cpus: float | None, out: Path | None, metrics_base: int | None,
          split_search_from: int, control: bool, compose: bool, table2_file: Path | None,
          all_tables: bool) -> None:
    """The paper's Tables 3–8 on local clusters, with verdicts.

    Prints the claims at a glance and the verdicts (all tables in report.md, or here
    with --tables)."""
    try:
        import matplotlib  # noqa: F401 - fail before hours of measuring, not after
    except ImportError:
        raise click.ClickException("mbds bench paper draws plots with matplotlib: "
                                   "pip install 'mbds[bench]'") from None
    if compose and split_search_from != 1:
        raise click.ClickException("--split-search-from is for local clusters; with --compose "
                                   "set MBDS_SPLIT_SEARCH_FROM in the compose environment")
    if compose and control:
        raise click.ClickException("--control runs local clusters only; drop --compose")
    if control and "off" not in timing:
        raise click.ClickException("--control needs --timing off (A×n is measured without "
                                   "internal timing, as A.E and C_n.E are)")
    table2 = read_table2(table2_file) if table2_file else None
    counts = sorted({int(x) for x in backends.split(",")} | {1})
    timings = [t.strip() == "on" for t in timing.split(",")]
    reqs = [int(x) for x in requests.split(",")]
    out = out or Path("results") / time.strftime("paper-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    running: list[Running] = []
    configs = configurations(counts, timings, control)
    speed = {"before": speed_probe_ms()}
    with tempfile.TemporaryDirectory(prefix="mbds-bench-") as tmp, Progress(
            TextColumn("{task.description:<22}"), BarColumn(), TaskProgressColumn(),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=True) as progress:
        try:
            # Every configuration's cluster is up at once (idle ones cost no CPU), so
            # their runs can be interleaved; each has its own ports and files.
            total = sum(loaded_records(cfg, scale) for cfg in configs)
            task = progress.add_task("loading", total=total)
            t0 = time.perf_counter()
            for i, cfg in enumerate(configs):
                progress.update(task, description=f"loading {cfg.name}")
                running.append(start_config(
                    cfg, scale=scale, record_bytes=record_bytes, backend_cpus=backend_cpus,
                    workdir=Path(tmp), metrics_port=(metrics_base + (max(counts) + 1) * i
                                                  if metrics_base else 0),
                    compose=compose, split_search_from=split_search_from,
                    advance=lambda k: progress.advance(task, k)))
            progress.remove_task(task)
            console.print(f"loaded {len(configs)} configurations ({total:,} records) in "
                          f"{time.perf_counter() - t0:.0f} s; measuring {runs} runs of "
                          f"{len(reqs)} requests on each")
            measure(running, scale=scale, runs=runs, requests=reqs,
                    table8=[int(x) for x in table8.split(",") if x], progress=progress)
            speed["after"] = speed_probe_ms()
        finally:
            for r in running:
                r.client.close()
                r.cluster.stop()
    results = [r.result for r in running]
    meta = {"scale": scale, "record_bytes": record_bytes, "runs": runs, "requests": reqs,
            "backends": counts, "machine": machine(backend_cpus, compose, split_search_from) | {
                "speed_probe_ms": speed},
            "configs": [asdict(r.config) for r in results]}
    if table2 is not None:
        meta["table2"] = table2
    paper_report.write(out, meta, results, console, all_tables=all_tables)
    write_json(out / "meta.json", meta)


def loaded_records(cfg: Config, scale: int) -> int:
    """Records a configuration loads: A×n loads A's records into each of its n clusters."""
    return cfg.records * scale * (cfg.backends if cfg.kind == "X" else 1)


def read_table2(path: Path) -> dict:
    """Table 2 as `mbds paper table2 --save` wrote it, or a clear error naming what is wrong."""
    try:
        t2 = json.loads(path.read_text())
        rows = t2["rows"]
        for r in rows:
            if not (isinstance(r["request"], int) and isinstance(r["median_ms"], (int, float))):
                raise ValueError(f"row {str(r)[:80]} has no integer request and median_ms")
        for key in ("scale", "multi", "runs", "backends"):
            if not isinstance(t2[key], int):
                raise ValueError(f"{key} is not an integer")
    except (OSError, ValueError, KeyError, TypeError) as e:
        what = f"missing {e}" if isinstance(e, KeyError) else str(e)[:200]
        raise click.ClickException(f"--table2 {path}: not a `mbds paper table2 --save` "
                                   f"file ({what})") from None
    return t2
