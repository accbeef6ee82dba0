"""The suite's own machinery: a failing test shows the logs of the clusters it ran on."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]


def test_a_failing_test_reports_its_clusters_logs(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyfile(test_fails="""
def test_fails(cluster_factory):
    cluster_factory(1)
    assert False
""")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "cluster logs" in out
    assert "--- controller" in out and "--- backend b0" in out
    assert "listening on 127.0.0.1:" in out


def test_a_module_cluster_is_one_per_count_and_stopped_when_its_setup_fails(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """`module_cluster` given counts starts one cluster for each, `setup` run on it
    first; one whose setup fails errs its tests and leaves no process behind."""
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyfile(test_counts="""
from tests.conftest import module_cluster
setups = []
cluster = module_cluster("m", [1, 2], setups.append)
def test_a(cluster):
    assert setups[-1] is cluster
    assert len(cluster.client.status().backends) == len(cluster.cluster.backends)
def test_b(cluster):
    assert setups[-1] is cluster and len(setups) == len(cluster.cluster.backends)
""", test_broken="""
from tests.conftest import module_cluster
def broken(r):
    raise RuntimeError("setup refused")
cluster = module_cluster("b", setup=broken)
def test_c(cluster):
    pass
""")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider",
                                           "-v")
    result.assert_outcomes(passed=4, errors=1)
    out = result.stdout.str()
    assert "test_a[1backends] PASSED" in out and "test_b[2backends] PASSED" in out, out
    assert "RuntimeError: setup refused" in out
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if str(pytester.path) in " ".join(p.info["cmdline"] or [])]
    assert not left, left
