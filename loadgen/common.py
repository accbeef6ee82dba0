"""Shared plumbing for the seed-document benchmarks (`users`, `tp`, `kv`).

Output folders, machine facts, result files (CSV + JSON + markdown), rich
tables, a local cluster per run, and counting a reply's rows without decoding
them.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import click

from loadgen.speed import speed_probe_ms
from mbds.client import Client, ClientError
from mbds.cluster import LocalCluster

Row = dict[str, Any]


def int_list(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4] (click callback helper)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None


split_search_option = click.option(
    "--split-search-from", type=click.IntRange(min=1), default=1, show_default=True,
    help="Split descriptor search over the backends for traffic units with at least this "
         "many predicates (1: always, the paper's).")


def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every seed benchmark shares (cluster shape, seed, output)."""
    opts = [
        click.option("--backends", type=int, default=2, show_default=True,
                     help="Backends in the local cluster started for the run."),
        click.option("--backend-cpus", type=float, default=None,
                     help="CPU budget of each backend (cgroup; needs root). Default: none."),
        split_search_option,
        click.option("--internal-timing", type=click.Choice(["on", "off"]), default="off",
                     show_default=True, help="Per-handler timing in the servers."),
        click.option("--seed", type=int, default=1, show_default=True,
                     help="Random seed: the same seed gives the same workload."),
        click.option("--out", "out", type=click.Path(path_type=Path), default=None,
                     help="Output folder (default results/<mode>-<timestamp>)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def out_dir(mode: str, out: Path | None) -> Path:
    path = out or Path("results") / f"{mode}-{time.strftime('%Y%m%d-%H%M%S')}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine_facts(backends: int, backend_cpus: float | None, split_search_from: int = 1
                  ) -> Row:
    """What a reader needs to compare our numbers with another machine's."""
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "python": sys.version.split()[0], "backends": backends,
            "backend_cpus": backend_cpus if backend_cpus else "unlimited",
            "split_search_from": split_search_from,
            # Others' load on a shared machine shows up in our numbers: record it.
            "loadavg_1m": round(os.getloadavg()[0], 2),
            # …and how fast the CPU is right now (loadgen/speed.py; lower is faster).
            "speed_probe_ms": round(speed_probe_ms(), 1),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def command_line() -> str:
    """The run as a command with every option spelled out, so it can be repeated exactly."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return " ".join(sys.argv)
    parts = ["mbds bench", ctx.info_name or ""]
    for p in ctx.command.params:
        value = ctx.params.get(p.name or "")
        if not isinstance(p, click.Option) or value is None or value is False:
            continue
        flag = max(p.opts, key=len)
        parts.append(flag if p.is_flag else f"{flag} {value}")
    return " ".join(parts)


@contextmanager
def local_cluster(backends: int, **kw: Any) -> Iterator[str]:
    """A fresh cluster in a temporary folder, so every run starts from empty files."""
    with local_cluster_procs(backends, **kw) as cluster:
        yield cluster.address


@contextmanager
def local_cluster_procs(backends: int, *, backend_cpus: float | None = None,
                        internal_timing: bool = False, synchronous: str = "NORMAL",
                        in_memory: bool = False, split_search_from: int = 1,
                        prefix: Sequence[str] = (), start_timeout: float = 30.0
                        ) -> Iterator[LocalCluster]:
    """`local_cluster`, yielding the cluster itself (its processes, for CPU accounting)."""
    with tempfile.TemporaryDirectory(prefix="mbds-bench-") as tmp:
        # The folder's unique name also names the backends' cgroups (--backend-cpus),
        # so concurrent runs never share a CPU budget.
        cluster = LocalCluster(Path(tmp), backends, internal_timing=internal_timing,
                               synchronous=synchronous, in_memory=in_memory,
                               backend_cpus=backend_cpus,
                               split_search_from=split_search_from,
                               prefix=prefix, start_timeout=start_timeout)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()          # also removes the backends' cgroups


def define(client: Client, yaml_text: str) -> None:
    """Apply a definition (untimed set-up)."""
    client.define(yaml_text)


class Counted(NamedTuple):
    rows: int              # rows received
    changed: int           # records retrieved or changed, as the controller counted them
    clusters: int          # clusters examined
    system_ms: float       # the controller's own elapsed time (inside MBDS, no client)
    backend_ms: float      # the slowest backend's own time (DM + CC + RECP)
    backend_mean_ms: float = 0.0    # …and the mean over the backends


def run_counted(client: Client, text: str) -> Counted:
    """Send one traffic unit and count what came back.

    Counts `rows.count` instead of decoding the JSON rows: the client's own
    decoding time would otherwise be part of every measured response.
    """
    rows = changed = clusters = 0
    system_ms = backend_ms = backend_mean = 0.0
    for reply in client.stream(text):
        kind = reply.WhichOneof("body")
        if kind == "rows":
            rows += reply.rows.count
        elif kind == "done":
            changed += reply.done.stats.records_retrieved
            clusters += reply.done.stats.clusters_examined
            system_ms += reply.done.elapsed_ms
            each = [b.elapsed_ms for b in reply.done.stats.backends]
            backend_ms += max(each, default=0.0)
            backend_mean += sum(each) / len(each) if each else 0.0
    return Counted(rows, changed, clusters, system_ms, backend_ms, backend_mean)


def rng(seed: int, *parts: object) -> random.Random:
    """An independent, reproducible stream per (seed, user, purpose)."""
    return random.Random("-".join(map(str, (seed, *parts))))


def padded(prefix: str, width: int) -> str:
    """A string of exactly `width` characters (fixed-size fields, like the seeds' records)."""
    return (prefix + "x" * width)[:width]


def quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Gate:
    """Start every worker thread at once and time from the release to the last finish."""

    def __init__(self, workers: int) -> None:
        self.barrier = threading.Barrier(workers + 1)
        self.errors: list[BaseException] = []
        self.t0 = 0.0

    def run(self, targets: Sequence[Callable[[], None]]) -> float:
        def wrap(fn: Callable[[], None]) -> Callable[[], None]:
            def go() -> None:
                try:
                    self.barrier.wait()
                    fn()
                except BaseException as e:      # re-raised in the caller
                    self.errors.append(e)
                    self.barrier.abort()
            return go
        threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
        for t in threads:
            t.start()
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            pass
        self.t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - self.t0
        errs = [e for e in self.errors if not isinstance(e, threading.BrokenBarrierError)]
        if errs:
            raise errs[0]
        return elapsed


# --- result files -------------------------------------------------------------------------

def write_csv(path: Path, rows: Sequence[Row]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str) + "\n")


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if 0 < abs(v) < 0.01:         # e.g. the harness-only run: keep its digits
            return f"{v:.3g}"
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    return str(v)


def md_table(columns: Sequence[str], rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_summary(path: Path, title: str, facts: Row, columns: Sequence[str],
                  rows: Sequence[Row], notes: Sequence[str] = ()) -> None:
    text = [f"# {title}", "", "```sh", command_line(), "```", "",
            "Machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()), "",
            md_table(columns, rows), ""]
    text += [f"- {n}" for n in notes]
    path.write_text("\n".join(text) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Row]) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*(fmt(r.get(c, "")) for c in columns))
    console = Console()
    if not console.is_terminal:     # piped or captured: do not squeeze columns into 80
        console = Console(width=200)
    console.print(table)


def progress() -> Any:
    """A rich progress bar on stderr (stdout keeps the table clean for piping)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    return Progress("[progress.description]{task.description}", BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def fail(e: Exception) -> None:
    """Errors from the system end the run with a message, not a traceback."""
    if isinstance(e, ClientError):
        raise click.ClickException(f"{e.code}: {e}")
    raise click.ClickException(str(e))
