"""Internal performance measurement (docs/spec.md §5): a timer around every message handler.

Like the paper's two builds (with and without internal timing), the handler
timers can be switched off; then `handler()` returns one shared no-op context
manager and costs a function call. Request-level metrics stay on.
"""

from __future__ import annotations

import contextlib
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


class _CounterChild:
    __slots__ = ("value", "created", "_lock")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()
        self._lock = threading.Lock()

    def inc(self, amount: float = 1) -> None:
        with self._lock:
            self.value += amount


class _HistogramChild:
    __slots__ = ("bounds", "counts", "sum", "created", "_lock")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()
        self._lock = threading.Lock()

    def observe(self, amount: float) -> None:
        i = bisect_left(self.bounds, amount)      # the first bucket whose bound is >= it
        with self._lock:
            self.counts[i] += 1
            self.sum += amount


class _Family:
    """A labelled metric whose children update in one Python call and a lock:
    prometheus_client's `inc` is four calls and `observe` five or more, and a small
    traffic unit makes a dozen updates on each process. The registry reads the
    children when Prometheus scrapes; names, labels and buckets are as
    prometheus_client's Counter and Histogram expose them."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry | None = REGISTRY) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self.children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def _child(self) -> Any:
        raise NotImplementedError

    def labels(self, *values: object) -> Any:
        key = tuple(str(v) for v in values)
        child = self.children.get(key)
        if child is None:
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {', '.join(self.labelnames)}; "
                                 f"got {len(key)} values")
            with self._lock:
                child = self.children.setdefault(key, self._child())
        return child

    def collect(self) -> Iterator[Metric]:
        raise NotImplementedError


class LightCounter(_Family):
    """A counter (`name` ends in `_total`)."""

    def _child(self) -> _CounterChild:
        return _CounterChild()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self.children.items()):
            family.add_metric(key, child.value, created=child.created)
        yield family


class LightHistogram(_Family):
    """A histogram with fixed buckets (and +Inf)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float], registry: CollectorRegistry | None = REGISTRY
                 ) -> None:
        self.bounds = (*sorted(float(b) for b in buckets), float("inf"))
        self.les = [floatToGoString(b) for b in self.bounds]
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> _HistogramChild:
        return _HistogramChild(self.bounds)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self.children.items()):
            with child._lock:
                counts, total = list(child.counts), child.sum
            cumulative, buckets = 0, []
            for le, n in zip(self.les, counts, strict=True):
                cumulative += n
                buckets.append((le, cumulative))
            family.add_metric(key, buckets, total)
            labels = dict(zip(self.labelnames, key, strict=True))
            family.samples.append(Sample(f"{self.name}_created", labels, child.created))
        yield family


# From 50 µs (a lock grant) to 60 s (a whole-database scan at large scale).
BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HANDLER_SECONDS = LightHistogram(
    "mbds_handler_seconds", "Time spent in one message handler (internal timing)",
    ["process", "handler", "backend"], buckets=BUCKETS)
REQUEST_SECONDS = LightHistogram(
    "mbds_request_seconds", "Response time of a request at the controller", ["op"],
    buckets=BUCKETS)
REQUEST_ERRORS = LightCounter(
    "mbds_request_errors_total", "Client calls the controller answered with an error, by "
    "the error's class: requests and definitions refused, calls the token check refused, "
    "traffic units that failed", ["kind"])
# Nearly every lock set is granted at once, a wait of 0: below the first bound of BUCKETS
# histogram_quantile would put it midway to 50 µs, so a bound of 1 µs keeps it near 0.
LOCK_WAIT_SECONDS = LightHistogram(
    "mbds_cc_lock_wait_seconds", "Time a traffic unit waited for its CC lock set",
    ["kind", "backend"], buckets=(1e-6, *BUCKETS))
CREDIT_WAITS = LightCounter(
    "mbds_recp_credit_waits_total", "Times RECP held a row batch until PP returned credit "
    "(flow control: PP, or the client behind it, is a window of batches behind)", ["backend"])
BUS_MESSAGES = LightCounter(
    "mbds_bus_messages_total", "gRPC messages on the controller-backend bus, each carrying "
    "every traffic unit, credit or reply that was queued at once",
    ["direction", "backend"])     # direction: to_backend | to_controller
BUS_ITEMS = LightCounter(
    "mbds_bus_items_total", "Bus messages' items (traffic units, credits, commits, aborts "
    "down; row batches, groups, done, committed, errors up)", ["direction", "backend"])
COMMIT_GROUP = LightHistogram(
    "mbds_commit_group_jobs", "Jobs that shared one SQLite transaction (group commit): "
    "prepares, commits, roll-backs and directory rows on a backend, decisions on the "
    "controller (backend=\"\")", ["backend"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
IN_DOUBT_RESOLVED = LightCounter(
    "mbds_in_doubt_resolved_total", "Prepared units a backend was in doubt about, resolved "
    "by the controller", ["outcome", "backend"])     # outcome: commit | abort
PLAN_CACHE = LightCounter(
    "mbds_plan_cache_total", "Traffic units whose checks and plans a backend took from its "
    "plan cache (hit: the same requests at the same directory generation) or worked out "
    "(miss)", ["result", "backend"])     # result: hit | miss
RECORDS_PROCESSED = LightCounter(
    "mbds_records_processed_total", "Records retrieved or changed by RECP (a write's once its "
    "traffic unit commits)", ["op", "backend"])


class _MembersUp:
    """`mbds_backend_up{backend}`, read from the controller's links at each scrape: 1
    while its bus to a member backend is open, else 0. Prometheus's own `up` cannot say
    it: a stopped replica leaves the DNS answer its targets come from."""

    def __init__(self) -> None:
        self.members: Callable[[], Iterable[tuple[str, bool]]] | None = None

    def describe(self) -> list[Metric]:
        return []       # so that registering does not read links not yet made

    def collect(self) -> Iterator[Metric]:
        if self.members is None:
            return
        family = GaugeMetricFamily(
            "mbds_backend_up", "1 while the controller's bus to a member backend is open, "
            "else 0", labels=["backend"])
        for name, up in self.members():
            family.add_metric([name], 1.0 if up else 0.0)
        yield family


MEMBERS_UP = _MembersUp()
REGISTRY.register(MEMBERS_UP)


def watch_members(members: Callable[[], Iterable[tuple[str, bool]]]) -> None:
    """The controller's member backends, each with whether its bus is open."""
    MEMBERS_UP.members = members


class _Switch:
    """Internal timing on or off: an attribute the handler timers read, not a call."""
    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = True


TIMING = _Switch()
NOOP = contextlib.nullcontext()     # every handler's timer while internal timing is off

# Label children by label values. `labels()` validates and locks on every call, which a
# small traffic unit paid a dozen times on each process; a child, once made, is kept.
_children: dict[tuple[object, ...], Any] = {}


def child(metric: Any, *labels: str) -> Any:
    """`metric.labels(*labels)`, looked up once per label set (for the bounded label
    sets of handlers, backends, lock kinds and operations; never a client's values)."""
    key = (id(metric), *labels)
    c = _children.get(key)
    if c is None:
        c = _children[key] = metric.labels(*labels)
    return c


def set_internal_timing(on: bool) -> None:
    TIMING.on = on


def internal_timing() -> bool:
    return TIMING.on


class _Span:
    """One timing of one handler: a new object per use, since handlers of different
    traffic units interleave at every await inside them."""

    __slots__ = ("child", "t0")

    def __init__(self, child: Any) -> None:
        self.child = child

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *_: object) -> None:
        self.child.observe(time.perf_counter() - self.t0)


def handler(process: str, name: str, backend: str = "") -> contextlib.AbstractContextManager:
    """Time one message handler, e.g. `with handler("DM", "descriptor_search", "b0"):`."""
    if not TIMING.on:
        return NOOP
    return _Span(child(HANDLER_SECONDS, process, name, backend))


def observe_handler(process: str, name: str, backend: str, seconds: float) -> None:
    """Record a handler's time measured by the caller (when internal timing is on)."""
    if TIMING.on:
        child(HANDLER_SECONDS, process, name, backend).observe(seconds)
