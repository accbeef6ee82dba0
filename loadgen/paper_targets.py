"""The load generator's performance targets, checked on one `mbds bench paper` run.

The targets were set for 100 times the paper's database with a fixed CPU budget per
backend (issue 5 of this project; docs/results/README.md keeps every session's
verdicts). A run at another scale or without a budget is still checked, so a user
sees at once how far the claims hold on their machine — the report says which
settings the targets assume. Each verdict is taken on the unrounded figures.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.formulas import PAPER_IMPROVEMENT, improvement, mbds_part, reduction
from loadgen.paper_results import ConfigResult

IMPROVEMENT_1_2 = 45.0          # % for requests 2–9
PAPER_BEST = max(v for v in PAPER_IMPROVEMENT.values() if v is not None)   # 48.94%
REQUEST4_IMPROVEMENT_1_4 = 70.0
REDUCTION = 5.0                 # |%| for requests 2–9, 1→2 and 1→4
REQUEST1_MEDIAN_MS = 3.0        # with 2 local backends
LARGE = range(2, 10)            # the requests the percentages are set for


MET = ("met", "missed")


def _verdict(ok: bool) -> str:
    return MET[not ok]


def _all_of(label: str, values: dict[int, float], ok: Callable[[float], bool],
            words: tuple[str, str] = MET) -> list[str]:
    """One row for a target every listed request must meet: how many did, and the range."""
    missed = [str(q) for q, v in values.items() if not ok(v)]
    lo, hi = min(values.values()), max(values.values())
    return [label, f"{len(values) - len(missed)} of {len(values)} ({lo:.2f} … {hi:.2f}%)"
            + (f"; not request{'s' if len(missed) > 1 else ''} {', '.join(missed)}"
               if missed else ""),
            words[bool(missed)]]


def _span(reqs: list[int]) -> str:
    """"requests 2–9", "requests 4, 7", "request 4"."""
    if len(reqs) == 1:
        return f"request {reqs[0]}"
    if len(reqs) > 2 and reqs == list(range(reqs[0], reqs[-1] + 1)):
        return f"requests {reqs[0]}–{reqs[-1]}"
    return "requests " + ", ".join(map(str, reqs))


def targets_table(by: dict[str, ConfigResult], reqs: list[int], ns: list[int],
                  settings: str) -> dict | None:
    """Each target this run can speak to, with this run's figures and a verdict."""
    if "A.E" not in by:
        return None
    a = by["A.E"]
    large = [q for q in reqs if q in LARGE]
    span = _span(large)
    rows: list[list[str]] = []
    b2 = by.get("B2.E")
    if b2 is not None and large:
        rows.append(_all_of(f"improvement 1→2 ≥ {IMPROVEMENT_1_2:.0f}% ({span})",
                            {q: improvement(a.mean(q), b2.mean(q)) for q in large},
                            lambda v: v >= IMPROVEMENT_1_2))
    if b2 is not None and 4 in reqs:
        v = improvement(a.mean(4), b2.mean(4))
        rows.append([f"request 4: improvement 1→2 above the paper's best, {PAPER_BEST:.2f}%",
                     f"{v:.2f}%", _verdict(v > PAPER_BEST)])
    if "B4.E" in by and 4 in reqs:
        v = improvement(a.mean(4), by["B4.E"].mean(4))
        rows.append([f"request 4: improvement 1→4 ≥ {REQUEST4_IMPROVEMENT_1_4:.0f}%",
                     f"{v:.2f}%", _verdict(v >= REQUEST4_IMPROVEMENT_1_4)])
    for n in ns:
        c = by.get(f"C{n}.E")
        if c is None or not large:
            continue
        rows.append(_all_of(f"|reduction 1→{n}| ≤ {REDUCTION:.0f}% ({span})",
                            {q: reduction(a.mean(q), c.mean(q)) for q in large},
                            lambda v: abs(v) <= REDUCTION))
        x = by.get(f"Ax{n}.E")
        if x is not None:       # not a target: what the control says is MBDS's own
            rows.append(_all_of(
                f"(not a target) MBDS's own part of it, C{n} against A×{n}, within "
                f"±{REDUCTION:.0f}% of A ({span})",
                {q: mbds_part(a.mean(q), x.mean(q), c.mean(q)) for q in large},
                lambda v: abs(v) <= REDUCTION, ("within", "not within")))
    if b2 is not None and 1 in reqs:
        v = b2.median(1)
        rows.append([f"request 1: median ≤ {REQUEST1_MEDIAN_MS:.0f} ms with 2 backends",
                     f"{v:.2f} ms",
                     _verdict(v <= REQUEST1_MEDIAN_MS)])
    if not rows:
        return None
    return {"title": "The load generator's targets, checked on this run (set for "
                     f"scale 100 with a fixed CPU budget per backend; this run: {settings})",
            "columns": ["target", "this run", "verdict"], "rows": rows}
