"""Tables 4 and 5 taken apart: where the time goes that keeps B_n from its bound and
C_n from A.

Every answer carries each backend's own time (`elapsed_ms`: RECP, from the start of
its work on the request to its last row), so each run's response time splits into
  - RECP per backend: the backends' mean own time, against its ideal (A's one
    backend divided by n for B_n, equal to A's for C_n);
  - slowest backend: the slowest backend against that mean — the answer is
    complete only when the last backend is done;
  - rest: everything else (the controller, the message path, the client).
Each part is in % of A.E's response time, so the parts add up to the shortfall
(the bound minus the improvement) or to the reduction.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from loadgen.formulas import improvement, improvement_bound, reduction
from loadgen.paper_results import ConfigResult


def _fmt(v: float) -> str:
    return f"{v:.2f}%"


def _own(r: ConfigResult, q: int) -> tuple[float, float]:
    """Mean over runs of the backends' mean own time, and of the slowest backend's."""
    return (statistics.fmean(m for m, _ in r.backend_ms[q]),
            statistics.fmean(x for _, x in r.backend_ms[q]))


def _split(a: float, ideal_own: float, mean: float, slowest: float, total: float
           ) -> list[str]:
    parts = [(mean - ideal_own) / a * 100, (slowest - mean) / a * 100]
    return [_fmt(x) for x in (*parts, total - sum(parts))]


def _rows(by: dict[str, ConfigResult], reqs: list[int], ns: list[int], kind: str,
          ideal: Callable[[float, int], float], total: Callable[[float, float, int], float]
          ) -> list[list[str]]:
    rows = []
    for q in reqs:
        a, (a_own, _) = by["A.E"].mean(q), _own(by["A.E"], q)
        for n in ns:
            x = by[f"{kind}{n}.E"]
            mean, slowest = _own(x, q)
            t = total(a, x.mean(q), n)
            rows.append([str(q), f"1→{n}", f"{a:.2f}", f"{a_own:.2f}", f"{x.mean(q):.2f}",
                         f"{mean:.2f}", f"{slowest:.2f}", _fmt(t)]
                        + _split(a, ideal(a_own, n), mean, slowest, t))
    return rows


def _columns(kind: str, total: str) -> list[str]:
    return ["request", "n", "A.E (ms)", "A.E RECP (ms)", f"{kind}_n.E (ms)",
            f"{kind}_n.E RECP mean (ms)", f"{kind}_n.E RECP slowest (ms)", total,
            "RECP per backend", "slowest backend", "rest"]


def improvement_parts(by: dict[str, ConfigResult], reqs: list[int], ns: list[int]) -> dict:
    """B_n: the ideal is A's backend time / n; the total is the bound minus the improvement."""
    return {"title": "Table 4 taken apart: what keeps B_n from the bound (means; the "
                     "shortfall is the bound minus the improvement; parts in % of A.E)",
            "columns": _columns("B", "shortfall"),
            "rows": _rows(by, reqs, ns, "B", lambda own, n: own / n,
                          lambda a, b, n: improvement_bound(n) - improvement(a, b))}


def reduction_parts(by: dict[str, ConfigResult], reqs: list[int], ns: list[int]) -> dict:
    """C_n: the ideal is A's backend time itself; the total is the reduction."""
    return {"title": "Table 5 taken apart: where C_n's extra time goes (means; parts in % "
                     "of A.E's response time)",
            "columns": _columns("C", "reduction"),
            "rows": _rows(by, reqs, ns, "C", lambda own, n: own,
                          lambda a, c, n: reduction(a, c))}


def busiest(r: ConfigResult, q: int) -> float:
    """Mean over runs of the busiest backend's CPU ms on request q."""
    return statistics.fmean(x for _, x in r.backend_cpu_ms[q])


def cpu_tables(by: dict[str, ConfigResult], reqs: list[int], ns: list[int]) -> dict | None:
    """Tables 4 and 5 from the backends' CPU time instead of the response time.

    A backend's share of a request is its CPU time; with a CPU budget its response
    time is about that divided by the budget, so 1 - CPU(B_n busiest) / CPU(A) is
    the improvement the work itself allows, free of the budget's enforcement and
    of the wall clock's other noise. None when no configuration was measured.
    """
    cs = [n for n in ns if f"C{n}.E" in by]
    names = ["A.E"] + [f"B{n}.E" for n in ns] + [f"C{n}.E" for n in cs]
    if not all(name in by and all(q in by[name].backend_cpu_ms for q in reqs)
               for name in names):
        return None
    rows = []
    for q in reqs:
        a = busiest(by["A.E"], q)
        row = [str(q), f"{a:.2f}"]
        for n in ns:
            b = busiest(by[f"B{n}.E"], q)
            row += [f"{b:.2f}", _fmt(improvement(a, b))]
        for n in cs:
            c = busiest(by[f"C{n}.E"], q)
            row += [f"{c:.2f}", _fmt(reduction(a, c))]
        rows.append(row)
    return {"title": "Tables 4 and 5 from the backends' CPU time (means over runs of the "
                     "busiest backend's CPU ms on the request)",
            "columns": ["request", "A.E CPU (ms)"]
            + [x for n in ns for x in (f"B{n}.E CPU (ms)", f"improvement 1→{n}")]
            + [x for n in cs for x in (f"C{n}.E CPU (ms)", f"reduction 1→{n}")],
            "rows": rows}
