"""`mbds report handlers`: the paper's Table 8 for this system, from the /metrics endpoints.

Scrapes every process's Prometheus endpoint (the URLs the controller's status
lists), runs one of the paper's requests K times, scrapes again and divides
the change of `mbds_handler_seconds` (sum and count, per process, handler and
backend) by K: the mean time each message handler spends per request, and how
often it runs per request. Run it on an otherwise idle system: whatever else
the cluster does in the meantime is counted too.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import click
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from mbds import paper as P
from mbds.client import DEFAULT_CONTROLLER, Client, ClientError

HANDLER = "mbds_handler_seconds"
REQUEST = "mbds_request_seconds"
# Processes and handlers in the order of a retrieve's path (SPEC §4); others sort after.
PROCESS_ORDER = ["REQP", "IIG", "DM", "CC", "RECP", "PP"]
HANDLER_ORDER = [
    "request", "load", "place", "traffic_unit", "attribute_lock", "attribute_locked",
    "attribute_release", "descriptor_ids", "did_group_lock",
    "did_groups_locked", "did_group_release", "cluster_lock",
    "clusters_locked", "place_moved_record", "process", "cluster_release", "request_count",
    "aggregate_ops", "results", "reply",
]

Key = tuple[str, str, str]          # (process, handler, backend)


class ReportError(Exception):
    pass


@dataclass
class Sample:
    """Cumulative sum (seconds) and count of one histogram series."""
    sum: float = 0.0
    count: float = 0.0


@dataclass
class Scrape:
    handlers: dict[Key, Sample]
    requests: dict[str, Sample]     # by op


@dataclass
class Row:
    process: str
    handler: str
    backend: str
    calls_per_request: float
    ms_per_request: float
    ms_per_call: float


def parse(text: str, into: Scrape) -> None:
    """Add one /metrics page's handler and request histograms to `into`."""
    for family in text_string_to_metric_families(text):
        if family.name not in (HANDLER, REQUEST):
            continue
        for s in family.samples:
            field = s.name.removeprefix(family.name)
            if field not in ("_sum", "_count"):
                continue
            if family.name == HANDLER:
                key = (s.labels.get("process", ""), s.labels.get("handler", ""),
                       s.labels.get("backend", ""))
                sample = into.handlers.setdefault(key, Sample())
            else:
                sample = into.requests.setdefault(s.labels.get("op", ""), Sample())
            setattr(sample, field[1:], getattr(sample, field[1:]) + s.value)


def scrape(urls: Iterable[str], timeout: float = 5.0) -> Scrape:
    out = Scrape({}, {})
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                parse(r.read().decode("utf-8"), out)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ReportError(f"cannot scrape {url}: {reason}") from None
    return out


def metrics_urls(status) -> list[str]:  # noqa: ANN001 - a pb.StatusReply
    """Every /metrics URL the controller knows of; errors if timing cannot be measured."""
    if not status.internal_timing:
        raise ReportError("internal timing is off: no message handler is timed; restart with "
                          "`mbds up --internal-timing on` (compose: MBDS_INTERNAL_TIMING=on)")
    urls = [u for u in [status.metrics_url, *(b.metrics_url for b in status.backends)] if u]
    if not urls:
        raise ReportError("no process serves /metrics; start the cluster with "
                          "`mbds up --metrics-port PORT` (or --metrics-port on each process)")
    missing = [b.name for b in status.backends if not b.metrics_url]
    if not status.metrics_url:
        missing.insert(0, "controller")
    if missing:
        click.echo(f"warning: no /metrics for {', '.join(missing)}; their handlers are "
                   "missing from the table", err=True)
    return urls


def settle(urls: list[str], first: Scrape, wait: float = 2.0) -> Scrape:
    """Scrape until two scrapes agree: a few handlers (cc.cluster_release) are timed just
    after the answer has left the backend."""
    prev, deadline = first, time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.05)
        cur = scrape(urls)
        if cur == prev:
            return cur
        prev = cur
    return prev


def _order(key: Key) -> tuple:
    process, handler, backend = key
    p = PROCESS_ORDER.index(process) if process in PROCESS_ORDER else len(PROCESS_ORDER)
    h = HANDLER_ORDER.index(handler) if handler in HANDLER_ORDER else len(HANDLER_ORDER)
    return (p, process, h, handler, backend)


def table8(before: Scrape, after: Scrape, runs: int) -> list[Row]:
    """Per handler series that moved: calls and time per request (delta / runs)."""
    rows = []
    for key in sorted(after.handlers, key=_order):
        b, a = before.handlers.get(key, Sample()), after.handlers[key]
        calls, seconds = a.count - b.count, a.sum - b.sum
        if calls <= 0:
            continue
        rows.append(Row(*key, calls_per_request=calls / runs,
                        ms_per_request=seconds * 1000 / runs,
                        ms_per_call=seconds * 1000 / calls))
    return rows


def response_ms(before: Scrape, after: Scrape, op: str = "RETRIEVE") -> float | None:
    b, a = before.requests.get(op, Sample()), after.requests.get(op, Sample())
    n = a.count - b.count
    return (a.sum - b.sum) * 1000 / n if n > 0 else None


def measure(client: Client, request: int, runs: int, scale: int) -> tuple[list[Row], float | None]:
    urls = metrics_urls(client.status())
    text = P.REQUESTS[request - 1].abdl(scale)
    before = settle(urls, scrape(urls))
    for _ in range(runs):
        try:
            client.execute(text)
        except ClientError as e:
            hint = (f"; load the paper's database first (`mbds load paper --scale {scale}`)"
                    if f"unknown file {P.FILE}" in str(e) else "")
            raise ReportError(f"request {request} failed: {e}{hint}") from None
    after = settle(urls, scrape(urls))
    return table8(before, after, runs), response_ms(before, after)


@click.group()
def report() -> None:
    """Reports built from the processes' Prometheus metrics."""


@report.command("handlers")
@click.option("--controller", default=DEFAULT_CONTROLLER, show_default=True,
              help="Controller address HOST:PORT (env MBDS_CONTROLLER).")
@click.option("--request", "request", type=click.IntRange(1, len(P.REQUESTS)), default=1,
              show_default=True, help="The paper's request to run (SPEC §5).")
@click.option("--runs", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--scale", type=click.IntRange(min=1), default=1, show_default=True,
              help="Scale k of the loaded paper database.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def handlers(controller: str, request: int, runs: int, scale: int, as_json: bool) -> None:
    """Table 8: mean time of every message handler per request, per process and backend."""
    try:
        with Client(controller) as c:
            rows, mean_ms = measure(c, request, runs, scale)
    except (ClientError, ReportError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
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
    Console().print(t)
