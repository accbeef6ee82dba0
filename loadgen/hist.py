"""Latency histograms: a thin wrapper over HdrHistogram (`pip install hdrhistogram`).

Why HDR: percentiles of response time (the seed's 95th) must not depend on
keeping every sample, and histograms from several threads must merge exactly.
Values are recorded in microseconds (3 significant digits, so a reported
percentile is within 0.1% of the true sample) and reported in milliseconds.
"""

from __future__ import annotations

import threading
from typing import Any

LOWEST_US = 1
HIGHEST_US = 3_600_000_000     # one hour: anything slower is a hung run, not a latency
DIGITS = 3


class Hist:
    """A thread-safe latency histogram in milliseconds."""

    def __init__(self) -> None:
        # Imported here so `mbds backend` (which imports loadgen via the CLI) never needs it.
        from hdrh.histogram import HdrHistogram
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)
        self._lock = threading.Lock()

    def record(self, ms: float) -> None:
        us = min(HIGHEST_US, max(LOWEST_US, round(ms * 1000)))
        with self._lock:
            self._h.record_value(us)

    def merge(self, other: Hist) -> None:
        with self._lock, other._lock:
            self._h.add(other._h)

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def pct(self, q: float) -> float:
        """The q-th percentile (0–100) in ms."""
        return self._h.get_value_at_percentile(q) / 1000 if self.count else 0.0

    def min(self) -> float:
        return self._h.get_min_value() / 1000 if self.count else 0.0

    def max(self) -> float:
        return self._h.get_max_value() / 1000 if self.count else 0.0

    def mean(self) -> float:
        return self._h.get_mean_value() / 1000 if self.count else 0.0

    def stdev(self) -> float:
        return self._h.get_stddev() / 1000 if self.count else 0.0

    def summary(self, prefix: str = "") -> dict[str, Any]:
        """count, min, mean, p50, p95, p99, max (ms) — the seed's min/avg/95th/max and more."""
        return {f"{prefix}count": self.count, f"{prefix}min_ms": self.min(),
                f"{prefix}avg_ms": self.mean(), f"{prefix}p50_ms": self.pct(50),
                f"{prefix}p95_ms": self.pct(95), f"{prefix}p99_ms": self.pct(99),
                f"{prefix}max_ms": self.max()}

    def encode(self) -> str:
        """The compressed HDR encoding (base64), so the full distribution can be re-read."""
        return self._h.encode().decode()
