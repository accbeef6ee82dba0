"""Container tests: the `containers` marker, and compose logs on a failed test."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "containers: builds the images and runs docker-compose stacks (slow)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if hasattr(value, "project") and callable(getattr(value, "logs", None)):
                report.sections.append((f"compose logs ({value.project})", value.logs()))
