"""The results of `mbds bench paper`: its configurations and what each one measured.

Apart from the modules that measure (paper_bench), pool (paper_pool) and report them
(paper_report, paper_parts, paper_control, paper_targets, paper_summary, paper_plots),
so each of those imports this one and none needs another's.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Config:
    name: str          # e.g. "A.E", "B4.I", "Ax4.E"
    kind: str          # A | B | C | X (A×n, the control: n one-backend clusters)
    backends: int
    multi: int
    timing: bool

    @property
    def records(self) -> int:
        return 1000 * self.multi       # times the scale factor


@dataclass
class ConfigResult:
    config: Config
    times_ms: dict[int, list[float]] = field(default_factory=dict)      # request -> runs
    records: dict[int, int] = field(default_factory=dict)
    clusters: dict[int, int] = field(default_factory=dict)
    handlers: dict[int, list[dict]] = field(default_factory=dict)      # Table 8 rows
    # request -> runs of (mean, max) over the backends of their own time (RECP et al.)
    backend_ms: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    # request -> runs of (mean, max) over the backends of the CPU ms each spent on it
    # (local clusters only; empty where the kernel keeps no per-thread count)
    backend_cpu_ms: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    load_s: float = 0.0

    def mean(self, req: int) -> float:
        return statistics.fmean(self.times_ms[req])

    def median(self, req: int) -> float:
        return statistics.median(self.times_ms[req])

    def sd(self, req: int) -> float:
        runs = self.times_ms[req]
        return statistics.stdev(runs) if len(runs) > 1 else 0.0


def write_json(path: Path, data: Any) -> None:
    """A results file as compact JSON, as `docs/results` keeps it: a report folder is
    committed as the benchmark wrote it."""
    path.write_text(json.dumps(data, separators=(",", ":"), ensure_ascii=False))
