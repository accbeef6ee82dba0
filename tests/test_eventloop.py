"""The services' event loop (mbds/eventloop.py): uvloop by default, the standard
library's asyncio when MBDS_EVENT_LOOP or --event-loop asks; either kind serves the
same requests, and a cluster may mix them."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from mbds import eventloop
from tests.conftest import CENSUS_YAML, Running


async def _kind() -> str:
    await asyncio.sleep(0)
    return eventloop.running()


@pytest.mark.parametrize("kind", eventloop.CHOICES)
def test_run_uses_the_loop_it_names(kind: str) -> None:
    assert eventloop.run(_kind(), kind) == kind


def test_without_a_name_the_environment_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.run(_kind()) == "uvloop"
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.run(_kind()) == "asyncio"


def test_an_unknown_loop_is_refused_with_the_choices() -> None:
    coro = _kind()
    with pytest.raises(ValueError, match="'tornado'.*uvloop, asyncio"):
        eventloop.run(coro, "tornado")
    coro.close()
    p = subprocess.run([sys.executable, "-m", "mbds", "backend", "--event-loop", "tornado",
                        "--data-dir", "/nonexistent"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "'tornado' is not one of 'uvloop', 'asyncio'" in p.stderr


def _loops(r: Running) -> list[str]:
    """The loop each process says it runs on, controller first."""
    procs = [r.cluster.controller, *r.cluster.backends]
    said = []
    for p in procs:
        assert p is not None
        [line] = [t for t in p.tail if "listening on" in t]
        said.append(line.rsplit("event loop ", 1)[1].rstrip(")"))
    return said


def test_services_run_on_uvloop_and_on_asyncio_side_by_side(cluster_factory) -> None:
    r: Running = cluster_factory(2)
    assert _loops(r) == ["uvloop", "uvloop", "uvloop"]
    asyncio_env = {"MBDS_EVENT_LOOP": "asyncio"}
    r.cluster.backends[1].stop()
    r.cluster.restart_backend(1, asyncio_env)
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller(asyncio_env)
    assert _loops(r) == ["asyncio", "uvloop", "asyncio"]
    c = r.client
    c.define(CENSUS_YAML)
    c.execute("[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, C{k}>, <POP, {k}>, <STATE, NY>)"
                              for k in range(20)) + "]")
    # Both backends hold records, so every unit below crosses both kinds of loop:
    # the bus, the descriptor-id exchange and a two-phase UPDATE.
    [whole] = c.execute("RETRIEVE (FILE = Census) (CITY, POP)")
    assert sorted(rec["POP"] for rec in whole.records) == list(range(20))
    assert all(b["records"] > 0 for b in whole.stats["backends"]), whole.stats
    c.execute("UPDATE ((FILE = Census) and (POP < 10)) <STATE = CA>")
    [moved] = c.execute("RETRIEVE ((FILE = Census) and (STATE = CA)) (POP)")
    assert sorted(rec["POP"] for rec in moved.records) == list(range(10))
