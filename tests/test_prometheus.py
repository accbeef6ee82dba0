"""Every dashboard query works against a real Prometheus scraping a real cluster.

Starts a 2-backend cluster with /metrics endpoints, a Prometheus (Debian's
/usr/bin/prometheus, as in docker/prometheus) on 127.0.0.1 scraping it every
second with the job names of docker/prometheus/prometheus.yml, runs a load
that touches every metric (the paper's nine requests, inserts, an update, a
rejected request and a traffic unit that misses its deadline), then evaluates
every expression of every panel of dashboards/json/*.json through Prometheus'
HTTP API — Grafana's macros and template variables replaced as Grafana would —
and requires each to return at least one series. Every template variable's
label_values() query must return at least one value too. The overview's count of member
backends down is checked against a backend stopped and gone from the targets, as a
replica leaves the DNS answer the compose deployment's targets come from.

Without the prometheus binary the module is skipped, unless CI is set: there
it must run (scripts/test.sh installs it), so it fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadgen import paper_db as P
from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML
from tests.crashes import retry
from tests.test_metrics import load_paper, metrics_urls, scrape, series, start_with_metrics

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus"
                                            if Path("/usr/bin/prometheus").exists() else None)
# Grafana's macros, as they would be for a 15-minute view scraped every second.
MACROS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}

if PROMETHEUS is None:
    if os.environ.get("CI"):
        pytest.fail("prometheus is not installed (scripts/test.sh installs it); CI must run "
                    "tests/test_prometheus.py", pytrace=False)
    pytest.skip("prometheus is not installed (apt-get install prometheus)",
                allow_module_level=True)


def get(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class Prometheus:
    """`discovered`: the backends' targets come from a file that `discover` rewrites, as
    the compose deployment's come from DNS, which answers only for running replicas."""

    def __init__(self, tmp: Path, controller: str, backends: list[str],
                 discovered: bool = False) -> None:
        config = tmp / "prometheus.yml"
        self.targets_file = tmp / "backends.json"
        if discovered:
            self.discover(backends)
        found = ({"file_sd_configs": [{"files": [str(self.targets_file)],
                                       "refresh_interval": "1s"}]} if discovered
                 else {"static_configs": [{"targets": backends}]})
        config.write_text(json.dumps({   # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "controller", "static_configs": [{"targets": [controller]}]},
                {"job_name": "backend", **found},
            ]}, indent=2))
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             "--web.listen-address=127.0.0.1:0", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=tmp)
        self.logfile = tmp / "prometheus.log"
        self.url = f"http://127.0.0.1:{self._listening_port()}"

    def discover(self, backends: list[str]) -> None:
        """The backend targets are now `backends` (written whole, then renamed)."""
        part = self.targets_file.with_suffix(".part")
        part.write_text(json.dumps([{"targets": backends}]))
        part.replace(self.targets_file)

    def _listening_port(self, timeout: float = 30) -> int:
        """The port Prometheus bound (it was given port 0), read back from the system."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.logfile.read_text()
            ports = [c.laddr.port for c in psutil.Process(self.proc.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN]
            if ports:
                return ports[0]
            time.sleep(0.1)
        raise AssertionError(f"Prometheus did not listen:\n{self.logfile.read_text()}")

    def wait_ready(self, n_targets: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.logfile.read_text()
            try:
                targets = get(f"{self.url}/api/v1/targets")["data"]["activeTargets"]
                last = [(t["scrapeUrl"], t["health"]) for t in targets]
                if len(targets) == n_targets and all(t["health"] == "up" for t in targets):
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"targets not up: {last}\n{self.logfile.read_text()}")

    def query(self, expr: str) -> list[dict]:
        reply = get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert reply["status"] == "success", reply
        assert reply["data"]["resultType"] in ("vector", "scalar"), reply
        result = reply["data"]["result"]
        return result if reply["data"]["resultType"] == "vector" else [result]

    def value(self, expr: str) -> float | None:
        """The value of `expr`, a single series (None if it has none)."""
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return float(result[0]["value"][1]) if result else None

    def until(self, expr: str, want: float, timeout: float = 60) -> None:
        """Until `expr` evaluates to `want`."""
        deadline = time.monotonic() + timeout
        while (got := self.value(expr)) != want:
            if time.monotonic() > deadline:
                raise AssertionError(f"{expr} is {got}, not {want}\n"
                                     f"{self.logfile.read_text()[-2000:]}")
            time.sleep(0.3)

    def label_values(self, label: str, metric: str) -> list[str]:
        reply = get(f"{self.url}/api/v1/label/{label}/values?"
                    + urllib.parse.urlencode({"match[]": metric}))
        assert reply["status"] == "success", reply
        return reply["data"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def panels(dashboard: dict) -> Iterator[dict]:
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])      # a collapsed row's panels


def grafana_to_promql(expr: str, variables: list[str]) -> str:
    """Replace Grafana's macros; a variable becomes `.*`, as its `All` value."""
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", ".*").replace("$" + name, ".*")
    assert "$" not in expr, f"unreplaced variable in {expr}"
    return expr


@pytest.fixture
def stack(cluster_factory, tmp_path: Path) -> Iterator[tuple[Any, Prometheus]]:
    r = start_with_metrics(cluster_factory, 2)
    controller, *backends = (urllib.parse.urlsplit(u).netloc for u in metrics_urls(r))
    prom = Prometheus(tmp_path, controller, backends)
    try:
        prom.wait_ready(3)
        yield r, prom
    finally:
        prom.stop()


def run_load(r: Any) -> None:
    c = r.client
    load_paper(r)
    for _ in range(2):
        for req in P.REQUESTS:
            c.execute(req.abdl())
    for i in range(3):
        c.execute(f"INSERT (<FILE, PAPER>, <INTE1, {100 + i}>, <INTE2, {100 + i}>, "
                  "<MULTI, Extra>)")
    c.execute("UPDATE ((FILE = PAPER) and (MULTI = Extra)) <INTE2 = INTE2 + 1>")
    c.execute("RETRIEVE (FILE = PAPER) (AVG(INTE1), COUNT(INTE2)) BY MULTI")
    c.execute("DELETE ((FILE = PAPER) and (MULTI = Extra))")
    with pytest.raises(ClientError):
        c.execute("RETRIEVE (FILE = PAPER (INTE1)")          # a syntax error
    # A traffic unit that misses its 1 ms deadline fails on the backends: the error counter.
    with Client(r.cluster.address, timeout=0.001) as hasty, pytest.raises(ClientError):
        hasty.execute(P.REQUESTS[3].abdl())
    c.execute(P.REQUESTS[0].abdl())                          # the cluster still works


def wait_scraped(r: Any, prom: Prometheus, timeout: float = 20) -> None:
    """Until Prometheus holds the counters' final values, plus two more scrapes."""
    s = r.client.status()
    urls = [s.metrics_url, *(b.metrics_url for b in s.backends)]
    now = scrape(urls)
    requests = sum(series(now, "mbds_request_seconds_count").values())
    records = sum(series(now, "mbds_records_processed_total").values())
    handlers = sum(series(now, "mbds_handler_seconds_count").values())
    checks = {"sum(mbds_request_seconds_count)": requests,
              "sum(mbds_records_processed_total)": records,
              "sum(mbds_request_errors_total)": sum(series(now,
                                                           "mbds_request_errors_total").values())}
    deadline = time.monotonic() + timeout
    got: dict[str, float] = {}
    while time.monotonic() < deadline:
        got = {q: float(v[0]["value"][1]) if (v := prom.query(q)) else -1.0 for q in checks}
        h = prom.query("sum(mbds_handler_seconds_count)")
        if got == checks and h and float(h[0]["value"][1]) >= handlers:
            time.sleep(2.5)
            return
        time.sleep(0.3)
    raise AssertionError(f"Prometheus has {got}, the processes {checks}")


def test_every_dashboard_query_returns_series(stack) -> None:
    r, prom = stack
    run_load(r)
    wait_scraped(r, prom)
    assert DASHBOARDS, "no dashboards/json/*.json"
    empty, evaluated = [], 0
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        variables = [v["name"] for v in d["templating"]["list"]]
        for v in d["templating"]["list"]:
            if v["type"] != "query":
                continue                        # the data source picker
            m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", v["query"])
            assert m, v["query"]
            assert prom.label_values(m.group(2), m.group(1)), f"{path.name}: ${v['name']}"
        for p in panels(d):
            for t in p.get("targets", []):
                expr = grafana_to_promql(t["expr"], variables)
                evaluated += 1
                if not prom.query(expr):
                    empty.append(f"{path.name} / {p['title']} / {t['refId']}: {expr}")
    assert evaluated >= 20
    assert not empty, "queries without any series:\n" + "\n".join(empty)



def test_member_backends_down_shows_a_replica_gone_from_the_targets(
        cluster_factory, tmp_path: Path) -> None:
    """A stopped replica leaves the DNS answer Prometheus takes the backends' targets from
    (here a file, rewritten as DNS would answer), so no `up` is 0 for it: the overview's
    "Member backends down" counts it, from the controller's `mbds_backend_up`, and is 0
    again once a request has reopened its bus."""
    r = start_with_metrics(cluster_factory, 2)
    r.client.define(CENSUS_YAML)
    controller, *backends = (urllib.parse.urlsplit(u).netloc for u in metrics_urls(r))
    overview = json.loads((ROOT / "dashboards" / "json" / "overview.json").read_text())
    [panel] = [p for p in panels(overview) if p["title"] == "Member backends down"]
    [expr] = [t["expr"] for t in panel["targets"]]
    [red] = [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
             if s["color"] == "red"]
    assert red == 1
    prom = Prometheus(tmp_path, controller, backends, discovered=True)
    try:
        prom.wait_ready(3)
        prom.until("count(mbds_backend_up)", 2)
        assert prom.value(expr) == 0
        r.cluster.backends[1].kill()
        prom.discover(backends[:1])
        prom.until(expr, 1)
        prom.until('count(up{job="backend"})', 1)       # b1 is no target: no `up` 0 for it
        prom.until('sum(up{job="backend"})', 1)
        r.cluster.restart_backend(1)
        retry(r.client, "RETRIEVE (FILE = Census) (CITY)", timeout=60)
        prom.discover([urllib.parse.urlsplit(u).netloc for u in metrics_urls(r)[1:]])
        prom.until(expr, 0)
        prom.until('sum(up{job="backend"})', 2)
    finally:
        prom.stop()
