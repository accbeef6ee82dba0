"""The paper's two claims as formulas (docs/spec.md §1), and the paper's own figures.

The scan of Tables 3–7 is badly garbled; only cells that read unambiguously
are kept here (None marks an illegible cell). Table 4 and 5 percentages are
also quoted in the paper's text and in docs/spec.md §1.
"""

from __future__ import annotations


def improvement(t1: float, tn: float) -> float:
    """Response-time improvement, %: same database, n backends against one."""
    return (1 - tn / t1) * 100


def improvement_bound(n: int) -> float:
    """The best improvement n backends can give: (1 - 1/n) * 100%."""
    return (1 - 1 / n) * 100


def reduction(t1: float, tn: float) -> float:
    """Response-time reduction, %: n backends with n times the data against one (ideal 0)."""
    return (tn - t1) / t1 * 100


def mbds_part(t1: float, control: float, tn: float) -> float:
    """MBDS's own part of a reduction, % of A: C_n against the control A×n (n one-backend
    clusters asked at once), which carries the machine's part and not MBDS's."""
    return (tn - control) / t1 * 100


def overhead(external: float, internal: float) -> float:
    """Cost of internal timing, %: the same configuration with timers against without."""
    return (internal - external) / external * 100


# Paper, Table 4: improvement 1 -> 2 backends, 1000 records (percent).
PAPER_IMPROVEMENT: dict[int, float | None] = {
    1: 36.07, 2: 46.14, 3: None, 4: 48.94, 5: None, 6: None, 7: None, 8: None, 9: 47.21}
# Paper, Table 5: reduction, 1 backend/1000 records -> 2 backends/2000 records (percent).
PAPER_REDUCTION: dict[int, float | None] = {
    1: 4.49, 2: None, 3: None, 4: None, 5: None, 6: 0.12, 7: 0.50, 8: None, 9: None}
# Paper, Table 3: mean response time in seconds (A: 1 backend/1000, B: 2/1000, C: 2/2000).
PAPER_TABLE3: dict[int, dict[str, float | None]] = {
    1: {"A": None, "B": None, "C": None},
    2: {"A": None, "B": 7.511, "C": 14.243},
    3: {"A": 26.492, "B": 14.164, "C": 26.737},
    4: {"A": None, "B": None, "C": None},
    5: {"A": 21.449, "B": None, "C": None},
    6: {"A": 42.235, "B": None, "C": 42.287},
    7: {"A": None, "B": None, "C": 12.347},
    8: {"A": 22.532, "B": None, "C": None},
    9: {"A": None, "B": None, "C": 24.169},
}
# Paper, Table 6: with internal measurement (A.I: 1 backend, B.I: 2 backends; seconds).
PAPER_TABLE6: dict[int, dict[str, float | None]] = {
    1: {"A": 3.206, "B": 2.219}, 2: {"A": 13.418, "B": 7.401}, 4: {"A": 50.750, "B": None},
    5: {"A": None, "B": 11.244}, 6: {"A": 41.262, "B": 21.517},
}
