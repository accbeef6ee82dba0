"""The suite's own machinery: a failing test shows the logs of the clusters it ran on."""

from __future__ import annotations

from pathlib import Path

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
