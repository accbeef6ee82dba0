"""`mbds load paper` and `mbds paper table2`: the paper's test database and its Table 2."""

from __future__ import annotations

import json
import sys
import time

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from cli.options import controller_option, fail
from loadgen import paper_db as P
from loadgen.table2 import run_table2
from mbds.client import Client, ClientError


@click.group()
def load() -> None:
    """Load a test database through the controller."""


@load.command("paper")
@controller_option
@click.option("--scale", type=int, default=1, show_default=True, help="k: 1000k records.")
@click.option("--multi", type=int, default=1, show_default=True,
              help="M copies of every record (MULTI = One, Two, ...).")
@click.option("--record-bytes", type=int, default=200, show_default=True)
@click.option("--chunk", type=int, default=2000, show_default=True)
def load_paper(controller: str, scale: int, multi: int, record_bytes: int, chunk: int) -> None:
    """Define and load the paper's test database (SPEC §5)."""
    total = 1000 * scale * multi
    t0 = time.perf_counter()
    try:
        with Client(controller) as c:
            c.define(P.definition_yaml(scale))
            done = 0
            with Progress(transient=True) as bar:
                task = bar.add_task("loading", total=total)
                for d in c.load(P.FILE, P.ATTRIBUTES, P.records(scale, multi, record_bytes),
                                chunk=chunk):
                    done += d.stats.records_retrieved
                    bar.update(task, completed=done)
    except ClientError as e:
        fail(e)
    click.echo(f"loaded {done} records into {P.FILE} in {time.perf_counter() - t0:.1f} s")


@click.group()
def paper() -> None:
    """The paper's request set."""


@paper.command("table2")
@controller_option
@click.option("--scale", type=int, default=1, show_default=True)
@click.option("--multi", type=int, default=1, show_default=True)
@click.option("--runs", type=int, default=1, show_default=True,
              help="Run each request this many times and report the median response time.")
@click.option("--json", "as_json", is_flag=True)
def table2(controller: str, scale: int, multi: int, runs: int, as_json: bool) -> None:
    """Run the nine requests; clusters examined and records retrieved beside the paper's."""
    try:
        with Client(controller) as c:
            rows = run_table2(c, scale, multi, runs)
    except ClientError as e:
        fail(e)
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
    else:
        t = Table("request", "clusters examined", "paper", "records retrieved", "paper",
                  "match", f"median ms ({runs} runs)",
                  title=f"Table 2 (scale {scale}, multi {multi})")
        for r in rows:
            t.add_row(str(r["request"]), str(r["clusters_examined"]), str(r["paper_clusters"]),
                      str(r["records_retrieved"]), str(r["paper_records"]),
                      "yes" if r["match"] else "NO", f"{r['median_ms']:.2f}")
        Console().print(t)
    sys.exit(0 if all(r["match"] for r in rows) else 1)
