"""What an operator's script relies on, through real processes: `mbds status`'s exit code
while a backend is down, `mbds health` against a TLS client port with the CA alone, and
the calls the client port's token check refuses counted in `mbds_request_errors_total`
as a real scrape of /metrics reads it."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML, Running
from tests.crashes import wait_for


def mbds(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`mbds ARGS` as a command, with none of the caller's MBDS_* settings but `env`."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MBDS_CA", "MBDS_TOKEN", "MBDS_TLS_DIR", "MBDS_CONTROLLER")}
    return subprocess.run([sys.executable, "-m", "mbds", *args], capture_output=True,
                          text=True, timeout=120, env={**clean, **(env or {})})


def test_status_exits_2_while_a_backend_is_down_and_health_stays_serving(
        cluster_factory) -> None:
    r: Running = cluster_factory(2)
    address = r.cluster.address
    up = mbds("status", "--controller", address)
    assert up.returncode == 0, up.stdout + up.stderr
    first = up.stdout.splitlines()[0]
    assert first.startswith("cluster ") and "; backends 2; files " in first, first
    assert "expected" not in first
    assert up.stdout.count(" up") == 2

    r.cluster.backends[1].kill()
    down: list[subprocess.CompletedProcess] = []

    def reported() -> bool:
        down.append(mbds("status", "--controller", address))
        return down[-1].returncode != 0
    wait_for(reported, 60, "status failing with backend b1 killed")
    out = down[-1]
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("cluster ") and "; backends 2; " in lines[0]
    b0 = next(x for x in lines if x.strip().startswith("b0"))
    b1 = next(x for x in lines if x.strip().startswith("b1"))
    assert " up" in b0 and " DOWN " in b1, out.stdout
    assert out.stderr == ""
    # Liveness: the controller itself still serves.
    h = mbds("health", "--address", address)
    assert h.returncode == 0 and h.stdout.strip() == "SERVING", h.stdout + h.stderr
    helped = mbds("status", "--help")
    assert helped.returncode == 0 and "2 when one is not" in " ".join(helped.stdout.split())
    # Back again: status reports it up on an idle cluster, no request in between.
    r.cluster.restart_backend(1)
    again: list[subprocess.CompletedProcess] = []

    def back() -> bool:
        again.append(mbds("status", "--controller", address))
        return again[-1].returncode == 0
    wait_for(back, 30, "status exiting 0 once backend b1 is back")
    assert again[-1].stdout.count(" up") == 2, again[-1].stdout


def test_health_answers_on_every_port_over_mutual_tls_with_the_cluster_certificates(
        cluster_factory) -> None:
    """A backend and the controller's internal port, with --tls-dir alone: the role whose
    certificate name to check is found; given wrong, the error names the handshake."""
    r: Running = cluster_factory(1)
    assert r.cluster.tls_dir is not None and r.cluster.controller is not None
    [internal] = [line.rsplit(" ", 1)[1] for line in r.cluster.controller.tail
                  if line.startswith("controller internal (IIG) on ")]
    backend = r.cluster.backends[0].address or ""
    tls = ["--tls-dir", str(r.cluster.tls_dir)]
    for address in (backend, internal):
        out = mbds("health", "--address", address, *tls)
        assert out.returncode == 0 and out.stdout == "SERVING\n", out.stdout + out.stderr
    assert mbds("health", "--address", backend, *tls, "--of", "backend").returncode == 0
    wrong = mbds("health", "--address", backend, *tls, "--of", "controller")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith(f"error: {backend}: UNAVAILABLE: "), wrong.stderr
    assert len(wrong.stderr) < 500


def test_mbds_up_refuses_a_synchronous_mode_sqlite_has_not() -> None:
    out = mbds("up", "--synchronous", "bogus", "--backends", "1")
    assert out.returncode == 2
    assert "Invalid value for '--synchronous': 'bogus' is not one of" in out.stderr


@pytest.fixture
def guarded(cluster_factory, tmp_path: Path) -> tuple[Running, dict[str, str], Path]:
    """A cluster whose client port is TLS and needs a token, serving /metrics."""
    from cli.certs import write_tokens
    tokens = write_tokens(tmp_path / "tokens")
    r = cluster_factory(2, tokens=tmp_path / "tokens", metrics_port=0)
    assert r.cluster.ca is not None
    r.client.close()
    r.client = Client(r.cluster.address, timeout=60, ca=r.cluster.ca, token=tokens["write"])
    return r, tokens, r.cluster.ca


def errors_by_kind(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {s.labels["kind"]: s.value
            for family in text_string_to_metric_families(text)
            if family.name == "mbds_request_errors"
            for s in family.samples if s.name == "mbds_request_errors_total"}


def test_calls_the_token_check_refuses_are_counted_as_errors(guarded) -> None:
    r, tokens, ca = guarded
    assert r.cluster.controller is not None and r.cluster.controller.metrics_url
    url = r.cluster.controller.metrics_url
    before = errors_by_kind(url)
    env = {"MBDS_CA": str(ca)}
    for token in (None, "u" * 32):             # no token, an unknown one
        out = mbds("status", "--controller", r.cluster.address,
                   env={**env, **({"MBDS_TOKEN": token} if token else {})})
        assert out.returncode == 1 and "needs a token" in out.stderr, out.stderr
    with Client(r.cluster.address, timeout=10, ca=ca, token=tokens["read"]) as c:
        with pytest.raises(ClientError) as err:
            c.define(CENSUS_YAML)              # a write call, refused before its handler
        assert err.value.code == "PERMISSION_DENIED"
    after = errors_by_kind(url)
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert {k: v for k, v in grew.items() if v} == {"Unauthenticated": 2,
                                                    "PermissionDenied": 1}, after


def test_health_of_a_tls_client_port_needs_only_the_ca(guarded, tmp_path: Path) -> None:
    r, _, ca = guarded
    address = r.cluster.address
    by_env = mbds("health", "--address", address, env={"MBDS_CA": str(ca)})
    assert by_env.returncode == 0 and by_env.stdout.strip() == "SERVING", by_env.stderr
    only = tmp_path / "client-only"          # what a monitoring host holds: no key
    only.mkdir()
    (only / "ca.pem").write_bytes(ca.read_bytes())
    by_option = mbds("health", "--address", address, "--ca", str(only / "ca.pem"))
    assert by_option.returncode == 0 and by_option.stdout.strip() == "SERVING", \
        by_option.stderr
    plain = mbds("health", "--address", address, "--timeout", "2")
    assert plain.returncode == 1 and address in plain.stderr
    missing = mbds("health", "--address", address, "--ca", str(tmp_path / "nope.pem"))
    assert missing.returncode == 1 and "nope.pem" in missing.stderr, missing.stderr


def test_an_unexpected_failure_is_answered_internal_named_and_counted() -> None:
    """A failure that is none of MBDS's own kinds (a bug) ends the call INTERNAL with a
    bounded message naming it, and is counted, on every client method."""
    import asyncio

    import grpc

    from controller.server import ControllerServicer
    from mbds import metrics
    from mbds.proto import mbds_pb2 as pb
    from mbds.proto import mbds_pb2_grpc as rpc

    class Broken:
        def execute(self, text: str, timeout: object) -> None:
            raise RuntimeError("x" * 10_000)

        async def define(self, text: str) -> None:
            raise KeyError("planted")

        async def status(self, file: str) -> None:
            raise ZeroDivisionError("planted")

    def count(kind: str) -> float:
        return float(metrics.REQUEST_ERRORS.labels(kind).value)

    async def scenario() -> None:
        server = grpc.aio.server()
        rpc.add_ControllerServicer_to_server(ControllerServicer(Broken()), server)  # type: ignore[arg-type]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        before = {k: count(k) for k in ("RuntimeError", "KeyError", "ZeroDivisionError")}
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = rpc.ControllerStub(ch)
                for call, kind in ((lambda: stub.Execute(pb.ExecuteRequest(text="x")).read(),
                                    "RuntimeError"),
                                   (lambda: stub.Define(pb.DefineRequest(yaml="x")), "KeyError"),
                                   (lambda: stub.Status(pb.StatusRequest()),
                                    "ZeroDivisionError")):
                    try:
                        await call()
                    except grpc.aio.AioRpcError as e:
                        assert e.code() == grpc.StatusCode.INTERNAL, (kind, e)
                        assert (e.details() or "").startswith(f"internal error: {kind}(")
                        assert len(e.details() or "") < 2000
                    else:
                        raise AssertionError(f"{kind} was not raised")
        finally:
            await server.stop(0)
        assert {k: count(k) - v for k, v in before.items()} == {
            "RuntimeError": 1, "KeyError": 1, "ZeroDivisionError": 1}

    asyncio.run(scenario())
