"""Local backends can get a fixed CPU budget (cgroup), as `bench paper --backend-cpus` uses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mbds.cluster import LocalCluster
from mbds.cpulimit import read_limit


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroup CPU budgets need root")
def test_each_backend_runs_under_its_budget_and_the_cgroup_goes_away(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "d", 2, backend_cpus=0.3)
    c.start()
    try:
        assert [round(read_limit(g), 3) for g in c.cgroups] == [0.3, 0.3]
        for proc, group in zip(c.backends, c.cgroups, strict=True):
            assert str(proc.popen.pid) in (group / "cgroup.procs").read_text().split()
    finally:
        c.stop()
    assert not any(g.exists() for g in c.cgroups)


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroup CPU budgets need root")
def test_clusters_whose_folders_share_a_name_get_a_budget_each(tmp_path: Path) -> None:
    """Two one-backend clusters in folders both named "A": each backend its own group."""
    clusters = [LocalCluster(tmp_path / d / "A", 1, backend_cpus=0.3) for d in ("x", "y")]
    try:
        for c in clusters:
            c.start()
        groups = [c.cgroups[0] for c in clusters]
        assert groups[0] != groups[1]
        for c, group in zip(clusters, groups, strict=True):
            assert (group / "cgroup.procs").read_text().split() == [str(c.backends[0].popen.pid)]
    finally:
        for c in clusters:
            c.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroup CPU budgets need root")
def test_a_budget_under_a_tenth_of_a_cpu_is_the_budget_asked(tmp_path: Path) -> None:
    """The kernel's least quota is 1 ms: at a 10 ms period 0.05 CPU would have become 0.1."""
    c = LocalCluster(tmp_path / "d", 1, backend_cpus=0.05)
    c.start()
    try:
        assert round(read_limit(c.cgroups[0]), 3) == 0.05
    finally:
        c.stop()
