"""A fixed CPU budget for one local process, so each backend behaves like its own machine.

Uses the cgroup CPU controller (v2 `cpu.max`, or v1 `cpu.cfs_quota_us`). Needs
write access to the cgroup tree (root); `apply` says why when it cannot.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")
# A short enforcement period, so a budget behaves like a slower CPU rather than bursts
# of full speed and throttled pauses (which add jitter to short requests); shorter
# periods cost more than they smooth (docs/benchmarks.md, "Noise").
PERIOD_US = 10_000
MIN_QUOTA_US = 1000        # the kernel's least quota


def period_us(cpus: float) -> int:
    """10 ms, or longer for budgets under a tenth of a CPU (their quota would be under
    the kernel's least, and the budget silently larger than asked)."""
    return max(PERIOD_US, math.ceil(MIN_QUOTA_US / cpus))


class CpuLimitUnavailable(RuntimeError):
    pass


def apply(pid: int, cpus: float, name: str) -> Path:
    """Put `pid` in its own cgroup limited to `cpus` CPUs; returns the cgroup folder.

    The group is named after the process too: two clusters whose data folders share a
    name (two benchmarks at once, or several one-backend clusters side by side) would
    otherwise put their backends in one group and split one budget between them.
    """
    if cpus <= 0:
        raise CpuLimitUnavailable(f"a CPU budget must be above 0, not {cpus}")
    period = period_us(cpus)
    quota = max(MIN_QUOTA_US, round(cpus * period))
    name = f"{name}-{pid}"
    try:
        if (V2_ROOT / "cgroup.controllers").exists():
            group = V2_ROOT / f"mbds-{name}"
            group.mkdir(exist_ok=True)
            (group / "cpu.max").write_text(f"{quota} {period}\n")
        elif (V1_ROOT / "cpu.cfs_quota_us").exists():
            group = V1_ROOT / f"mbds-{name}"
            group.mkdir(exist_ok=True)
            (group / "cpu.cfs_period_us").write_text(f"{period}\n")
            (group / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        else:
            raise CpuLimitUnavailable("no cgroup CPU controller is mounted")
        (group / "cgroup.procs").write_text(f"{pid}\n")
    except OSError as e:
        raise CpuLimitUnavailable(f"cannot set a CPU budget ({e}); run as root or with "
                                  "--compose") from None
    return group


def read_limit(group: Path) -> float:
    """The CPUs a cgroup made by `apply` allows (for recording with results)."""
    if (group / "cpu.max").exists():
        quota, period = (group / "cpu.max").read_text().split()
        return float("inf") if quota == "max" else int(quota) / int(period)
    return int((group / "cpu.cfs_quota_us").read_text()) / int(
        (group / "cpu.cfs_period_us").read_text())


def remove(group: Path, wait: float = 2.0) -> None:
    """Delete a cgroup made by `apply` once its process has exited.

    The kernel lets go of an exited, reaped task's cgroup asynchronously, so rmdir
    may say EBUSY for a moment after the wait for the process returned: try again
    for up to `wait` seconds.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return      # a process is still in it: nothing to clean now
            time.sleep(0.02)
