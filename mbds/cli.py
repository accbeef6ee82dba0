"""`mbds` — the command line: run the system, talk to it, load and measure the paper's database.

A thin layer: every command calls the typed modules (client, cluster, servers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import click

from mbds.client import DEFAULT_CONTROLLER, Client, ClientError

DEFAULT_DATA_DIR = Path.home() / ".mbds" / "data"
controller_option = click.option("--controller", default=DEFAULT_CONTROLLER, show_default=True,
                                 help="Controller address HOST:PORT (env MBDS_CONTROLLER).")


def _fail(e: Exception) -> None:
    click.echo(f"error: {e}", err=True)
    sys.exit(1)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(verbose: bool) -> None:
    """MBDS: one controller and N backends over gRPC, each backend on SQLite."""
    verbose = verbose or bool(os.environ.get("MBDS_VERBOSE"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _metrics(port: int | None, listen: str) -> int:
    """Serve /metrics on the same interface as the gRPC service (loopback by default);
    returns the port it is served on (port 0: one the system picks), 0 for none."""
    if port is None:
        return 0
    from prometheus_client import start_http_server
    server, _ = start_http_server(port, addr=listen.rsplit(":", 1)[0].strip("[]"))
    return server.server_port


@main.command()
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


@main.command()
@click.option("--listen", default="127.0.0.1:50051", show_default=True)
@click.option("--backends", "backend_list", default="", help="Comma-separated HOST:PORT list.")
@click.option("--discover", help="HOST:PORT whose DNS name answers with every backend replica.")
@click.option("--expect", type=int, default=0, help="With --discover: backends to wait for.")
@click.option("--advertise", default="", help="Address backends use to reach this controller.")
@click.option("--internal-timing", type=click.Choice(["on", "off"]), default="on",
              envvar="MBDS_INTERNAL_TIMING", show_default=True)
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Default deadline of a traffic unit, seconds.")
@click.option("--split-search-from", type=click.IntRange(min=1), default=1,
              envvar="MBDS_SPLIT_SEARCH_FROM", show_default=True,
              help="Split descriptor search over the backends (ids exchanged between them, "
                   "the paper's design) for traffic units with at least this many "
                   "predicates; smaller ones are searched whole on every backend.")
@click.option("--metrics-port", type=int,
              help="Serve Prometheus /metrics on this port (0: any free one).")
def controller(listen: str, backend_list: str, discover: str | None, expect: int,
               advertise: str, internal_timing: str, timeout: float, split_search_from: int,
               metrics_port: int | None) -> None:
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
                      split_search_from=split_search_from, metrics_port=served))


@main.command()
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
@click.option("--split-search-from", type=click.IntRange(min=1), default=1,
              envvar="MBDS_SPLIT_SEARCH_FROM", show_default=True,
              help="Split descriptor search over the backends (ids exchanged between them, "
                   "the paper's design) for traffic units with at least this many "
                   "predicates; smaller ones are searched whole on every backend.")
def up(n: int, port: int, data_dir: Path, internal_timing: str, synchronous: str,
       metrics_port: int | None, backend_cpus: float | None, split_search_from: int) -> None:
    """Start a controller and N backends as local processes; Ctrl-C stops them."""
    from mbds.cluster import LocalCluster, ProcessFailed
    cluster = LocalCluster(data_dir, n, port=port, internal_timing=internal_timing == "on",
                           synchronous=synchronous, metrics_port=metrics_port,
                           backend_cpus=backend_cpus, split_search_from=split_search_from)
    from mbds.cpulimit import CpuLimitUnavailable
    try:
        address = cluster.start()
    except (ProcessFailed, CpuLimitUnavailable) as e:
        _fail(e)
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


def print_results(results: list, as_json: bool) -> None:
    from mbds.tables import render_result
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_json()))
        else:
            render_result(r)


@main.command("exec")
@controller_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per request per line.")
@click.option("--timeout", type=float, default=120.0, show_default=True)
@click.argument("abdl")
def exec_(controller: str, as_json: bool, timeout: float, abdl: str) -> None:
    """Run one ABDL request or transaction."""
    if abdl == "-":
        abdl = sys.stdin.read()
    try:
        with Client(controller, timeout=timeout) as c:
            print_results(c.execute(abdl), as_json)
    except ClientError as e:
        _fail(e)


@main.command()
@controller_option
def shell(controller: str) -> None:
    """Interactive ABDL prompt with history, multi-line input and tables."""
    from mbds.shell import run_shell
    run_shell(controller)


@main.command()
@controller_option
@click.argument("path", type=click.File("r"))
def define(controller: str, path) -> None:  # noqa: ANN001
    """Apply a database definition (YAML)."""
    try:
        with Client(controller) as c:
            reply = c.define(path.read())
    except ClientError as e:
        _fail(e)
    for f in reply.files_created:
        click.echo(f"created {f}")
    for f in reply.files_unchanged:
        click.echo(f"unchanged {f}")
    for f in reply.files_reindexed:
        click.echo(f"reindexed {f}")


@main.command()
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
        _fail(f"{address}: {e.code().name}")  # type: ignore[attr-defined,arg-type]
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    click.echo(status)
    sys.exit(0 if status == "SERVING" else 1)


@main.command()
@controller_option
def status(controller: str) -> None:
    """Show the backends the controller uses and whether each is reachable."""
    try:
        with Client(controller) as c:
            s = c.status()
    except ClientError as e:
        _fail(e)
    click.echo(f"backends {len(s.backends)} (expected {s.expected_backends}); files "
               f"{', '.join(s.files) or '-'}; directory {s.directory_digest}")
    for b in s.backends:
        click.echo(f"  {b.name:8} {b.address:24} {'up' if b.reachable else 'DOWN ' + b.error}"
                   + (f"  {b.metrics_url}" if b.metrics_url else ""))
    if s.metrics_url:
        click.echo(f"controller metrics {s.metrics_url}; internal timing "
                   f"{'on' if s.internal_timing else 'off'}")


# Commands that live with their subsystems.
from loadgen.cli import bench  # noqa: E402
from mbds.paper_cli import load, paper  # noqa: E402
from mbds.report import report  # noqa: E402

for command in (load, paper, report, bench):
    main.add_command(command)
