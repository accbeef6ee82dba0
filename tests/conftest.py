"""Fixtures: real local clusters (separate processes, real gRPC, real SQLite files)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

# Set before gRPC starts in this process: its fork handlers crash a child forked while
# channels are active before the child can exec (grpc/grpc#43055; `pexpect` forks the
# shell's terminal with `forkpty`, which runs them). The services never fork.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc
import pytest

from mbds.client import Client
from mbds.cluster import LocalCluster
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import CLUSTER_KEY, EPOCH_KEY
from mbds.tls import Identity

CENSUS_YAML = """
files:
  CENSUS:
    attributes: {CITY: string, POP: integer, AREA: float, STATE: string}
    directory:
      POP: {type: A, ranges: [[0, 999], [1000, 4999]]}
      STATE: {type: B, values: [CA, NY]}
      CITY: {type: C}
  STATES:
    attributes: {CODE: string, NAME: string, REGION: string}
    directory:
      CODE: {type: C}
"""
CENSUS_SCHEMAS = {
    "CENSUS": {"CITY": "string", "POP": "integer", "AREA": "float", "STATE": "string"},
    "STATES": {"CODE": "string", "NAME": "string", "REGION": "string"},
}


# Clusters started and not yet closed: a failing test shows their processes' logs.
RUNNING: list[Running] = []


class Running:
    """A started cluster with a client; dumps the processes' logs when a test fails."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.client = Client(cluster.address, timeout=60)
        RUNNING.append(self)

    def close(self) -> None:
        if self in RUNNING:
            RUNNING.remove(self)
        self.client.close()
        self.cluster.stop()


def start_cluster(data_dir: Path, n: int, **kw: object) -> Running:
    cluster = LocalCluster(data_dir, n, **kw)  # type: ignore[arg-type]
    cluster.start()
    return Running(cluster)


def module_cluster(name: str, n: int | Sequence[int] = 2,
                   setup: Callable[[Running], object] | None = None) -> Any:
    """A fixture: one cluster of `n` backends for all of a module's tests (given several
    counts, one per count, a parameter), `setup` run on it first. It is stopped however
    its start or setup ends."""
    def started(tmp_path_factory: pytest.TempPathFactory, backends: int
                ) -> Iterator[Running]:
        r = start_cluster(tmp_path_factory.mktemp(f"{name}{backends}") / "data", backends)
        try:
            if setup is not None:
                setup(r)
            yield r
        finally:
            r.close()

    if isinstance(n, int):
        @pytest.fixture(scope="module")
        def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
            yield from started(tmp_path_factory, n)
        return cluster

    @pytest.fixture(scope="module", params=list(n), ids=lambda k: f"{k}backends")
    def clusters(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
        yield from started(tmp_path_factory, request.param)
    return clusters


def internal_channel(cluster: LocalCluster, address: str, as_role: str = "controller",
                     to_role: str = "backend") -> grpc.Channel:
    """A channel to a cluster's internal service as a process of `as_role` opens it: with
    that role's certificate (plaintext when the cluster runs without TLS)."""
    if cluster.tls_dir is None:
        return grpc.insecure_channel(address)
    creds, options = Identity.load(cluster.tls_dir, as_role).channel(to_role)
    return grpc.secure_channel(address, creds, options=options)


def as_controller(cluster: LocalCluster, address: str, epoch: str = ""
                  ) -> tuple[tuple[str, str], ...]:
    """The metadata of a call to a backend as its cluster's controller names it: the
    backend's cluster, and `epoch` or else that of the bus the backend serves now. A
    backend just joined takes its cluster's id when its bus opens: that is waited for."""
    deadline = time.monotonic() + 10
    with internal_channel(cluster, address) as ch:
        while True:
            hello = rpc.BackendStub(ch).Hello(pb.HelloRequest(), timeout=10)
            if hello.cluster or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    return ((CLUSTER_KEY, hello.cluster), (EPOCH_KEY, epoch or hello.bus_epoch))


def backend_digests(r: Running) -> list[str]:
    """Each backend's own directory fingerprint, asked over gRPC."""
    out = []
    for p in r.cluster.backends:
        with internal_channel(r.cluster, p.address or "") as ch:
            out.append(rpc.BackendStub(ch).Hello(pb.HelloRequest(), timeout=10).directory_digest)
    return out


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator:
    started: list[Running] = []

    def make(n: int, name: str = "data", **kw: object) -> Running:
        r = start_cluster(tmp_path / name, n, **kw)
        started.append(r)
        return r

    yield make
    for r in started:
        r.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for r in RUNNING:
            report.sections.append(("cluster logs", r.cluster.logs()))
