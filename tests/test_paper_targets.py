"""The verdicts of `mbds bench paper`: each follows its own rule — (a) CPU improvement
≥ 90% of its bound, (b) MBDS's part within ±5% from medians, (c) request 1's median
on two local backends without a budget — taken on unrounded figures, naming the
requests that missed."""

from __future__ import annotations

from loadgen.paper_results import Config, ConfigResult
from loadgen.paper_targets import verdicts

LOCAL = {"backend_cpus": None, "mode": "local processes"}


def _result(name: str, kind: str, n: int, times: dict[int, list[float]],
            cpu: dict[int, float] | None = None) -> ConfigResult:
    """A configuration whose busiest backend spent `cpu[q]` ms on request q in every run."""
    r = ConfigResult(Config(name, kind, n, n if kind == "C" else 1, False), times_ms=times)
    for q, ms in (cpu or {}).items():
        r.backend_cpu_ms[q] = [(ms / 2, ms)] * len(times[q])
    return r


def _by(*results: ConfigResult) -> dict[str, ConfigResult]:
    return {r.config.name: r for r in results}


def _meta(scale: int = 100, **machine: object) -> dict:
    return {"scale": scale, "machine": LOCAL | machine}


def test_cpu_speedup_is_judged_against_90_percent_of_its_bound() -> None:
    t = {2: [9.0], 4: [9.0], 7: [9.0]}
    by = _by(_result("A.E", "A", 1, t, {2: 100.0, 4: 100.0, 7: 100.0}),
             # 45.01% is met; 44.99% is not
             _result("B2.E", "B", 2, t, {2: 54.99, 4: 50.0, 7: 55.01}),
             # 67.51% is met; 67.49% is not
             _result("B4.E", "B", 4, t, {2: 32.49, 4: 25.0, 7: 32.51}))
    v = verdicts(by, [2, 4, 7], [2, 4], _meta())
    assert v is not None and "scale 100" in v["title"] and "set for" not in v["title"]
    rows = {r[0]: r[1:] for r in v["rows"]}
    assert rows["(a) CPU improvement 1→2 ≥ 45.00% (90% of its bound), requests 2, 4, 7"] == [
        "2 of 3, 44.99% to 50.00%; not request 7", "missed"]
    assert rows["(a) CPU improvement 1→4 ≥ 67.50% (90% of its bound), requests 2, 4, 7"] == [
        "2 of 3, 67.49% to 75.00%; not request 7", "missed"]
    assert not any(k.startswith("(b)") for k in rows)     # no A×n: nothing to judge (b) on


def test_rounding_does_not_turn_a_miss_into_a_pass() -> None:
    # 45.00001% and 44.99999% both print as 45.00%: one is met, the other missed.
    t = {4: [1.0]}
    for b2, verdict in ((54.99999, "met"), (55.00001, "missed")):
        by = _by(_result("A.E", "A", 1, t, {4: 100.0}), _result("B2.E", "B", 2, t, {4: b2}))
        v = verdicts(by, [4], [2], _meta())
        assert v is not None
        [row] = v["rows"]
        assert row[1].startswith("1 of 1, 45.00%" if verdict == "met" else "0 of 1, 45.00%")
        assert row[2] == verdict, b2


def test_mbds_part_is_taken_on_medians_within_5_percent() -> None:
    # A's median 100 (a slow run of 900 moves its mean to 366, not its median).
    by = _by(_result("A.E", "A", 1, {2: [100.0, 90.0, 900.0], 7: [100.0] * 3}),
             _result("B2.E", "B", 2, {2: [50.0] * 3, 7: [50.0] * 3}),
             # C2 − A×2 = 4.9 and −5.5 points of A's 100
             _result("C2.E", "C", 2, {2: [110.0, 114.9, 2000.0], 7: [94.5] * 3}),
             _result("Ax2.E", "X", 2, {2: [110.0, 108.0, 112.0], 7: [100.0] * 3}))
    v = verdicts(by, [2, 7], [2], _meta(scale=50))
    assert v is not None and "(a) and (b) are set for scale 100" in v["title"]
    [row] = [r for r in v["rows"] if r[0].startswith("(b)")]
    assert row[0] == "(b) MBDS's part of reduction 1→2 (C2 vs A×2, medians) within ±5%, " \
                     "requests 2, 7"
    assert row[1:] == ["1 of 2, -5.50% to 4.90%; not request 7", "missed"]


def test_request1_median_from_table2_or_from_b2_without_a_budget() -> None:
    b2 = _result("B2.E", "B", 2, {1: [2.0, 3.5, 3.1]})     # median 3.1
    by = _by(_result("A.E", "A", 1, {1: [2.0]}), b2)
    table2 = {"backends": 2, "runs": 10, "rows": [{"request": 1, "median_ms": 2.5}]}
    v = verdicts(by, [1], [2], _meta(), table2)
    assert v is not None
    assert v["rows"] == [["(c) request 1 median ≤ 3 ms, 2 local backends, no CPU budget "
                          "(Table 2, 10 runs)", "2.50 ms", "met"]]
    # Table 2 of another backend count does not count; B2.E without a budget does.
    v = verdicts(by, [1], [2], _meta(), table2 | {"backends": 4})
    assert v is not None and v["rows"][0][1:] == ["3.10 ms", "missed"]
    assert "(B2.E)" in v["rows"][0][0]
    # With a CPU budget B2.E is not the setting (c) is for: no verdict at all.
    assert verdicts(by, [1], [2], _meta(backend_cpus=0.25)) is None
