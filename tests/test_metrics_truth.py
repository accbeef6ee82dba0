"""The metrics say what they claim to, read over HTTP from a real cluster.

Handler timers do not nest and count a process's own work, not its waits: RECP's
`process` stays within wall time under concurrent reads and within the backend's
CPU time while a client reads slowly, and a moved record's IIG call is not counted
inside RECP's time too. `mbds_records_processed_total` counts a write once its unit
commits, never one rolled back. `mbds_request_errors_total` counts the calls a client
made (not a backend's calls to IIG), and the dashboards call it so. A lock wait of
zero reads as about zero in the dashboards' quantiles, through a real Prometheus.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from mbds.client import Client, ClientError
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.values import to_pb
from tests.conftest import Running, as_controller, internal_channel
from tests.test_doors import iig_address
from tests.test_metrics import (
    Samples,
    delta,
    load_paper,
    metrics_urls,
    scrape,
    scrape_until,
    series,
    start_with_metrics,
)

ROOT = Path(__file__).resolve().parents[1]
BIG_YAML = """
files:
  BIG:
    attributes: {K: integer, S: string}
    directory:
      K: {type: A, ranges: [[0, 9999], [10000, 99999]]}
"""


def handler_sum(samples: Samples, process: str, handler: str, backend: str) -> float:
    key = (("backend", backend), ("handler", handler), ("process", process))
    return series(samples, "mbds_handler_seconds_sum").get(key, 0.0)


def load_big(r: Running, rows: int, width: int) -> None:
    r.client.define(BIG_YAML)
    list(r.client.load("BIG", ["K", "S"], (((k, "x" * width), None) for k in range(rows))))


# ------------------------------------------------------------- RECP process ----
def test_recp_process_time_stays_within_wall_time_under_concurrent_reads(
        cluster_factory) -> None:
    """Every RECP read step runs on the backend's event loop, so the steps of units read
    at once never overlap: their time added up cannot pass the wall time they ran in.
    Timing a unit's whole read, waits for credit and other units' turns included, passed
    it several times over."""
    r = start_with_metrics(cluster_factory, 2)
    load_big(r, 12_000, 400)
    urls = metrics_urls(r)
    names = [b.name for b in r.client.status().backends]

    def reader() -> None:
        with Client(r.cluster.address, timeout=60) as c:
            for _ in range(2):
                [res] = c.execute("RETRIEVE (FILE = BIG) (K, S)")
                assert len(res.records) == 12_000

    before = scrape(urls)
    t0 = time.monotonic()
    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = scrape(urls)
    wall = time.monotonic() - t0
    for b in names:
        busy = (handler_sum(after, "RECP", "process", b)
                - handler_sum(before, "RECP", "process", b))
        assert 0 < busy <= wall, (b, busy, wall)


def test_recp_process_time_leaves_out_a_slow_readers_credit_wait(cluster_factory) -> None:
    """A client that stops reading makes RECP wait for credit. The wait is not RECP's
    work: its time for the whole answer stays below the time the client stalled, which
    a timer around the whole read would have included."""
    r = start_with_metrics(cluster_factory, 1)
    load_paper(r)
    urls = metrics_urls(r)
    [b0] = [b.name for b in r.client.status().backends]
    body = "y" * 400_000      # 2 records per 1 MiB batch: 50 batches, 40 MB
    for part in range(2):
        r.client.execute("[" + "; ".join(
            f"INSERT (<FILE, PAPER>, <INTE1, {2000 + i}>, <INTE2, 1>, <MULTI, Big>) {{{body}}}"
            for i in range(50 * part, 50 * part + 50)) + "]")
    before = scrape(urls)
    # Without BDP probing the client's HTTP/2 window stays small, so a stalled reader
    # soon leaves RECP a window of batches ahead.
    slow = Client(r.cluster.address, timeout=60, channel_options=[("grpc.http2.bdp_probe", 0)])
    try:
        stream = slow.stream("RETRIEVE ((FILE = PAPER) and (MULTI = Big)) (INTE1, BODY)")
        replies = [next(stream)]
        waited = scrape_until(urls, lambda now: bool(delta(
            series(before, "mbds_recp_credit_waits_total"),
            series(now, "mbds_recp_credit_waits_total"))))
        stalled_from = time.monotonic()
        assert delta(series(before, "mbds_recp_credit_waits_total"),
                     series(waited, "mbds_recp_credit_waits_total")), "RECP never waited"
        time.sleep(3.0)                  # the client still not reading: RECP waits on
        stalled = time.monotonic() - stalled_from
        for reply in stream:
            replies.append(reply)
            time.sleep(0.01)             # then reads on, slowly
    finally:
        slow.close()
    assert sum(x.rows.count for x in replies if x.WhichOneof("body") == "rows") == 100
    after = scrape_until(urls, lambda now: sum(delta(
        series(before, "mbds_records_processed_total"),
        series(now, "mbds_records_processed_total")).values()) >= 100)
    busy = handler_sum(after, "RECP", "process", b0) - handler_sum(before, "RECP", "process", b0)
    print(f"RECP process {busy:.3f} s, the client stalled {stalled:.3f} s")
    assert 0 < busy < stalled, (busy, stalled)


# ------------------------------------------------------------- nesting ----
def test_a_moved_records_iig_call_is_not_counted_in_recp_too(cluster_factory) -> None:
    """An UPDATE that moves records into new clusters asks IIG for each (timed as
    DM.place_moved_record) from inside RECP's `process`. Timed inside it, the IIG calls
    made RECP's time at least theirs; left out, RECP's time is its writes alone, less
    than the IIG round trips (each a call to the controller, which pushes the new
    cluster to every backend before it answers)."""
    r = start_with_metrics(cluster_factory, 2)
    r.client.define("files:\n  MOV:\n    attributes: {C: string, V: integer}\n"
                    "    directory:\n      C: {type: C}\n")
    r.client.execute("[ " + "; ".join(f"INSERT (<FILE, MOV>, <C, a>, <V, {i}>)"
                                      for i in range(150)) + " ]")
    urls = metrics_urls(r)
    names = [b.name for b in r.client.status().backends]
    before = scrape(urls)
    # Each record to a value of its own: a new cluster, and an IIG call, each.
    results = r.client.execute("[ " + "; ".join(
        f"UPDATE ((FILE = MOV) and (V = {i})) <C = n{i}>" for i in range(150)) + " ]")
    assert sum(x.stats["records_retrieved"] for x in results) == 150
    after = scrape_until(urls, lambda now: all(
        handler_sum(now, "RECP", "process", b) > handler_sum(before, "RECP", "process", b)
        for b in names))
    for b in names:
        recp = (handler_sum(after, "RECP", "process", b)
                - handler_sum(before, "RECP", "process", b))
        place = (handler_sum(after, "DM", "place_moved_record", b)
                 - handler_sum(before, "DM", "place_moved_record", b))
        print(f"{b}: RECP process {recp:.3f} s, DM place_moved_record {place:.3f} s")
        assert 0 < recp < place, (b, recp, place)


# ----------------------------------------------------- records processed ----
OVF_YAML = ("files:\n  OVF:\n    attributes: {N: integer, T: string}\n    directory:\n"
            "      N: {type: A, ranges: [[0, 10], [11, 9223372036854775807]]}\n")


def records(samples: Samples, op: str) -> float:
    return sum(v for labels, v in series(samples, "mbds_records_processed_total").items()
               if dict(labels)["op"] == op)


def test_a_write_rolled_back_is_not_counted_as_processed(cluster_factory) -> None:
    """A unit PP aborts after the backends prepared it (its SUM passes 64 bits) changes
    nothing, and counts no record; writes that commit, in two phases or in one, count
    every record once the commit is carried out."""
    r = start_with_metrics(cluster_factory, 2)
    c = r.client
    c.define(OVF_YAML)
    big = 9_000_000_000_000_000_000
    c.execute(f"[ INSERT (<FILE, OVF>, <N, {big}>, <T, a>); "
              f"INSERT (<FILE, OVF>, <N, {big}>, <T, b>) ]")
    urls = metrics_urls(r)
    start = scrape_until(urls, lambda now: records(now, "INSERT") >= 2)
    assert records(start, "INSERT") == 2
    with pytest.raises(ClientError):
        c.execute("[ INSERT (<FILE, OVF>, <N, 5>, <T, c>); RETRIEVE (FILE = OVF) (SUM(N)) ]")
    [res] = c.execute("RETRIEVE (FILE = OVF) (T)")
    assert sorted(x["T"] for x in res.records) == ["a", "b"]      # rolled back
    # Committed: two records (in two phases when they went to two backends), then one
    # (one backend, one phase).
    c.execute("[ INSERT (<FILE, OVF>, <N, 1>, <T, d>); INSERT (<FILE, OVF>, <N, 2>, <T, e>) ]")
    c.execute("INSERT (<FILE, OVF>, <N, 3>, <T, f>)")
    end = scrape_until(urls, lambda now: records(now, "INSERT") >= 5)
    time.sleep(0.5)
    assert records(scrape(urls), "INSERT") == records(end, "INSERT") == 5


# ------------------------------------------------------------- errors ----
def errors(samples: Samples) -> dict[str, float]:
    return {dict(labels)["kind"]: v
            for labels, v in series(samples, "mbds_request_errors_total").items()}


def test_request_errors_count_client_calls_not_backends_iig_calls(cluster_factory) -> None:
    r = start_with_metrics(cluster_factory, 2)
    r.client.define("files:\n  CENSUS:\n    attributes: {CITY: string, POP: integer}\n"
                    "    directory:\n      CITY: {type: C}\n")
    controller_url = metrics_urls(r)[0]
    before = errors(scrape([controller_url]))
    wrong = pb.PlaceRequest(file="CENSUS", directory_values=[
        to_pb(v, pb.Value()) for v in ("CENSUS", 5)])
    ours = as_controller(r.cluster, r.cluster.backends[0].address or "")[:1]
    with internal_channel(r.cluster, iig_address(r), "backend", "controller") as ch:
        with pytest.raises(grpc.RpcError) as err:
            rpc.IigStub(ch).Place(wrong, timeout=10, metadata=ours)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert errors(scrape([controller_url])) == before        # a backend's call, not counted
    with pytest.raises(ClientError):
        r.client.execute("RETRIEVE (FILE = CENSUS (CITY)")    # a client's call: counted
    assert delta(before, errors(scrape([controller_url]))) == {"AbdlSyntaxError": 1}
    with urllib.request.urlopen(controller_url, timeout=10) as resp:
        [help_line] = [line for line in resp.read().decode().splitlines()
                       if line.startswith("# HELP mbds_request_errors_total ")]
    assert help_line.startswith("# HELP mbds_request_errors_total Client calls "), help_line


def test_dashboards_name_the_error_counter_for_what_it_counts() -> None:
    titles = [p["title"] for path in sorted((ROOT / "dashboards" / "json").glob("*.json"))
              for p in json.loads(path.read_text())["panels"]
              if any("mbds_request_errors_total" in t.get("expr", "")
                     for t in p.get("targets", []))]
    assert len(titles) == 2
    for title in titles:
        assert "traffic unit" not in title.lower() and "calls" in title, title


# ---------------------------------------------------------- lock waits ----
def test_lock_wait_quantiles_read_zero_when_no_unit_waited(cluster_factory,
                                                          tmp_path: Path) -> None:
    """Units run one at a time wait for no lock: every wait observed is 0, and the CC
    dashboard's quantiles, evaluated by a real Prometheus, must say about 0 — not a
    point interpolated inside the lowest bucket."""
    from tests.test_prometheus import Prometheus, grafana_to_promql, panels
    r = start_with_metrics(cluster_factory, 2)
    urls = metrics_urls(r)
    controller, *backends = (u.split("/")[2] for u in urls)
    prom = Prometheus(tmp_path, controller, backends)

    def scraped() -> None:
        """Until Prometheus holds every lock wait observed so far, and two scrapes more."""
        want = sum(series(scrape(urls), "mbds_cc_lock_wait_seconds_count").values())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = prom.query("sum(mbds_cc_lock_wait_seconds_count)")
            if got and float(got[0]["value"][1]) == want:
                time.sleep(2.5)
                return
            time.sleep(0.3)
        raise AssertionError(f"Prometheus has {got}, the backends {want}")

    try:
        prom.wait_ready(3)
        # One client, one unit at a time: no unit ever waits for another's locks.
        r.client.define(BIG_YAML)
        r.client.execute("INSERT (<FILE, BIG>, <K, 1>, <S, a>)")
        scraped()                 # the series exist before the rate window's increase
        for k in range(2, 12):
            r.client.execute(f"INSERT (<FILE, BIG>, <K, {k}>, <S, a>)")
            r.client.execute(f"RETRIEVE ((FILE = BIG) and (K < {k})) (S)")
        scraped()
        d = json.loads((ROOT / "dashboards" / "json" / "cc.json").read_text())
        variables = [v["name"] for v in d["templating"]["list"]]
        [panel] = [p for p in panels(d) if p["title"].startswith("Lock wait quantiles")]
        assert len(panel["targets"]) == 3
        for t in panel["targets"]:
            result = prom.query(grafana_to_promql(t["expr"], variables))
            assert {s["metric"]["kind"] for s in result} >= {"attribute", "did_group",
                                                             "cluster"}
            for s in result:
                assert float(s["value"][1]) <= 1e-6, (t["expr"], s)
    finally:
        prom.stop()


def test_a_requests_response_time_starts_at_its_arrival(tmp_path: Path) -> None:
    """The response time (`elapsed_ms`, `mbds_request_seconds`) runs from the request's
    arrival at the controller, REQP's reading of it and any wait before its unit goes
    down the bus included, not from the hand-over to PP. REQP is made slow here (a
    pause added to its preparing): the answer's time must hold the pause."""
    from controller.coordinator import Coordinator
    from tests.test_controller_checks import CITIES, answer, backend, run, with_census

    pause = 0.5

    async def scenario(procs: list) -> None:
        procs.append(backend(tmp_path, "b0"))
        address = procs[-1].wait_ready(30)
        c = Coordinator([address], connect_timeout=10, log_path=tmp_path / "c" / "d.db")
        try:
            async with asyncio.timeout(60):
                await with_census(c)
                prepare = c.reqp.prepare

                def slow(text: str) -> object:
                    time.sleep(pause)
                    return prepare(text)
                c.reqp.prepare = slow        # type: ignore[method-assign,assignment]
                [res] = await answer(c, CITIES)
        finally:
            await c.close()
        assert res.elapsed_ms >= pause * 1000, res.elapsed_ms

    run(scenario)
