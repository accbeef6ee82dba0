"""Where a benchmark's CPU went: the harness, the controller and the backends.

On a machine that runs the whole system, throughput with many users is the
cores divided by the CPU one request costs (C), and one user's rate is 1 / L
(L its response time), so the gain from users is at most cores × L / C. The
users benchmark measures C per run with this, so that ceiling is a figure in
every result instead of an argument in the docs. With a CPU budget per backend
the backends may saturate first: then the bound is their CPU per request over
their summed budget.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import click

from mbds.cluster import LocalCluster, Proc


class HasBackends(Protocol):
    """A local cluster, or the n clusters of `mbds bench paper --control` asked as one."""

    @property
    def backends(self) -> Sequence[Proc]: ...


def _seconds(p: Any) -> float:
    """A process's CPU seconds, every thread: the scheduler's nanosecond count where the
    kernel keeps it, else psutil's (in clock ticks of 10 ms, more than a few small
    requests of a fast machine take)."""
    ms = run_ms(p.pid)
    if ms is not None:
        return ms / 1000
    t = p.cpu_times()
    return t.user + t.system


class CpuMeter:
    """CPU seconds of this process and of a local cluster's processes between reads."""

    def __init__(self, cluster: LocalCluster) -> None:
        # Imported here: `mbds` (and its `bench` group) must load in the service images,
        # which install no benchmark extras.
        try:
            import psutil
        except ImportError:
            raise click.ClickException("mbds bench users measures CPU with psutil: "
                                       "pip install 'mbds[bench]'") from None
        self.procs = {"harness": [psutil.Process()],
                      "controller": [psutil.Process(cluster.controller.popen.pid)]
                      if cluster.controller else [],
                      "backends": [psutil.Process(b.popen.pid) for b in cluster.backends]}
        self.cores = len(os.sched_getaffinity(0))
        # The backends' summed CPU budget (None: they share the cores with the rest).
        self.backend_budget = (cluster.backend_cpus * len(cluster.backends)
                               if cluster.backend_cpus else None)

    def read(self) -> dict[str, float]:
        return {k: sum(_seconds(p) for p in ps) for k, ps in self.procs.items()}

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before[k] for k in after}


def run_ms(pid: int) -> float | None:
    """CPU milliseconds every live thread of `pid` has run, to the nanosecond (the
    scheduler's own count in /proc/<pid>/task/*/schedstat; psutil's is in 10 ms ticks,
    coarser than a small request). None where the kernel does not keep it."""
    threads = run_ms_by_thread(pid)
    return None if threads is None else sum(threads.values())


def switches(pid: int) -> int | None:
    """Context switches of every live thread of `pid` so far, voluntary and not (a
    count that, unlike CPU time, does not move with the machine's speed). None where
    the kernel does not keep it."""
    def read(folder: str, _tid: str) -> tuple[str, float]:
        with open(f"{folder}/status") as f:
            return "all", sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
    threads = _by_thread(pid, read)
    return None if threads is None else int(threads.get("all", 0))


def run_ms_by_thread(pid: int) -> dict[str, float] | None:
    """`run_ms` by kind of thread: the main thread (a service's event loop) as "main",
    the others by the name the kernel keeps for them (gRPC's "event_engine" pool, its
    "python" poller thread, ...), summed over the threads of one name. None where the
    kernel keeps no schedstat."""
    def read(folder: str, tid: str) -> tuple[str, float]:
        with open(f"{folder}/comm") as f:
            name = "main" if tid == str(pid) else f.read().strip()
        with open(f"{folder}/schedstat") as f:
            return name, int(f.read().split()[0]) / 1e6
    return _by_thread(pid, read)


def _by_thread(pid: int, read: Callable[[str, str], tuple[str, float]]
               ) -> dict[str, float] | None:
    """What `read(its /proc folder, its id)` finds in each live thread of `pid`, summed
    by the name it gives; None where the kernel keeps no such file."""
    out: dict[str, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for t in tasks:
        try:
            name, value = read(f"/proc/{pid}/task/{t}", t)
        except FileNotFoundError:
            continue             # the thread ended between the listing and the read
        except (OSError, ValueError, IndexError):
            return None
        out[name] = out.get(name, 0.0) + value
    return out


class BackendCpu:
    """Each backend's CPU time over one request of `mbds bench paper` (local clusters).

    With a CPU budget per backend, a backend's response time is about its CPU time
    divided by the budget, but the budget's 10 ms enforcement and the VM add noise to
    the wall clock that the CPU count does not have: Tables 4 and 5 from CPU time show
    how the work itself divides over the backends.
    """

    def __init__(self, cluster: HasBackends) -> None:
        self.pids = [b.popen.pid for b in cluster.backends]

    def read(self) -> list[float] | None:
        out = [run_ms(p) for p in self.pids]
        return None if any(x is None for x in out) else out  # type: ignore[return-value]


def ceiling(one_user_ms: float, cpu_ms: float, backends_cpu_ms: float, cores: int,
            backend_budget: float | None = None) -> float | None:
    """The most throughput can grow over one user's: one user's ms per request over the
    fewest ms per request a saturated system can manage — the cores' (all the CPU a
    request costs, spread over the cores) or, when the backends have a CPU budget and
    run out of it first, the backends' (their CPU per request over their summed budget).
    None when no CPU was measured (nothing to divide by).
    """
    saturated_ms = cpu_ms / cores
    if backend_budget:
        saturated_ms = max(saturated_ms, backends_cpu_ms / backend_budget)
    return one_user_ms / saturated_ms if saturated_ms > 0 else None
