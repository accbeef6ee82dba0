"""`mbds report handlers`: the paper's Table 8 for this system (loadgen/table8.py)."""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.table import Table

from cli.options import controller_option, fail
from cli.tables import console
from loadgen import paper_db as P
from loadgen.table8 import ReportError, measure_handlers
from mbds.client import Client, ClientError


@click.group()
def report() -> None:
    """Reports built from the processes' Prometheus metrics."""


@report.command("handlers")
@controller_option
@click.option("--request", "request", type=click.IntRange(1, len(P.REQUESTS)), default=1,
              show_default=True, help="The paper's request to run (docs/benchmarks.md).")
@click.option("--runs", type=click.IntRange(min=1), default=10, show_default=True,
              help="Run the request this many times; the handlers' times are means.")
@click.option("--scale", type=click.IntRange(min=1), default=1, show_default=True,
              help="Scale k of the loaded paper database.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def handlers(controller: str, request: int, runs: int, scale: int, as_json: bool) -> None:
    """Table 8: the mean time of every message handler per request.

    Per process and backend, from the processes' /metrics (internal timing on)."""
    try:
        with Client(controller) as c:
            rows, mean_ms = measure_handlers(c, request, runs, scale)
    except (ClientError, ReportError) as e:
        fail(e)
    if as_json:
        for r in rows:
            click.echo(json.dumps({"request": request, "runs": runs, **{
                k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(r).items()}}))
        return
    caption = (f"mean response time {mean_ms:.3f} ms" if mean_ms is not None else None)
    t = Table(title=f"Table 8: message handlers, request {request} ({runs} runs)",
              caption=caption)
    for name in ("process", "handler", "backend"):
        t.add_column(name, no_wrap=True)
    for name in ("calls/req", "ms/req", "ms/call"):
        t.add_column(name, justify="right", no_wrap=True)
    last = None
    for r in rows:
        if last is not None and r.process != last:
            t.add_section()
        last = r.process
        t.add_row(r.process, r.handler, r.backend or "-", f"{r.calls_per_request:g}",
                  f"{r.ms_per_request:.3f}", f"{r.ms_per_call:.3f}")
    console.print(t)
