"""The paper's Table 8 for this system, from the /metrics endpoints (`mbds report handlers`).

Scrapes every process's Prometheus endpoint (the URLs the controller's status
lists), runs one of the paper's requests K times, scrapes again and divides
the change of `mbds_handler_seconds` (sum and count, per process, handler and
backend) by K: the mean time each message handler spends per request, and how
often it runs per request. Run it on an otherwise idle system: whatever else
the cluster does in the meantime is counted too.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

import click
from prometheus_client.parser import text_string_to_metric_families

from loadgen import paper_db as P
from mbds.client import Client, ClientError
from mbds.proto import mbds_pb2 as pb

HANDLER = "mbds_handler_seconds"
REQUEST = "mbds_request_seconds"
# Processes and handlers in the order of a retrieve's path (docs/spec.md §4); others sort after.
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
class HandlerRow:
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


def metrics_urls(status: pb.StatusReply) -> list[str]:
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


def _order(key: Key) -> tuple[int, str, int, str, str]:
    process, handler, backend = key
    p = PROCESS_ORDER.index(process) if process in PROCESS_ORDER else len(PROCESS_ORDER)
    h = HANDLER_ORDER.index(handler) if handler in HANDLER_ORDER else len(HANDLER_ORDER)
    return (p, process, h, handler, backend)


def handler_rows(before: Scrape, after: Scrape, runs: int) -> list[HandlerRow]:
    """Per handler series that moved: calls and time per request (delta / runs)."""
    rows = []
    for key in sorted(after.handlers, key=_order):
        b, a = before.handlers.get(key, Sample()), after.handlers[key]
        calls, seconds = a.count - b.count, a.sum - b.sum
        if calls <= 0:
            continue
        rows.append(HandlerRow(*key, calls_per_request=calls / runs,
                        ms_per_request=seconds * 1000 / runs,
                        ms_per_call=seconds * 1000 / calls))
    return rows


def response_ms(before: Scrape, after: Scrape, op: str = "RETRIEVE") -> float | None:
    b, a = before.requests.get(op, Sample()), after.requests.get(op, Sample())
    n = a.count - b.count
    return (a.sum - b.sum) * 1000 / n if n > 0 else None


def measure_handlers(client: Client, request: int, runs: int, scale: int
                     ) -> tuple[list[HandlerRow], float | None]:
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
    return handler_rows(before, after, runs), response_ms(before, after)
