"""Discovery of the backend replicas by DNS (controller/discovery.py): the controller
takes every replica once the set has settled, with no count given."""

from __future__ import annotations

import pytest

from controller import discovery


class FakeDns:
    """Answers `backend` with the replicas started so far, one more at each listed step."""

    def __init__(self, answers: list[list[str]]) -> None:
        self.answers = answers
        self.calls = 0

    def resolve(self, host: str, port: int) -> list[str]:
        assert (host, port) == ("backend", 50061)
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return [f"{a}:{port}" for a in answer]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake clock: each poll's sleep advances it."""
    now = [0.0]
    monkeypatch.setattr(discovery.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(discovery.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    return now


def test_every_replica_is_taken_once_the_set_settles(monkeypatch, clock) -> None:
    # Replicas appear one by one (DNS lags the containers' starts), then the set holds.
    dns = FakeDns([[], ["10.0.0.2"], ["10.0.0.2"], ["10.0.0.2", "10.0.0.4"],
                   ["10.0.0.2", "10.0.0.3", "10.0.0.4"]])
    monkeypatch.setattr(discovery, "resolve", dns.resolve)
    found = discovery.discover_backends("backend:50061", settle=3.0, poll=0.5)
    assert found == ["10.0.0.2:50061", "10.0.0.3:50061", "10.0.0.4:50061"]
    # Taken after the set had stayed the same for the settle time, not before.
    assert 3.0 <= clock[0] - 4 * 0.5 <= 3.5


def test_a_minimum_waits_for_that_many(monkeypatch, clock) -> None:
    dns = FakeDns([["10.0.0.2"]] * 20 + [["10.0.0.2", "10.0.0.3"]])
    monkeypatch.setattr(discovery, "resolve", dns.resolve)
    found = discovery.discover_backends("backend:50061", 2, settle=1.0, poll=0.5)
    assert len(found) == 2 and clock[0] >= 20 * 0.5


def test_too_few_replicas_fail_with_what_was_found(monkeypatch, clock) -> None:
    monkeypatch.setattr(discovery, "resolve", FakeDns([["10.0.0.2"]]).resolve)
    with pytest.raises(SystemExit, match=r"at least 3 backends at backend:50061, found 1: "
                                         r"10\.0\.0\.2:50061"):
        discovery.discover_backends("backend:50061", 3, timeout=10)


def test_a_target_without_a_port_is_refused() -> None:
    with pytest.raises(SystemExit, match="expected HOST:PORT"):
        discovery.discover_backends("backend", 1)
