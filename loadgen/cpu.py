"""Where a benchmark's CPU went: the harness, the controller and the backends.

On a machine that runs the whole system, throughput with many users is the
cores divided by the CPU one request costs (C), and one user's rate is 1 / L
(L its response time), so the gain from users is at most cores × L / C. The
users benchmark measures C per run with this, so that ceiling is a figure in
every result instead of an argument in the docs.
"""

from __future__ import annotations

import os
from typing import Any

import click

from mbds.cluster import LocalCluster


def _seconds(p: Any) -> float:
    t = p.cpu_times()        # every thread of the process: user + system
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

    def read(self) -> dict[str, float]:
        return {k: sum(_seconds(p) for p in ps) for k, ps in self.procs.items()}

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before[k] for k in after}
