"""Internal timing (docs/spec.md §5), read the way Prometheus reads it: /metrics over HTTP.

A known request must move each of its message handlers' `mbds_handler_seconds`
count by exactly the number of times that handler runs (docs/spec.md §4's retrieve
path), on the controller and on every backend; with internal timing off no
handler series moves while the request-level metrics still do. Also
`mbds report handlers`, which computes the paper's Table 8 from the same data.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from cli.report import report
from loadgen import paper_db as P
from mbds.client import Client
from tests.conftest import CENSUS_YAML, Running
from tests.crashes import retry

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]
Key = tuple[str, str, str]           # (process, handler, backend)

INSERT2 = ("[INSERT (<FILE, PAPER>, <INTE1, 7>, <INTE2, 7>, <MULTI, Extra>); "
           "INSERT (<FILE, PAPER>, <INTE1, 950>, <INTE2, 950>, <MULTI, Extra>)]")


# ------------------------------------------------------------- helpers ----
def start_with_metrics(cluster_factory: Callable[..., Running], n: int,
                       **kw: Any) -> Running:
    """A cluster whose every process serves /metrics on a port it bound itself."""
    return cluster_factory(n, metrics_port=0, **kw)


def load_paper(r: Running) -> None:
    r.client.define(P.definition_yaml(1))
    list(r.client.load(P.FILE, P.ATTRIBUTES, P.records(1)))


def metrics_urls(r: Running) -> list[str]:
    s = r.client.status()
    return [s.metrics_url, *(b.metrics_url for b in s.backends)]


def scrape(urls: list[str]) -> Samples:
    out: Samples = {}
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                out[key] = out.get(key, 0.0) + s.value
    return out


def series(samples: Samples, name: str) -> dict[Labels, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def handler_counts(samples: Samples) -> dict[Key, float]:
    return {(d["process"], d["handler"], d["backend"]): v
            for labels, v in series(samples, "mbds_handler_seconds_count").items()
            for d in [dict(labels)]}


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}


def scrape_until(urls: list[str], done: Callable[[Samples], bool],
                 timeout: float = 30.0) -> Samples:
    """Scrape until `done` holds (some handlers are timed just after the answer left),
    or the deadline passes: the caller's exact assertions then show what is missing."""
    deadline = time.monotonic() + timeout
    while True:
        now = scrape(urls)
        if done(now) or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def _ours(samples: Samples) -> Samples:
    return {k: v for k, v in samples.items() if k[0].startswith("mbds_")}


def quiet(urls: list[str], timeout: float = 30.0) -> Samples:
    """Samples once two scrapes in a row agree on every mbds_ series: nothing in flight."""
    deadline = time.monotonic() + timeout
    prev = scrape(urls)
    while True:
        time.sleep(0.05)
        now = scrape(urls)
        if _ours(now) == _ours(prev) or time.monotonic() > deadline:
            return now
        prev = now


def wait_for(urls: list[str], before: Samples, expected: dict[Key, float],
             timeout: float = 30.0) -> dict[Key, float]:
    """Handler count deltas once they reach `expected`, and once nothing more is being
    counted (so a handler counted twice shows)."""
    scrape_until(urls, lambda now: delta(handler_counts(before), handler_counts(now))
                 == expected, timeout)
    return delta(handler_counts(before), handler_counts(quiet(urls)))


def expected_counts(backends: list[str], *, requests: int, rows_messages: int,
                    inserted: int, predicates: int = 4) -> dict[Key, float]:
    """docs/spec.md §4: how often each handler runs for one traffic unit of `requests` requests
    with `predicates` predicates in all (the paper's request 1 has four), on backends
    listed in index order."""
    n = len(backends)
    exp: dict[Key, float] = {("REQP", "request", ""): 1,
                             ("PP", "request_count", ""): requests,
                             ("PP", "aggregate_ops", ""): requests,
                             ("PP", "reply", ""): requests}
    if rows_messages:
        exp[("PP", "results", "")] = rows_messages      # every backend message but 'done'
    if inserted:
        exp[("IIG", "place", "")] = inserted            # one per inserted record
    per_backend = {("DM", h): 1 for h in ("traffic_unit", "attribute_locked",
                                          "did_groups_locked", "clusters_locked")}
    per_backend |= {("CC", h): 1 for h in ("attribute_lock", "attribute_release",
                                           "did_group_lock", "did_group_release",
                                           "cluster_lock", "cluster_release")}
    per_backend |= {("RECP", "request"): 1, ("RECP", "process"): requests}
    # Backend k searches predicates i with i mod n = k and sends its ids to every peer;
    # a backend with no share sends nothing. No predicates: no exchange at all.
    senders = range(min(predicates, n)) if n > 1 else range(0)
    for k, b in enumerate(backends):
        for (process, handler), count in per_backend.items():
            exp[(process, handler, b)] = count
        if len(senders) - (k in senders):
            exp[("DM", "descriptor_ids", b)] = len(senders) - (k in senders)
    return exp


def run_counting_rows(r: Running, text: str) -> int:
    """Run a traffic unit; the number of row batches PP forwarded (= PP results calls)."""
    return sum(1 for reply in r.client.stream(text) if reply.WhichOneof("body") == "rows")


# --------------------------------------------------------------- tests ----
@pytest.mark.parametrize("n", [1, 2, 3])
def test_each_handler_moves_by_its_count(cluster_factory, n: int) -> None:
    r = start_with_metrics(cluster_factory, n)
    load_paper(r)
    urls = metrics_urls(r)
    names = [b.name for b in r.client.status().backends]
    assert len(urls) == n + 1 and all(urls)

    # Paper request 1: one retrieve, two records.
    before = scrape(urls)
    rows = run_counting_rows(r, P.REQUESTS[0].abdl())
    assert rows >= 1
    expected = expected_counts(names, requests=1, rows_messages=rows, inserted=0)
    assert wait_for(urls, before, expected) == expected
    after = scrape(urls)
    assert delta(series(before, "mbds_request_seconds_count"),
                 series(after, "mbds_request_seconds_count")) == {(("op", "RETRIEVE"),): 1}
    records = delta(series(before, "mbds_records_processed_total"),
                    series(after, "mbds_records_processed_total"))
    assert sum(records.values()) == 2
    waits = delta(series(before, "mbds_cc_lock_wait_seconds_count"),
                  series(after, "mbds_cc_lock_wait_seconds_count"))
    assert waits == {(("backend", b), ("kind", k)): 1 for b in names
                     for k in ("attribute", "did_group", "cluster")}
    moved_sum = delta(series(before, "mbds_handler_seconds_sum"),
                      series(after, "mbds_handler_seconds_sum"))
    assert all(v > 0 for v in moved_sum.values())

    # A transaction of two inserts: IIG places each record; RECP processes each request.
    # Both records go into clusters that exist: IIG puts them on the backend with the
    # fewest records of each cluster. Placed on one backend, the unit goes to it alone
    # and commits in one phase; placed on two, it goes to every backend.
    before = scrape(urls)
    [first, second] = r.client.execute(INSERT2)
    holders = {b["backend"] for res in (first, second) for b in res.stats["backends"]
               if b["records"]}
    receivers = names if len(holders) > 1 else sorted(holders)
    assert {b["backend"] for b in first.stats["backends"]} == set(receivers)
    expected = expected_counts(receivers, requests=2, rows_messages=0, inserted=2,
                               predicates=0)
    assert wait_for(urls, before, expected) == expected

    # An aggregate: one partial group per backend holding records, each a PP results call.
    before = scrape(urls)
    results = r.client.execute("RETRIEVE (FILE = PAPER) (COUNT(INTE1))")
    assert results[0].records == [{"COUNT(INTE1)": 1002}]
    holding = sum(1 for b in results[0].stats["backends"] if b["records"])
    # One predicate (FILE = PAPER): only backend 0 has a share, the others wait for it.
    expected = expected_counts(names, requests=1, rows_messages=holding, inserted=0,
                               predicates=1)
    assert wait_for(urls, before, expected) == expected


def test_report_handlers_table8(cluster_factory) -> None:
    r = start_with_metrics(cluster_factory, 2)
    load_paper(r)
    names = [b.name for b in r.client.status().backends]
    res = CliRunner().invoke(report, ["handlers", "--controller", r.cluster.address,
                                      "--request", "1", "--runs", "4", "--json"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    got = {(x["process"], x["handler"], x["backend"]): x for x in rows}
    expected = expected_counts(names, requests=1, rows_messages=0, inserted=0)
    for key, count in expected.items():
        assert got[key]["calls_per_request"] == count, key
        assert got[key]["ms_per_request"] > 0 and got[key]["request"] == 1
    assert got[("PP", "results", "")]["calls_per_request"] >= 1
    assert set(got) == set(expected) | {("PP", "results", "")}

    text = CliRunner().invoke(report, ["handlers", "--controller", r.cluster.address,
                                       "--runs", "2"])
    assert text.exit_code == 0, text.output
    assert "Table 8" in text.output and "attribute_locked" in text.output


def test_internal_timing_off_times_no_handler(cluster_factory) -> None:
    r = start_with_metrics(cluster_factory, 2, internal_timing=False)
    load_paper(r)
    urls = metrics_urls(r)
    assert not r.client.status().internal_timing
    before = scrape(urls)
    r.client.execute(P.REQUESTS[0].abdl())
    r.client.execute(INSERT2)
    after = scrape_until(urls, lambda now: sum(delta(
        series(before, "mbds_records_processed_total"),
        series(now, "mbds_records_processed_total")).values()) >= 4)
    for name in ("mbds_handler_seconds_count", "mbds_handler_seconds_sum",
                 "mbds_handler_seconds_bucket"):
        assert series(after, name) == {}, name      # never observed at all
    assert delta(series(before, "mbds_request_seconds_count"),
                 series(after, "mbds_request_seconds_count")) == {
        (("op", "RETRIEVE"),): 1, (("op", "INSERT"),): 2}
    assert sum(delta(series(before, "mbds_records_processed_total"),
                     series(after, "mbds_records_processed_total")).values()) == 4

    res = CliRunner().invoke(report, ["handlers", "--controller", r.cluster.address])
    assert res.exit_code == 1
    assert "internal timing is off" in res.output


def test_report_without_metrics_endpoints(cluster_factory) -> None:
    r = cluster_factory(1)
    res = CliRunner().invoke(report, ["handlers", "--controller", r.cluster.address])
    assert res.exit_code == 1
    assert "no process serves /metrics" in res.output


def test_small_traffic_units_search_whole_without_the_id_exchange(cluster_factory) -> None:
    """--split-search-from M: units with fewer than M predicates are searched whole on
    every backend (no dm.descriptor_ids); larger ones are split as in the paper. The
    answers are the same either way (Table 2's records and clusters)."""
    r = start_with_metrics(cluster_factory, 3, split_search_from=6)
    load_paper(r)
    urls = metrics_urls(r)
    names = [b.name for b in r.client.status().backends]
    for req in P.REQUESTS:                       # 2 or 4 predicates each: all whole
        before = scrape(urls)
        rows = run_counting_rows(r, req.abdl())
        expected = expected_counts(names, requests=1, rows_messages=rows, inserted=0,
                                   predicates=0)
        assert wait_for(urls, before, expected) == expected, req.number
        [res] = r.client.execute(req.abdl())
        assert len(res.records) == req.expected_records()
        assert res.stats["clusters_examined"] == req.clusters
    # Three conjunctions of two predicates: 6 >= 6, split and exchanged.
    text = ("RETRIEVE ((FILE = PAPER) and (INTE2 = 10)) or ((FILE = PAPER) and (INTE2 = 130))"
            " or ((FILE = PAPER) and (INTE1 = 999)) (INTE1)")
    before = scrape(urls)
    rows = run_counting_rows(r, text)
    expected = expected_counts(names, requests=1, rows_messages=rows, inserted=0,
                               predicates=6)
    assert wait_for(urls, before, expected) == expected
    assert sorted(x["INTE1"] for x in r.client.execute(text)[0].records) == [10, 130, 999]


def test_a_slow_client_holds_up_only_its_own_answer(cluster_factory) -> None:
    """Flow control: RECP sends a window of row batches ahead of PP and then waits for
    credit, which PP returns as it passes rows on to the client. A client that stops
    reading makes the backend wait (mbds_recp_credit_waits_total moves) once the
    buffers between them are full, without holding up anyone else's requests, and
    gets every row once it reads on."""
    r = start_with_metrics(cluster_factory, 1)
    load_paper(r)
    urls = metrics_urls(r)
    body = "y" * 400_000      # 2 records per 1 MiB batch: 200 records, 100 batches, 80 MB
    for part in range(2):
        r.client.execute("[" + "; ".join(
            f"INSERT (<FILE, PAPER>, <INTE1, {2000 + i}>, <INTE2, 1>, <MULTI, Big>) {{{body}}}"
            for i in range(100 * part, 100 * part + 100)) + "]")
    before = scrape(urls)
    # Without BDP probing the client's HTTP/2 window stays small, so what a stalled
    # reader leaves in flight is bounded by the transport's buffers.
    slow = Client(r.cluster.address, timeout=60, channel_options=[("grpc.http2.bdp_probe", 0)])
    try:
        stream = slow.stream("RETRIEVE ((FILE = PAPER) and (MULTI = Big)) (INTE1, BODY)")
        first = next(stream)             # the unit has started; now the client stalls
        waits: dict[Labels, float] = {}
        deadline = time.monotonic() + 30
        while not waits and time.monotonic() < deadline:
            time.sleep(0.1)
            waits = delta(series(before, "mbds_recp_credit_waits_total"),
                          series(scrape(urls), "mbds_recp_credit_waits_total"))
        assert waits, "the backend never waited for credit while the client stalled"
        # Meanwhile another client's request is answered (reads share their locks)…
        [res] = r.client.execute(P.REQUESTS[0].abdl())
        assert len(res.records) == P.REQUESTS[0].expected_records()
        # …while the stalled unit is still open: reading on, the slow client gets all
        # 200 records, each body intact (had the other request waited for the stalled
        # one, it would have been answered only after the backend gave that unit up).
        rows = [row for reply in [first, *stream] if reply.WhichOneof("body") == "rows"
                for row in json.loads(reply.rows.rows_json)]
        assert sorted(x[0] for x in rows) == list(range(2000, 2200))
        assert all(x[1] == body for x in rows)
    finally:
        slow.close()


def test_a_small_answer_is_one_bus_message_each_way(cluster_factory) -> None:
    """Batching on the bus: a small retrieve costs each backend one message down (the
    traffic unit) and one up (rows, done and committed together); the counters show
    it, and under concurrent users messages carry several items."""
    r = start_with_metrics(cluster_factory, 2)
    load_paper(r)
    urls = metrics_urls(r)
    names = [b.name for b in r.client.status().backends]
    r.client.execute(P.REQUESTS[0].abdl())             # settle any start-up traffic
    before = quiet(urls)
    for _ in range(5):
        [res] = r.client.execute(P.REQUESTS[0].abdl())  # 2 records
        assert len(res.records) == 2
    holds = {b["backend"]: b["records"] for b in res.stats["backends"]}
    after = quiet(urls)
    msgs = delta(series(before, "mbds_bus_messages_total"),
                 series(after, "mbds_bus_messages_total"))
    items = delta(series(before, "mbds_bus_items_total"), series(after, "mbds_bus_items_total"))
    for name in names:
        down = (("backend", name), ("direction", "to_backend"))
        up = (("backend", name), ("direction", "to_controller"))
        assert msgs[down] == 5 and items[down] == 5
        # (rows, if it holds any of the two records) + done + committed
        assert msgs[up] == 5 and items[up] == 5 * (2 + (holds[name] > 0))


def test_a_member_backend_down_is_shown_by_the_controller(cluster_factory) -> None:
    """`mbds_backend_up` names every member backend: 1 while its bus is open, 0 once it
    broke (a stopped replica leaves Prometheus's targets, so `up` cannot show it), and 1
    again once a request has reopened it."""
    r = start_with_metrics(cluster_factory, 2)
    r.client.define(CENSUS_YAML)
    url = r.client.status().metrics_url

    def members() -> dict[str, float]:
        return {dict(labels)["backend"]: v
                for labels, v in series(scrape([url]), "mbds_backend_up").items()}

    assert members() == {"b0": 1.0, "b1": 1.0}
    r.cluster.backends[1].kill()
    deadline = time.monotonic() + 30
    while members() != {"b0": 1.0, "b1": 0.0}:
        assert time.monotonic() < deadline, members()
        time.sleep(0.2)
    r.cluster.restart_backend(1)
    retry(r.client, "RETRIEVE (FILE = Census) (CITY)", timeout=60)
    assert members() == {"b0": 1.0, "b1": 1.0}
