#!/usr/bin/env python3
"""Generate MBDS's Grafana dashboards (dashboards/json/*.json): the five dashboards
are defined here, the panel and dashboard builders are in grafana.py beside it.

    python dashboards/generate.py            # rewrite dashboards/json/
    python dashboards/generate.py --check    # exit 1 if the committed JSON is stale
    python dashboards/generate.py --out DIR  # write somewhere else

Built with Grafana's foundation SDK (grafana-foundation-sdk, pinned in
pyproject.toml to the release for Grafana 11.2): dashboard JSON of schemaVersion 39
with stable ids, grid positions and key order, so the output is committed and diffs
stay readable; tests/test_dashboards.py validates it against the SDK's JSON schema
(dashboards/schema/). Every query goes to the data source of the `datasource`
variable, by default the provisioned Prometheus, uid `mbds-prometheus`
(dashboards/provisioning/datasources/prometheus.yaml), so the files also import
into any Grafana. Metric names and labels: mbds/metrics.py and docs/observability.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana import (  # dashboards/grafana.py: this script's folder is on sys.path
    OUT_DIR,
    RECORDS_PER_S,
    RI,
    Dashboard,
    Target,
    Variable,
    heatmap,
    mean,
    piechart,
    quantiles,
    row,
    selector,
    stat,
    table,
    timeseries,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder


def overview() -> Dashboard:
    op = selector(op="$op")
    return Dashboard(
        "mbds-overview", "MBDS / Overview",
        "Requests at the controller: rate, errors and response time per operation.",
        [
            stat("Requests per second", Target(f"sum(rate(mbds_request_seconds_count{op}[{RI}]))"),
                 unit="reqps", decimals=2),
            stat("Failed calls per second",
                 Target(f"sum(rate(mbds_request_errors_total[{RI}])) or vector(0)"),
                 unit="reqps", decimals=2,
                 description="Client calls the controller answered with an error "
                             "(mbds_request_errors_total): refused requests and "
                             "definitions too, not only failed traffic units."),
            stat("Member backends down", Target("count(mbds_backend_up == 0) or vector(0)"),
                 decimals=0, w=4, red_from=1,
                 description="Member backends whose bus from the controller is broken "
                             "(mbds_backend_up), stopped replicas too: Prometheus stops "
                             "scraping a replica that leaves the DNS answer, so its `up` "
                             "cannot show it. Back at 0 once a request or `mbds status` "
                             "reopens the bus."),
            stat("Backends scraped and up", Target('sum(up{job="backend"})'), decimals=0, w=4,
                 description="Backend /metrics endpoints Prometheus reaches (job `backend`)."),
            stat("Controller scraped and up", Target('sum(up{job="controller"})'), decimals=0,
                 w=4),
            row("Requests"),
            timeseries("Requests per second by operation",
                       Target(f"sum by (op) (rate(mbds_request_seconds_count{op}[{RI}]))",
                              legend="{{op}}"), unit="reqps", stack=True),
            timeseries("Failed calls per second by kind",
                       Target(f"sum by (kind) (rate(mbds_request_errors_total[{RI}]))",
                              legend="{{kind}}"), unit="reqps",
                       description="kind: the error class, e.g. AbdlSyntaxError or "
                                   "SemanticError (refused before it became a traffic "
                                   "unit), BackendUnavailable or TrafficUnitAborted (a "
                                   "traffic unit the cluster failed)."),
            row("Response time (issue to whole answer, at the controller)"),
            timeseries("Response time quantiles by operation",
                       *quantiles("mbds_request_seconds", "op", op, "{{op}}"), w=16, h=9),
            timeseries("Mean response time by operation",
                       Target(mean("mbds_request_seconds", "op", op), legend="{{op}}"),
                       w=8, h=9),
            heatmap("Response time distribution",
                    f"sum by (le) (rate(mbds_request_seconds_bucket{op}[{RI}]))"),
        ],
        [Variable("op", "Operation", "mbds_request_seconds_count")])


def handlers() -> Dashboard:
    sel = selector(process="$process", handler="$handler", backend="$backend")
    by = "process, handler"
    return Dashboard(
        "mbds-handlers", "MBDS / Message handlers",
        "Internal timing (docs/spec.md §5): time spent in each message handler, one row per "
        "process. "
        "Empty when internal timing is off (mbds up --internal-timing off).",
        [
            row("$process", repeat="process"),
            timeseries("$process: p50 per handler",
                       *quantiles("mbds_handler_seconds", by, sel, "{{handler}}")[:1], w=8),
            timeseries("$process: p95 per handler",
                       *quantiles("mbds_handler_seconds", by, sel, "{{handler}}")[1:2], w=8),
            timeseries("$process: p99 per handler",
                       *quantiles("mbds_handler_seconds", by, sel, "{{handler}}")[2:], w=8),
            timeseries("$process: mean time per call by handler and backend",
                       Target(mean("mbds_handler_seconds", "process, handler, backend", sel),
                              legend="{{handler}} {{backend}}")),
            timeseries("$process: calls per second by handler",
                       Target(f"sum by ({by}) (rate(mbds_handler_seconds_count{sel}[{RI}]))",
                              legend="{{handler}}"), unit="ops"),
            heatmap("$process: handler time distribution",
                    f"sum by (le) (rate(mbds_handler_seconds_bucket{sel}[{RI}]))"),
        ],
        [Variable("process", "Process", "mbds_handler_seconds_count"),
         Variable("handler", "Handler", "mbds_handler_seconds_count"),
         Variable("backend", "Backend", "mbds_handler_seconds_count")])


def backends() -> Dashboard:
    sel = selector(op="$op", backend="$backend")
    rate = f"rate(mbds_records_processed_total{sel}[{RI}])"
    recp = selector(process="RECP", handler="process", backend="$backend")
    bus = selector(backend="$backend")
    hit = selector(result="hit", backend="$backend")
    return Dashboard(
        "mbds-backends", "MBDS / Backends: record processing and balance",
        "Records retrieved or changed by RECP on each backend, and how evenly the work is "
        "spread (IIG spreads every cluster's records over all backends).",
        [
            timeseries("Records per second by backend",
                       Target(f"sum by (backend) ({rate})", legend="{{backend}}"),
                       unit=RECORDS_PER_S, w=16),
            piechart("Share of records by backend (time range)",
                     Target(f"sum by (backend) (increase(mbds_records_processed_total{sel}"
                            "[$__range]))", legend="{{backend}}", instant=True)),
            timeseries("Share of each backend",
                       Target(f"sum by (backend) ({rate}) / ignoring(backend) group_left() "
                              f"sum({rate})", legend="{{backend}}"),
                       unit="percentunit", w=16,
                       description="1/N for every backend when the work is balanced."),
            stat("Imbalance: busiest backend / mean (time range)",
                 Target(f"max(sum by (backend) (rate(mbds_records_processed_total{sel}"
                        f"[$__range]))) / avg(sum by (backend) (rate("
                        f"mbds_records_processed_total{sel}[$__range])))", instant=True),
                 unit="none", w=8, h=8, decimals=2,
                 description="1.00 is perfect balance; 2.00 means one backend does twice "
                             "the mean."),
            timeseries("Records per second by operation and backend",
                       Target(f"sum by (backend, op) ({rate})", legend="{{backend}} {{op}}"),
                       unit=RECORDS_PER_S),
            timeseries("RECP busy time by backend (seconds per second)",
                       Target(f"sum by (backend) (rate(mbds_handler_seconds_sum{recp}[{RI}]))",
                              legend="{{backend}}"), unit="percentunit",
                       description="Fraction of wall time RECP spends processing requests "
                                   "(internal timing): its own work, not its waits for a "
                                   "slow reader's credit or for IIG."),
            timeseries("Bus messages per second by backend and direction",
                       Target(f"sum by (backend, direction) (rate(mbds_bus_messages_total"
                              f"{bus}[{RI}]))", legend="{{backend}} {{direction}}"),
                       unit="reqps",
                       description="gRPC messages on the controller-backend bus. Each carries "
                                   "everything queued at once, so under load the rate grows "
                                   "slower than the request rate."),
            timeseries("Bus items per message (batching)",
                       Target(f"sum by (backend, direction) (rate(mbds_bus_items_total{bus}"
                              f"[{RI}])) / sum by (backend, direction) (rate("
                              f"mbds_bus_messages_total{bus}[{RI}]))",
                              legend="{{backend}} {{direction}}"),
                       unit="none",
                       description="Traffic units, credits and decisions per message down; "
                                   "row batches, done and committed per message up. 1 means "
                                   "no batching; a small answer is 3 items up."),
            timeseries("Plan cache hits by backend",
                       Target(f"sum by (backend) (rate(mbds_plan_cache_total{hit}[{RI}])) / "
                              f"sum by (backend) (rate(mbds_plan_cache_total{bus}[{RI}]))",
                              legend="{{backend}}"),
                       unit="percentunit",
                       description="Share of traffic units whose check and plans a backend "
                                   "took from its plan cache: the same requests at the same "
                                   "directory generation (docs/profile.md)."),
        ],
        [Variable("op", "Operation", "mbds_records_processed_total"),
         Variable("backend", "Backend", "mbds_records_processed_total")])


def cc() -> Dashboard:
    sel = selector(kind="$kind", backend="$backend")
    m = "mbds_cc_lock_wait_seconds"
    handler_sel = selector(process="CC", backend="$backend")
    return Dashboard(
        "mbds-cc", "MBDS / Concurrency control: lock waits",
        "How long traffic units wait for their CC lock sets, per lock kind and backend.",
        [
            timeseries("Lock wait quantiles by kind and backend",
                       *quantiles(m, "kind, backend", sel, "{{kind}} {{backend}}"), w=16),
            stat("Lock sets granted within 1 ms",
                 Target(f'sum(rate({m}_bucket{{le="0.001", kind=~"$kind", '
                        f'backend=~"$backend"}}[{RI}])) / sum(rate({m}_count{sel}[{RI}]))'),
                 unit="percentunit", w=8, h=8, decimals=1),
            timeseries("Mean lock wait by kind and backend",
                       Target(mean(m, "kind, backend", sel), legend="{{kind}} {{backend}}")),
            timeseries("Lock sets granted per second",
                       Target(f"sum by (kind, backend) (rate({m}_count{sel}[{RI}]))",
                              legend="{{kind}} {{backend}}"), unit="ops"),
            heatmap("Lock wait distribution", f"sum by (le) (rate({m}_bucket{sel}[{RI}]))"),
            timeseries("CC message handlers: mean time per call",
                       Target(mean("mbds_handler_seconds", "handler, backend", handler_sel),
                              legend="{{handler}} {{backend}}"), w=24,
                       description="attribute_lock and did_group_lock include the wait for "
                                   "the grant; cluster_lock only queues the request (its wait "
                                   "is the lock wait above)."),
        ],
        [Variable("kind", "Lock kind", f"{m}_count"),
         Variable("backend", "Backend", f"{m}_count")])


def table8() -> Dashboard:
    sel = selector(process="$process", backend="$backend")
    by = "process, handler, backend"
    h = "mbds_handler_seconds"
    requests = f'scalar(sum(increase(mbds_request_seconds_count{selector(op="$op")}[$__range])))'
    return Dashboard(
        "mbds-table8", "MBDS / Table 8: mean time per message handler",
        "The paper's Table 8 for this system: mean time of every message handler per process "
        "and backend over the dashboard's time range. Run one request kind at a time "
        "(or use `mbds report handlers`) for per-request figures.",
        [
            table("Mean time per message handler (time range)",
                  Target(f"1000 * ({mean(h, by, sel, '$__range')})", instant=True,
                         format="table"),
                  Target(f"sum by ({by}) (increase({h}_count{sel}[$__range]))", instant=True,
                         format="table"),
                  Target(f"1000 * sum by ({by}) (increase({h}_sum{sel}[$__range])) / "
                         f"{requests}", instant=True, format="table"),
                  Target(f"sum by ({by}) (increase({h}_count{sel}[$__range])) / {requests}",
                         instant=True, format="table"),
                  rename={"process": "process", "handler": "handler", "backend": "backend",
                          "Value #A": "mean ms per call", "Value #B": "calls",
                          "Value #C": "ms per request", "Value #D": "calls per request"},
                  columns=["process", "handler", "backend", "Value #A", "Value #B",
                           "Value #C", "Value #D"],
                  unit_by_column={"mean ms per call": "ms", "ms per request": "ms",
                                  "calls": "none", "calls per request": "none"},
                  sort_by="ms per request",
                  description="mean ms per call = rate(_sum) / rate(_count); per request: "
                              "divided by the requests of the selected operation(s) in the "
                              "range."),
            timeseries("Mean time per call by handler",
                       Target(mean(h, by, sel), legend="{{process}}.{{handler}} {{backend}}"),
                       w=24, h=10),
        ],
        [Variable("process", "Process", f"{h}_count"),
         Variable("backend", "Backend", f"{h}_count"),
         Variable("op", "Requests of", "mbds_request_seconds_count")],
        time_from="now-5m")


DASHBOARDS = {"overview": overview, "handlers": handlers, "backends": backends,
              "cc": cc, "table8": table8}


def render(d: Dashboard) -> str:
    return json.dumps(d.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def generate() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {f"{name}.json": render(make()) for name, make in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the files in --out differ")
    args = ap.parse_args(argv)
    files = generate()
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).exists() or (args.out / n).read_text() != text]
        extra = sorted(p.name for p in args.out.glob("*.json") if p.name not in files)
        for n in stale + extra:
            print(f"stale: {args.out / n}", file=sys.stderr)
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (args.out / n).write_text(text)
    for p in args.out.glob("*.json"):
        if p.name not in files:
            p.unlink()
    print(f"wrote {len(files)} dashboards to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
