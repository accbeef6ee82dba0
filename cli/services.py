"""`mbds backend`, `mbds controller`, `mbds up` and `mbds health`: running the processes."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
import threading
from pathlib import Path
from typing import NoReturn

import click

from mbds.grpc_engine import IOMGR_ENDPOINTS, VARIABLE

os.environ.setdefault(VARIABLE, IOMGR_ENDPOINTS)   # before grpc loads: mbds/grpc_engine.py

from cli.certs import tls_options
from cli.options import event_loop_option, fail, port_in_range, split_search_option
from cli.ports import check_free, port_in_use
from mbds import eventloop
from mbds.client import DEFAULT_CONTROLLER
from mbds.cluster import end_with_launcher
from mbds.dirlock import DirInUse
from mbds.doors import DoorError, TokensFile
from mbds.errors import MbdsError, shorten
from mbds.service import ListenError
from mbds.tls import TlsError

DEFAULT_DATA_DIR = Path.home() / ".mbds" / "data"
DEFAULT_PORT = 50051


def _metrics(port: int | None, listen: str) -> int:
    """Serve /metrics on the same interface as the gRPC service (loopback by default);
    returns the port it is served on (port 0: one the system picks), 0 for none."""
    if port is None:
        return 0
    from prometheus_client import start_http_server
    host = listen.rsplit(":", 1)[0].strip("[]")
    try:
        server, _ = start_http_server(port, addr=host)
    except OSError as e:        # named as the gRPC ports are (`mbds.service.listen_on`)
        fail(f"/metrics cannot listen on {host}:{port}: {e.strerror or e}")
    # Read by LocalCluster (mbds/cluster.py), which shows it to the user of `mbds up`.
    print(f"metrics on http://{host}:{server.server_port}/metrics", flush=True)
    return server.server_port


def _ended(code: int) -> str:
    """How a child process ended, from its return code (negative: the signal)."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"killed by signal {-code}"


def _exit_stopped() -> NoReturn:
    """Exit 0 once serve() has stopped, without the interpreter's teardown: every file and
    stream is closed already, and tearing down gRPC and the loaded modules would delay
    a cluster's stop, paid once for the controller and again for the backends
    (docs/stopping.md)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@click.command()
@click.option("--listen", default="127.0.0.1:50061", show_default=True,
              help="HOST:PORT to serve the controller and the other backends on.")
@click.option("--data-dir", type=click.Path(path_type=Path), help="This backend's data.")
@click.option("--data-root", type=click.Path(path_type=Path),
              help="Claim the first free slot ROOT/bK (for replicas sharing one volume).")
@click.option("--synchronous", default="NORMAL", show_default=True,
              type=click.Choice(["OFF", "NORMAL", "FULL", "EXTRA"], case_sensitive=False),
              help="SQLite synchronous mode (WAL: NORMAL survives a process crash).")
@click.option("--in-memory", is_flag=True,
              help="Keep records in memory only (durability benchmarks; nothing survives).")
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="Serve Prometheus /metrics on this port (0: any free one).")
@tls_options
@event_loop_option
def backend(listen: str, data_dir: Path | None, data_root: Path | None, synchronous: str,
            in_memory: bool, metrics_port: int | None, tls_dir: Path | None,
            insecure: bool, event_loop: str) -> None:
    """Run one backend (DM, CC, RECP)."""
    end_with_launcher()
    from backend.server import serve
    from backend.slots import claim_slot
    if (data_dir is None) == (data_root is None):
        raise click.UsageError("give exactly one of --data-dir and --data-root")
    if data_root is not None:
        data_dir = claim_slot(data_root)
    assert data_dir is not None
    check_free(listen, "the backend")
    served = _metrics(metrics_port, listen)
    try:
        eventloop.run(serve(listen=listen, data_dir=data_dir, synchronous=synchronous,
                            memory=in_memory, metrics_port=served, tls_dir=tls_dir,
                            insecure=insecure), event_loop)
    except (TlsError, DirInUse, ListenError) as e:
        fail(e)
    except sqlite3.DatabaseError as e:   # a file there that is not SQLite's, or damaged
        fail(f"data dir {data_dir}: {e}")
    _exit_stopped()


@click.command()
@click.option("--listen", default="127.0.0.1:50051", show_default=True,
              help="HOST:PORT to serve clients on (IIG is on --internal-listen).")
@click.option("--backends", "backend_list", default="", help="Comma-separated HOST:PORT list.")
@click.option("--discover", help="HOST:PORT whose DNS name answers with every backend replica.")
@click.option("--min-backends", type=click.IntRange(min=1),
              default=1, envvar="MBDS_MIN_BACKENDS", show_default=True,
              help="With --discover: start once at least this many replicas resolve and "
                   "the set has settled; later ones are admitted as they come.")
@click.option("--internal-listen", default="127.0.0.1:0", show_default=True,
              help="Where the backends reach IIG (never served on --listen).")
@click.option("--advertise", default="",
              help="HOST:PORT the backends use for --internal-listen (default: its address).")
@click.option("--internal-timing", type=click.Choice(["on", "off"]), default="on",
              envvar="MBDS_INTERNAL_TIMING", show_default=True,
              help="Time every message handler (/metrics, `mbds report handlers`); off: "
                   "the system without that instrumentation (env MBDS_INTERNAL_TIMING).")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Default deadline of a traffic unit, seconds.")
@click.option("--stalled-reader", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True,
              help="Abort a traffic unit whose client leaves a reply untaken this long, "
                   "seconds (its locks are released).")
@split_search_option
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="Serve Prometheus /metrics on this port (0: any free one).")
@click.option("--data-dir", type=click.Path(path_type=Path), required=True,
              help="The controller's commit decisions (decisions.db).")
@click.option("--synchronous", default="NORMAL", show_default=True,
              type=click.Choice(["OFF", "NORMAL", "FULL", "EXTRA"], case_sensitive=False),
              help="SQLite synchronous mode of the decision log.")
@tls_options
@click.option("--client-plaintext", is_flag=True,
              help="With --tls-dir: serve clients without TLS (loopback, or --insecure).")
@click.option("--tokens", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              envvar="MBDS_TOKENS",
              help="Require a client token: lines `read TOKEN` or `write TOKEN` (needs TLS).")
@event_loop_option
def controller(listen: str, backend_list: str, discover: str | None, min_backends: int,
               internal_listen: str, advertise: str, internal_timing: str, timeout: float,
               stalled_reader: float, split_search_from: int,
               metrics_port: int | None, data_dir: Path, synchronous: str,
               tls_dir: Path | None, insecure: bool, client_plaintext: bool,
               tokens: Path | None, event_loop: str) -> None:
    """Run the controller (REQP, IIG, PP)."""
    end_with_launcher()
    from controller.discovery import discover_backends
    from controller.server import serve
    from mbds import metrics
    metrics.set_internal_timing(internal_timing == "on")
    addresses = [a for a in backend_list.split(",") if a]
    if discover:
        addresses = discover_backends(discover, min_backends)
    if not addresses:
        raise click.UsageError("no backends: give --backends or --discover")
    check_free(listen, "the controller's client port")
    check_free(internal_listen, "IIG")
    try:
        door = TokensFile(tokens) if tokens else None
    except DoorError as e:
        fail(e)
    served = _metrics(metrics_port, listen)
    try:
        eventloop.run(serve(listen=listen, backends=addresses, advertise=advertise,
                            discover=discover or "",
                            internal_timing=internal_timing == "on", timeout=timeout,
                            stalled_reader=stalled_reader,
                            split_search_from=split_search_from, metrics_port=served,
                            data_dir=data_dir, synchronous=synchronous,
                            internal_listen=internal_listen, tls_dir=tls_dir,
                            client_plaintext=client_plaintext, insecure=insecure,
                            tokens=door), event_loop)
    except (TlsError, DoorError, DirInUse, ListenError, MbdsError) as e:
        fail(e)       # a backend refused at start, say: named, with no traceback
    except sqlite3.DatabaseError as e:   # decisions.db not SQLite's, or damaged
        fail(f"data dir {data_dir}: {e}")
    _exit_stopped()


@click.command()
@click.option("--backends", "n", type=click.IntRange(min=1), default=2, show_default=True,
              help="How many backends; at least as many as --data-dir holds.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="The controller's client port (0: a free one).")
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA_DIR,
              show_default=True,
              help="The cluster's data (a folder per backend, the controller's, the "
                   "certificates), kept across starts.")
@click.option("--internal-timing", type=click.Choice(["on", "off"]), default="on",
              show_default=True,
              help="Time every message handler (/metrics, `mbds report handlers`); off: "
                   "the system without that instrumentation.")
@click.option("--synchronous", default="NORMAL", show_default=True,
              type=click.Choice(["OFF", "NORMAL", "FULL", "EXTRA"], case_sensitive=False),
              help="SQLite synchronous mode of every backend and the decision log.")
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="Controller /metrics port; backend K uses +1+K (default: free ports).")
@click.option("--no-metrics", is_flag=True, help="Serve no Prometheus /metrics.")
@click.option("--backend-cpus", type=float,
              help="CPU budget of each backend (cgroup; needs root), e.g. 0.5.")
@split_search_option
@click.option("--client-tls", is_flag=True,
              help="Serve clients over TLS too (they need DATA_DIR/tls/ca.pem: env MBDS_CA).")
@click.option("--tokens", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Require a client token from this file (`mbds certs --tokens`); "
                   "implies --client-tls.")
def up(n: int, port: int, data_dir: Path, internal_timing: str, synchronous: str,
       metrics_port: int | None, no_metrics: bool, backend_cpus: float | None,
       split_search_from: int, client_tls: bool, tokens: Path | None) -> None:
    """Start a local cluster: a controller and N backends.

    They run as local processes on 127.0.0.1; Ctrl-C or SIGTERM stops them. When one of
    them exits, the others are stopped and the exit code is 1: `mbds up` again with the
    same --data-dir brings the cluster back, its data kept.

    Each serves Prometheus /metrics on 127.0.0.1 (ports of their own unless
    --metrics-port), printed once ready; --no-metrics serves none."""
    if no_metrics and metrics_port is not None:
        raise click.UsageError("give --metrics-port or --no-metrics, not both")
    if metrics_port and metrics_port + n > 65535:
        raise click.UsageError(f"--metrics-port {metrics_port}: the backends' ports, up to "
                               f"{metrics_port + n}, must be at most 65535")
    if not no_metrics and metrics_port is None:
        metrics_port = 0                # every process binds a free port of its own
    # A port in use is named before any backend starts, and before gRPC logs about it.
    if port and port_in_use(f"127.0.0.1:{port}"):
        fail(f"port {port} of 127.0.0.1 is in use (a cluster running there already? "
             f"`mbds status --controller 127.0.0.1:{port}` asks it): give another --port, "
             "or --port 0 for a free one")
    from mbds.cluster import LocalCluster, ProcessFailed
    from mbds.cpulimit import CpuLimitUnavailable
    cluster = LocalCluster(data_dir, n, port=port, internal_timing=internal_timing == "on",
                           synchronous=synchronous, metrics_port=metrics_port,
                           backend_cpus=backend_cpus, split_search_from=split_search_from,
                           client_tls=client_tls, tokens=tokens)
    # The cluster's processes leave Ctrl-C to this one (MBDS_OWNED), which stops the
    # controller first, so the backends stay until its current answers are out. So the
    # handlers come before the first child: a signal while starting unwinds start()
    # (which stops what it started); once up, it ends the wait below.
    stop, started = threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        if not started.is_set():
            raise KeyboardInterrupt
        stop.set()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        address = cluster.start()
    except (ProcessFailed, CpuLimitUnavailable, TlsError) as e:
        fail(e)
    started.set()
    click.echo(f"controller {address}  backends {n}  data {data_dir}")
    if address != DEFAULT_CONTROLLER:      # the other commands look at the default port
        click.echo(f"  the other commands reach it with --controller {address}, or after "
                   f"export MBDS_CONTROLLER={address}")
    for i, b in enumerate(cluster.backends):
        click.echo(f"  backend b{i} {b.address}")
    click.echo(f"internal links: mutual TLS (certificates in {cluster.tls_dir}); clients: "
               + (f"TLS (MBDS_CA={cluster.tls_dir}/ca.pem)" if cluster.client_tls
                  else "plaintext on loopback")
               + (f", token required (MBDS_TOKEN=a read or write token of {tokens})"
                  if tokens else ""))
    for proc in [cluster.controller, *cluster.backends]:
        if proc is not None and proc.metrics_url:
            click.echo(f"metrics {proc.name.removeprefix('backend ')} {proc.metrics_url}")
    click.echo("ready; Ctrl-C to stop", err=True)
    died = None
    while not stop.wait(0.2):       # a signal ends the wait at once
        dead = [p for p in [cluster.controller, *cluster.backends]
                if p is not None and p.popen.poll() is not None]
        if dead:
            died = dead[0]
            click.echo(f"{died.name} exited: {_ended(died.popen.returncode)}; its last "
                       "lines:\n" + "\n".join(f"  {line}" for line in died.tail), err=True)
            break
    cluster.stop()
    if died is None:
        click.echo("stopped", err=True)
        return
    # Not a supervisor (docs/usage.md): the rest is stopped and the failure reported.
    again = f"--backends {n}" + (f" --port {port}" if port != DEFAULT_PORT else "")
    click.echo(f"stopped the others; `mbds up {again} --data-dir {data_dir}` brings the "
               "cluster back, its data kept", err=True)
    sys.exit(1)


def _not_nan(ctx: click.Context, param: click.Parameter, seconds: float) -> float:
    """NaN, which click's range lets through: as a deadline of 0 s or one past what gRPC
    holds (which the range refuses), it would fail the call at once, reporting a live
    process as not answering."""
    if seconds != seconds:
        raise click.BadParameter("nan is not a number of seconds")
    return seconds


@click.command()
@click.option("--address", default=DEFAULT_CONTROLLER, show_default=True,
              callback=port_in_range,
              help="HOST:PORT to ask: a controller's client port (env MBDS_CONTROLLER), a "
                   "backend, or a controller's internal port.")
@click.option("--timeout", type=click.FloatRange(0, 86_400, min_open=True), default=3.0,
              show_default=True, callback=_not_nan,
              help="Seconds to wait for the answer, at most a day.")
@click.option("--tls-dir", type=click.Path(path_type=Path, file_okay=False), envvar="MBDS_TLS_DIR",
              help="Ask over mutual TLS with the cluster's certificates (env MBDS_TLS_DIR): "
                   "a backend, or the controller's internal port.")
@click.option("--ca", type=click.Path(path_type=Path, dir_okay=False), envvar="MBDS_CA",
              help="Ask a TLS client port (--client-tls, --tokens) over TLS, checking its "
                   "certificate with the cluster's ca.pem, as a client does (env MBDS_CA). "
                   "--tls-dir, when given, is used instead.")
@click.option("--of", "role", type=click.Choice(["controller", "backend"]),
              help="What runs at ADDRESS, whose certificate --tls-dir checks [default: a "
                   "controller, then a backend].")
def health(address: str, timeout: float, tls_dir: Path | None, ca: Path | None,
           role: str | None) -> None:
    """Exit 0 when the process at ADDRESS reports SERVING.

    It asks the gRPC health service. A liveness check: a controller serves while a
    backend is down (`mbds status` exits 2 then)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from mbds.tls import Identity, client_credentials
    def channel(of: str) -> grpc.Channel:
        try:
            if tls_dir is not None:     # whichever role's key pair the directory holds
                own = "controller" if (tls_dir / "controller.key").exists() else "backend"
                creds, options = Identity.load(tls_dir, own).channel(of)
                return grpc.secure_channel(address, creds, options=options)
            if ca is not None:      # the client port: the CA alone, no key, no token
                return grpc.secure_channel(address, client_credentials(ca, None))
        except TlsError as e:
            fail(e)
        return grpc.insecure_channel(address)
    # Over mutual TLS the certificate at ADDRESS is checked for a role's name: unless
    # told which, a controller's and then a backend's (a wrong one fails the handshake).
    roles = [role] if role is not None else ["controller", "backend"]
    if tls_dir is None:
        roles = roles[:1]
    for i, of in enumerate(roles):
        try:
            with channel(of) as ch:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                              timeout=timeout)
            break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or i == len(roles) - 1:
                details = shorten(e.details() or "", 300)
                if "Failed to create security handshaker" in details:
                    # gRPC's words for certificates it could not load.
                    details += (f" ({tls_dir if tls_dir is not None else ca} holds no "
                                "certificate gRPC can read)")
                fail(f"{shorten(address)}: {e.code().name}: {details}")
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    click.echo(status)
    sys.exit(0 if status == "SERVING" else 1)
