"""The services read and write their sockets on iomgr's endpoints, not on gRPC's
EventEngine pool (mbds/grpc_engine.py): seen on a running backend by which of its
threads do the work of its messages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen import paper_db as P
from loadgen.cpu import run_ms_by_thread
from mbds import grpc_engine

UNITS = 300


def _event_engine_share(cluster_factory, monkeypatch: pytest.MonkeyPatch,
                        environment: str | None) -> float:
    """The share of one backend's CPU over UNITS request-1 units spent on threads named
    event_engine (gRPC's pool), the backend started with GRPC_EXPERIMENTS unset (None:
    its own entry chooses) or set to `environment`."""
    if environment is None:
        monkeypatch.delenv(grpc_engine.VARIABLE, raising=False)
    else:
        monkeypatch.setenv(grpc_engine.VARIABLE, environment)
    running = cluster_factory(1, name=f"engine-{environment!r}")
    monkeypatch.undo()
    P.load(running.client, 1)
    text = P.REQUESTS[0].abdl(1)
    for _ in range(30):
        running.client.execute(text)
    pid = running.cluster.backends[0].popen.pid
    before = run_ms_by_thread(pid)
    for _ in range(UNITS):
        running.client.execute(text)
    after = run_ms_by_thread(pid)
    if before is None or after is None:
        pytest.skip("this kernel keeps no per-thread schedstat")
    spent = {name: ms - before.get(name, 0.0) for name, ms in after.items()}
    return spent.get("event_engine", 0.0) / sum(spent.values())


def test_a_backend_handles_its_messages_without_event_engine_threads(
        cluster_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    # The control, on gRPC's defaults: EventEngine's pool reads and writes the sockets,
    # so the measure can tell the two apart.
    defaults = _event_engine_share(cluster_factory, monkeypatch, "")
    chosen = _event_engine_share(cluster_factory, monkeypatch, None)
    assert defaults > 0.08, f"on gRPC's defaults the pool did {defaults:.1%} of the work"
    # Side by side, as a loaded machine moves both shares: a backend of its own choice
    # leaves the pool a third of its part on the defaults at most.
    assert chosen < defaults / 3, (f"the pool did {chosen:.1%} of the backend's work, "
                                   f"{defaults:.1%} on gRPC's defaults")


# Run in a fresh interpreter: what GRPC_EXPERIMENTS holds at the moment grpc is first
# imported, while a command's module loads.
_AT_GRPC_LOAD = """
import os, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc" and not seen:
            seen.append(os.environ.get("GRPC_EXPERIMENTS", "<unset>"))
sys.meta_path.insert(0, Watch())
import importlib
importlib.import_module(sys.argv[1])
import grpc
print(seen[0])
"""


def _at_grpc_load(module: str, environment: str | None, tmp_path: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != grpc_engine.VARIABLE}
    if environment is not None:
        env[grpc_engine.VARIABLE] = environment
    return subprocess.run([sys.executable, "-c", _AT_GRPC_LOAD, module], env=env,
                          cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("module", ["cli.services", "cli.bench"])
def test_services_and_benchmarks_choose_before_grpc_loads(module: str, tmp_path: Path
                                                          ) -> None:
    assert _at_grpc_load(module, None, tmp_path) == grpc_engine.IOMGR_ENDPOINTS
    # A choice in the environment is kept, gRPC's defaults (empty) included.
    assert _at_grpc_load(module, "", tmp_path) == ""
    assert _at_grpc_load(module, "-event_engine_client", tmp_path) == "-event_engine_client"


@pytest.mark.parametrize("module", ["cli.database", "cli.shell", "cli.paper"])
def test_client_commands_keep_grpcs_defaults(module: str, tmp_path: Path) -> None:
    assert _at_grpc_load(module, None, tmp_path) == "<unset>"
