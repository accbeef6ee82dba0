"""The fixed cost of a small traffic unit: `mbds bench fixed-cost` on a real local
cluster, and the caches that keep that cost down (metric children, RECP's statement
texts) returning what they would return uncached."""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from backend import recp_read
from backend.plan import FilePlan
from loadgen import fixed_cost
from loadgen import paper_db as P
from mbds import metrics
from mbds.schema import Attribute, FileSchema


def test_fixed_cost_reports_each_process_cpu_per_unit() -> None:
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "1,2", "--units", "20", "--warmup", "2", "--json"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert [r["backends"] for r in rows] == [1, 2]
    for r in rows:
        procs = ["controller"] + [f"b{i}" for i in range(r["backends"])]
        assert sorted(k for k in r if k.endswith("_cpu_ms") and k not in (
            "harness_cpu_ms",)) == sorted(f"{p}_cpu_ms" for p in procs)
        # Every process did work for every unit, and a unit is not free nor a second.
        for p in procs:
            assert 0.01 < r[f"{p}_cpu_ms"] < 1000, r
        assert r["backend_cpu_ms_max"] == max(r[f"b{i}_cpu_ms"] for i in range(r["backends"]))
        assert 0 < r["median_ms"] <= r["p90_ms"]


def test_units_with_a_gap_between_them_and_cpu_by_thread() -> None:
    """`--gap` idles before each unit (so the run lasts at least units × gap), and
    each process's CPU is given by kind of thread too, its event loop ("main") doing
    most of it."""
    started = time.monotonic()
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "1", "--units", "20", "--warmup", "2", "--gap", "50", "--json"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started >= 20 * 0.05
    row = next(json.loads(line) for line in result.output.splitlines()
               if line.startswith("{"))
    assert row["gap_ms"] == 50
    assert set(row["cpu_ms_by_thread"]) == {"controller", "b0"}
    for proc, threads in row["cpu_ms_by_thread"].items():
        assert "main" in threads and "event_engine" in threads, threads
        assert all(v >= 0 for v in threads.values()) and row[f"{proc}_cpu_ms"] > 0
        assert threads["main"] == max(threads.values())
    table = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "1", "--units", "3", "--warmup", "1", "--gap", "1", "--by-thread"],
        catch_exceptions=False)
    assert table.exit_code == 0, table.output
    assert "1 ms between units" in table.output and "CPU ms per unit by thread" in table.output
    assert "event_engine" in table.output


def test_fixed_cost_table_names_every_process() -> None:
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "2", "--units", "5", "--warmup", "1", "--request", "update"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for column in ("controller_cpu_ms", "b0_cpu_ms", "b1_cpu_ms", "median_ms"):
        assert column in result.output
    # The targets are those of request 1 back to back without a budget: none here.
    assert "targets of a small unit" not in result.output
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "1", "--units", "5", "--warmup", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "targets of a small unit (request 1 back to back, no CPU budget)" in result.output


def test_the_targets_of_a_small_unit_are_judged_on_the_busiest_backend() -> None:
    def verdict(b0: float, b1: float, median: float) -> list[str]:
        v = fixed_cost._verdict({"backends": 2, "b0_cpu_ms": b0, "b1_cpu_ms": b1,
                                 "backend_cpu_ms_max": max(b0, b1), "median_ms": median})
        return [v["≤ 0.5"], v["≤ 1.5"]]
    assert verdict(0.4, 0.5, 1.5) == ["met", "met"]          # the bounds are inclusive
    assert verdict(0.4, 0.51, 1.2) == ["missed", "met"]
    assert verdict(0.3, 0.3, 1.51) == ["met", "missed"]


def _records_processed() -> float:
    return sum(s.value for m in metrics.RECORDS_PROCESSED.collect() for s in m.samples
               if s.name.endswith("_total"))


def test_alone_runs_on_a_stopped_backends_directory(tmp_path) -> None:
    """`python -m loadgen.backend_alone DIR UNITS`: the figure counted under valgrind."""
    from loadgen import backend_alone
    from loadgen import paper_db as P
    from loadgen.common import local_cluster_procs
    from mbds.client import Client
    with local_cluster_procs(1) as cluster:
        with Client(cluster.address) as client:
            P.load(client, 1)
        cluster.stop()
        result = CliRunner().invoke(backend_alone.main, [
            str(cluster.data_dir / "b0"), "30", "--warmup", "5", "--request", "2"])
        assert result.exit_code == 0, result.output
        assert 0.001 < float(result.output) < 1000
        refused = CliRunner().invoke(backend_alone.main, [str(tmp_path / "none"), "30"])
        assert refused.exit_code == 2 and "does not exist" in refused.output


def test_alone_runs_the_units_on_a_backend_in_this_process() -> None:
    before = _records_processed()
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "1", "--units", "20", "--warmup", "3", "--alone", "--json"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [alone] = [r for r in map(json.loads, result.output.splitlines()[-1:]) if r.get("alone")]
    assert alone["units"] == 2000 and 0.001 < alone["backend_cpu_ms"] < 1000
    # Each of the 2,003 units read request 1's two records here, not in another process.
    assert _records_processed() - before == 2 * 2003


def test_a_metric_child_is_made_once_and_counts_where_labels_would() -> None:
    h = Histogram("t_fixed_cost_seconds", "test", ["a", "b"], registry=CollectorRegistry())
    first = metrics.child(h, "x", "y")
    assert metrics.child(h, "x", "y") is first is h.labels("x", "y")
    assert metrics.child(h, "x", "z") is not first
    other = Histogram("t_fixed_cost_other", "test", ["a", "b"], registry=CollectorRegistry())
    assert metrics.child(other, "x", "y") is other.labels("x", "y")    # not h's child
    first.observe(0.5)
    assert h.labels("x", "y")._sum.get() == 0.5


def test_light_metrics_expose_what_prometheus_clients_own_would() -> None:
    """The project's counters and histograms (one call per update) scrape exactly as
    prometheus_client's Counter and Histogram do, `_created` times aside."""
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counters = [Counter("t_light_total", "a count", ["a", "b"], registry=theirs),
                metrics.LightCounter("t_light_total", "a count", ["a", "b"], registry=ours)]
    histograms = [
        Histogram("t_light_seconds", "a time", ["a"], buckets=metrics.BUCKETS, registry=theirs),
        metrics.LightHistogram("t_light_seconds", "a time", ["a"], buckets=metrics.BUCKETS,
                               registry=ours)]
    for c in counters:
        c.labels("x", "b0").inc(3)
        c.labels("y", "b1").inc()
    for h in histograms:
        # On a bound, between bounds, past the last one, and zero.
        for v in (0, 5e-5, 6e-5, 0.3, 2.5, 100):
            h.labels("q").observe(v)

    def scraped(registry: CollectorRegistry) -> str:
        return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())
    assert scraped(ours) == scraped(theirs)
    with pytest.raises(ValueError, match="takes labels a, b"):
        counters[1].labels("x")


def test_light_children_add_up_and_are_made_once_per_label_set() -> None:
    registry = CollectorRegistry()
    c = metrics.LightCounter("t_light_adds_total", "adds", ["a"], registry=registry)
    c.labels("x").inc(2)
    c.labels("x").inc()
    assert c.labels("x") is c.labels("x") and c.labels("x").value == 3
    assert registry.get_sample_value("t_light_adds_total", {"a": "x"}) == 3
    h = metrics.LightHistogram("t_light_h", "h", ["a"], buckets=[1, 2], registry=registry)
    h.labels("y").observe(1.5)
    h.labels("y").observe(7)
    assert registry.get_sample_value("t_light_h_bucket", {"a": "y", "le": "2.0"}) == 1
    assert registry.get_sample_value("t_light_h_bucket", {"a": "y", "le": "+Inf"}) == 2
    assert registry.get_sample_value("t_light_h_sum", {"a": "y"}) == 8.5


def test_a_handler_measured_by_its_caller_is_recorded_only_while_timing_is_on() -> None:
    child = metrics.child(metrics.HANDLER_SECONDS, "DM", "test_observed", "bx")
    count, seconds = sum(child.counts), child.sum
    metrics.set_internal_timing(True)
    try:
        metrics.observe_handler("DM", "test_observed", "bx", 0.25)
        assert (sum(child.counts) - count, child.sum - seconds) == (1, 0.25)
        with metrics.handler("DM", "test_observed", "bx"):
            time.sleep(0.01)
        assert sum(child.counts) - count == 2 and 0.26 <= child.sum - seconds < 1.25
        controller = metrics.child(metrics.HANDLER_SECONDS, "PP", "test_observed", "")
        before = sum(controller.counts)
        with metrics.handler("PP", "test_observed"):     # the controller's: backend ""
            pass
        assert sum(controller.counts) == before + 1
        metrics.set_internal_timing(False)
        metrics.observe_handler("DM", "test_observed", "bx", 0.25)
        assert sum(child.counts) - count == 2
    finally:
        metrics.set_internal_timing(True)


def test_interleaved_handler_timings_each_count_once() -> None:
    """Handlers of two traffic units interleave at their awaits: each timing is its own."""
    metrics.set_internal_timing(True)
    child = metrics.child(metrics.HANDLER_SECONDS, "DM", "test_interleaved", "bx")
    before, seconds = sum(child.counts), child.sum
    one, two = metrics.handler("DM", "test_interleaved", "bx"), \
        metrics.handler("DM", "test_interleaved", "bx")
    one.__enter__()
    time.sleep(0.05)         # one's handler awaits; two's starts meanwhile and ends first
    two.__enter__()
    two.__exit__(None, None, None)
    one.__exit__(None, None, None)
    assert sum(child.counts) == before + 2
    assert child.sum - seconds >= 0.05
    metrics.set_internal_timing(False)
    try:
        with metrics.handler("DM", "test_interleaved", "bx"):
            pass
        assert sum(child.counts) == before + 2
    finally:
        metrics.set_internal_timing(True)


def _schema(*names: str) -> FileSchema:
    return FileSchema("F", [Attribute(n, "integer") for n in names])


def test_statement_texts_follow_a_redefined_file() -> None:
    """A redefinition replaces the file's schema: its statements are built anew, never
    taken from the old schema's (an attribute it dropped reads as NULL)."""
    old, new = _schema("A", "B"), _schema("A")
    assert recp_read._select_list(FilePlan(old, [1]), ["A", "B"])[0] == 'json_array("A", "B")'
    assert recp_read._select_list(FilePlan(new, [1]), ["A", "B"])[0] == 'json_array("A", NULL)'
    assert recp_read._select_list(FilePlan(old, [1]), ["B"])[0] == 'json_array("B")'
    indexed = FileSchema("F", [Attribute("A", "integer", indexed=True)])
    plan = FilePlan(indexed, [1], conjunctions=[[("A", "=", 1)]])
    assert not recp_read._pageable(plan)
    assert recp_read._pageable(FilePlan(_schema("A"), [1], conjunctions=[[("A", "=", 1)]]))


def test_floor_is_one_real_round_trip_per_transport() -> None:
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "1", "--units", "10", "--warmup", "1", "--floor", "--json"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    floors = [json.loads(line) for line in result.output.splitlines()
              if line.startswith("{") and '"floor"' in line]
    assert [f["transport"] for f in floors] == ["plaintext", "mutual TLS"]
    for f in floors:
        assert f["round_trips"] == 1000
        # Both ends did work for every message, and a round trip is neither free nor slow.
        assert 0.005 < f["server_cpu_ms"] < 50 and 0.005 < f["client_cpu_ms"] < 50, f
        assert 0 < f["median_ms"] < 50, f
        # The echo server woke for every message (its event loop at least once each way).
        assert 1 <= f["server_switches"] < 100, f


def test_instructions_are_counted_per_process_and_library() -> None:
    """`--instructions`: every server process under callgrind, counted per unit."""
    result = CliRunner().invoke(fixed_cost.fixed_cost, [
        "--backends", "2", "--units", "20", "--warmup", "3", "--instructions", "--json"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [row] = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert row["backends"] == 2 and row["units"] == 20
    for p in ("controller", "b0", "b1"):
        # A small unit is hundreds of thousands of instructions: more than a few
        # thousand (counting was on), far fewer than a second's worth.
        assert 50_000 < row[f"{p}_instructions"] < 50_000_000, row
        libs = row["by_library"][p]
        assert sum(libs.values()) == pytest.approx(row[f"{p}_instructions"], abs=10)
        assert libs["python"] > 0 and libs["grpc"] > 0 and libs["protobuf"] > 0
    # The backends read the records; the controller reads no SQLite for a retrieval.
    assert row["by_library"]["b0"]["sqlite"] > 0
    assert row["by_library"]["controller"].get("sqlite", 0) == 0


def test_a_large_request_divides_its_instructions_over_the_backends() -> None:
    """`--request r2 --scale N --instructions` on 1 and 2 backends: the data loaded at
    that scale, each backend's count, and the busiest backend's improvement printed."""
    args = ["--backends", "1,2", "--request", "r2", "--scale", "3", "--units", "2",
            "--warmup", "1", "--instructions"]
    result = CliRunner().invoke(fixed_cost.fixed_cost, [*args, "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    one, two = [json.loads(line) for line in result.output.splitlines()
                if line.startswith("{")]
    assert (one["request"], one["scale"], one["backends"], two["backends"]) == ("r2", 3, 1, 2)
    assert two["backend_instructions_max"] == max(two["b0_instructions"],
                                                  two["b1_instructions"])
    # Request 2 reads 750 of 3,000 records here: SQLite's share is most of a backend's
    # count, and two backends each do about half of it.
    assert one["by_library"]["b0"]["sqlite"] > one["b0_instructions"] / 3, one
    assert 0.4 < two["backend_instructions_max"] / one["backend_instructions_max"] < 0.75
    table = CliRunner().invoke(fixed_cost.fixed_cost, args, catch_exceptions=False).output
    assert "improvement 1→n from the busiest" in table     # the title (wrapped)
    assert "busiest backend" in table and "50.00%" in table   # the bound at two backends


def test_both_modes_load_the_database_at_the_scale_asked(monkeypatch) -> None:
    """`--scale` reaches the load of the timed and of the counted cluster alike."""
    class Loaded(Exception):
        pass

    def load(_client, scale: int, *_a, **_k) -> None:
        raise Loaded(scale)
    monkeypatch.setattr(P, "load", load)
    for extra in ([], ["--instructions"]):
        with pytest.raises(Loaded) as got:
            CliRunner().invoke(fixed_cost.fixed_cost, ["--backends", "1", "--request", "r3",
                                                       "--scale", "7", *extra],
                               catch_exceptions=False)
        assert got.value.args == (7,)


def test_request_texts_are_the_papers_at_the_scale() -> None:
    assert fixed_cost.request_text("r2", 100) == P.REQUESTS[1].abdl(100)
    assert fixed_cost.request_text("r9", 1) == P.REQUESTS[8].abdl(1)
    assert fixed_cost.request_text("update", 7) == fixed_cost.UPDATE_1
    result = CliRunner().invoke(fixed_cost.fixed_cost, ["--alone", "--scale", "2"])
    assert result.exit_code == 2 and "--alone runs on the paper's database at scale 1" \
        in result.output


def test_instructions_refuse_timing_options() -> None:
    for timing in (["--alone"], ["--gap", "5"], ["--by-thread"]):
        result = CliRunner().invoke(fixed_cost.fixed_cost, ["--instructions", *timing])
        assert result.exit_code == 2 and "--instructions counts instructions" in result.output


def test_a_callgrind_dump_is_summed_by_library_without_inclusive_costs(tmp_path) -> None:
    """Self costs by shared object; a call's line (its callee's inclusive cost) is
    not counted again, and compressed names refer back to their first mention."""
    dump = tmp_path / "callgrind.1.1"
    dump.write_text("\n".join([
        "events: Ir",
        "ob=(1) /usr/lib/libpython3.11.so.1.0",
        "fl=(1) ceval.c",
        "fn=(1) eval",
        "10 100",
        "+2 50",
        "cob=(2) /site-packages/grpc/_cython/cygrpc.so",
        "cfn=(2) send",
        "calls=3 0",
        "12 7000",
        "ob=(2)",
        "fn=(2)",
        "0 7000",
        "ob=(3) /usr/lib/x86_64-linux-gnu/libsqlite3.so.0",
        "fn=(3) step",
        "* 25",
        "ob=(1)",
        "fn=(1)",
        "11 5",
        "totals: 7180",
    ]) + "\n")
    from loadgen import instructions
    assert instructions.by_library(dump) == {"python": 155, "grpc": 7000, "sqlite": 25}
