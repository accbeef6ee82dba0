"""`mbds backend`, `mbds controller`, `mbds up` and `mbds health`: running the processes."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import click

from cli.options import fail, split_search_option
from mbds.client import DEFAULT_CONTROLLER

DEFAULT_DATA_DIR = Path.home() / ".mbds" / "data"


def _metrics(port: int | None, listen: str) -> int:
    """Serve /metrics on the same interface as the gRPC service (loopback by default);
    returns the port it is served on (port 0: one the system picks), 0 for none."""
    if port is None:
        return 0
    from prometheus_client import start_http_server
    server, _ = start_http_server(port, addr=listen.rsplit(":", 1)[0].strip("[]"))
    return server.server_port


@click.command()
@click.option("--listen", default="127.0.0.1:50061", show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), help="This backend's data.")
@click.option("--data-root", type=click.Path(path_type=Path),
              help="Claim the first free slot ROOT/bK (for replicas sharing one volume).")
@click.option("--synchronous", default="NORMAL", show_default=True,
              type=click.Choice(["OFF", "NORMAL", "FULL", "EXTRA"], case_sensitive=False),
              help="SQLite synchronous mode (WAL: NORMAL survives a process crash).")
@click.option("--in-memory", is_flag=True,
              help="Keep records in memory only (durability benchmarks; nothing survives).")
@click.option("--metrics-port", type=int,
              help="Serve Prometheus /metrics on this port (0: any free one).")
def backend(listen: str, data_dir: Path | None, data_root: Path | None, synchronous: str,
            in_memory: bool, metrics_port: int | None) -> None:
    """Run one backend (DM, CC, RECP)."""
    from backend.server import serve
    from backend.slots import claim_slot
    if (data_dir is None) == (data_root is None):
        raise click.UsageError("give exactly one of --data-dir and --data-root")
    if data_root is not None:
        data_dir = claim_slot(data_root)
    assert data_dir is not None
    served = _metrics(metrics_port, listen)
    asyncio.run(serve(listen=listen, data_dir=data_dir, synchronous=synchronous,
                      memory=in_memory, metrics_port=served))


@click.command()
@click.option("--listen", default="127.0.0.1:50051", show_default=True)
@click.option("--backends", "backend_list", default="", help="Comma-separated HOST:PORT list.")
@click.option("--discover", help="HOST:PORT whose DNS name answers with every backend replica.")
@click.option("--expect", type=int, default=0, help="With --discover: backends to wait for.")
@click.option("--internal-listen", default="127.0.0.1:0", show_default=True,
              help="Where the backends reach IIG (never served on --listen).")
@click.option("--advertise", default="",
              help="HOST:PORT the backends use for --internal-listen (default: its address).")
@click.option("--internal-timing", type=click.Choice(["on", "off"]), default="on",
              envvar="MBDS_INTERNAL_TIMING", show_default=True)
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Default deadline of a traffic unit, seconds.")
@split_search_option
@click.option("--metrics-port", type=int,
              help="Serve Prometheus /metrics on this port (0: any free one).")
@click.option("--data-dir", type=click.Path(path_type=Path), required=True,
              help="The controller's commit decisions (decisions.db).")
@click.option("--synchronous", default="NORMAL", show_default=True,
              type=click.Choice(["OFF", "NORMAL", "FULL", "EXTRA"], case_sensitive=False),
              help="SQLite synchronous mode of the decision log.")
def controller(listen: str, backend_list: str, discover: str | None, expect: int,
               internal_listen: str, advertise: str, internal_timing: str, timeout: float,
               split_search_from: int,
               metrics_port: int | None, data_dir: Path, synchronous: str) -> None:
    """Run the controller (REQP, IIG, PP)."""
    from controller.discovery import discover_backends
    from controller.server import serve
    from mbds import metrics
    metrics.set_internal_timing(internal_timing == "on")
    addresses = [a for a in backend_list.split(",") if a]
    if discover:
        addresses = discover_backends(discover, expect)
    if not addresses:
        raise click.UsageError("no backends: give --backends or --discover")
    served = _metrics(metrics_port, listen)
    asyncio.run(serve(listen=listen, backends=addresses, advertise=advertise,
                      discover=discover or "",
                      internal_timing=internal_timing == "on", timeout=timeout,
                      split_search_from=split_search_from, metrics_port=served,
                      data_dir=data_dir, synchronous=synchronous,
                      internal_listen=internal_listen))


@click.command()
@click.option("--backends", "n", type=int, default=2, show_default=True)
@click.option("--port", type=int, default=50051, show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA_DIR,
              show_default=True)
@click.option("--internal-timing", type=click.Choice(["on", "off"]), default="on",
              show_default=True)
@click.option("--synchronous", default="NORMAL", show_default=True)
@click.option("--metrics-port", type=int, help="Controller /metrics port; backend K uses +1+K.")
@click.option("--backend-cpus", type=float,
              help="CPU budget of each backend (cgroup; needs root), e.g. 0.5.")
@split_search_option
def up(n: int, port: int, data_dir: Path, internal_timing: str, synchronous: str,
       metrics_port: int | None, backend_cpus: float | None, split_search_from: int) -> None:
    """Start a controller and N backends as local processes; Ctrl-C stops them."""
    from mbds.cluster import LocalCluster, ProcessFailed
    from mbds.cpulimit import CpuLimitUnavailable
    cluster = LocalCluster(data_dir, n, port=port, internal_timing=internal_timing == "on",
                           synchronous=synchronous, metrics_port=metrics_port,
                           backend_cpus=backend_cpus, split_search_from=split_search_from)
    try:
        address = cluster.start()
    except (ProcessFailed, CpuLimitUnavailable) as e:
        fail(e)
    click.echo(f"controller {address}  backends {n}  data {data_dir}")
    for i, b in enumerate(cluster.backends):
        click.echo(f"  backend b{i} {b.address}")
    if metrics_port is not None:
        click.echo(f"metrics: http://127.0.0.1:{metrics_port}/metrics (controller), "
                   f"ports {metrics_port + 1}..{metrics_port + n} (backends)")
    click.echo("ready; Ctrl-C to stop", err=True)
    stop = {"now": False}

    def on_signal(*_: object) -> None:
        stop["now"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop["now"]:
        dead = [p for p in [cluster.controller, *cluster.backends]
                if p is not None and p.popen.poll() is not None]
        if dead:
            click.echo(f"{dead[0].name} exited:\n" + "\n".join(dead[0].tail), err=True)
            break
        time.sleep(0.2)
    cluster.stop()
    click.echo("stopped", err=True)


@click.command()
@click.option("--address", default=DEFAULT_CONTROLLER, show_default=True)
@click.option("--timeout", type=float, default=3.0)
def health(address: str, timeout: float) -> None:
    """Exit 0 when the process at ADDRESS reports SERVING (gRPC health service)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    try:
        with grpc.insecure_channel(address) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                          timeout=timeout)
    except grpc.RpcError as e:
        fail(f"{address}: {e.code().name}")
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    click.echo(status)
    sys.exit(0 if status == "SERVING" else 1)
