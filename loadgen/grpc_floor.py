"""The floor under a traffic unit's fixed cost: one bare gRPC message each way.

A backend's share of a small unit is at least one bus message in and one reply out,
the controller's at least a client message and a bus message each way. This measures
what one such round trip costs when nothing else happens: a server process that
echoes each message of a bidirectional stream (grpc.aio on the services' event loop,
`mbds/eventloop.py`) and
this process sending one small message and awaiting its echo, over mutual TLS with
certificates of the cluster's kind (as the internal links are) or plaintext (as the
client port on loopback). CPU per round trip is each process's scheduler count, as in
`mbds bench fixed-cost`, so it holds on a busy machine; the server's thread switches per
round trip say how many threads a message passes through (mbds/grpc_engine.py).

    python3 -m loadgen.grpc_floor serve [TLS_DIR]   # the echo server (a child): prints its port
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from loadgen.cpu import run_ms, switches
from mbds import eventloop, owned, tls

METHOD = "/floor.Echo/Stream"
PAYLOAD = b"x" * 100          # about a small unit's bus message


def _same(b: bytes) -> bytes:
    return b


async def _serve(tls_dir: Path | None) -> None:
    async def echo(messages: Any, _context: grpc.aio.ServicerContext) -> Any:
        async for m in messages:
            yield m

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("floor.Echo", {
        "Stream": grpc.stream_stream_rpc_method_handler(echo, _same, _same)}),))
    address = "127.0.0.1:0"        # a port of its own, read back by the parent
    port = (server.add_insecure_port(address) if tls_dir is None else server.add_secure_port(
        address, tls.Identity.load(tls_dir, "backend").internal_server()))
    await server.start()
    print(f"ready {port}", flush=True)
    await server.wait_for_termination()


@contextlib.contextmanager
def _server(tls_dir: Path | None) -> Iterator[tuple[subprocess.Popen[str], int]]:
    args = [sys.executable, "-m", "loadgen.grpc_floor", "serve"]
    with owned.starting() as record:    # `mbds bench`'s supervisor stops it too
        proc = subprocess.Popen(args + ([str(tls_dir)] if tls_dir else []),
                                stdout=subprocess.PIPE, text=True)
        key = record(proc.terminate)
    try:
        assert proc.stdout is not None
        word, _, port = proc.stdout.readline().partition(" ")
        if word != "ready" or not port.strip().isdigit():
            raise RuntimeError("the echo server did not start")
        yield proc, int(port)
    finally:
        proc.terminate()
        proc.wait(10)
        owned.disown(key)


async def _round_trips(port: int, tls_dir: Path | None, n: int, warmup: int,
                       server_pid: int) -> dict[str, float]:
    address = f"127.0.0.1:{port}"
    if tls_dir is None:
        channel = grpc.aio.insecure_channel(address)
    else:
        creds, options = tls.Identity.load(tls_dir, "controller").channel("backend")
        channel = grpc.aio.secure_channel(address, creds, options=options)
    async with channel:
        call = channel.stream_stream(METHOD, _same, _same)()
        for _ in range(warmup):
            await call.write(PAYLOAD)
            await call.read()
        server0, client0 = run_ms(server_pid), time.process_time()
        switched0 = switches(server_pid)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await call.write(PAYLOAD)
            if await call.read() != PAYLOAD:
                raise RuntimeError("the echo server answered something else")
            times.append((time.perf_counter() - t0) * 1000)
        client = (time.process_time() - client0) * 1000
        server1, switched1 = run_ms(server_pid), switches(server_pid)
        await call.done_writing()
    if server0 is None or server1 is None or switched0 is None or switched1 is None:
        raise RuntimeError("this kernel keeps no per-thread schedstat")
    return {"server_cpu_ms": (server1 - server0) / n, "client_cpu_ms": client / n,
            "server_switches": (switched1 - switched0) / n,
            "median_ms": statistics.median(times)}


def measure(n: int = 2000, warmup: int = 200) -> list[dict[str, Any]]:
    """One row per transport: plaintext and mutual TLS."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        tls.make(certs)
        for name, tls_dir in (("plaintext", None), ("mutual TLS", certs)):
            with _server(tls_dir) as (proc, port):
                got = eventloop.run(_round_trips(port, tls_dir, n, warmup, proc.pid))
            rows.append({"transport": name, "round_trips": n, **got})
    return rows


if __name__ == "__main__":
    if len(sys.argv) in (2, 3) and sys.argv[1] == "serve":
        eventloop.run(_serve(Path(sys.argv[2]) if len(sys.argv) > 2 else None))
    else:
        sys.exit("usage: python3 -m loadgen.grpc_floor serve [TLS_DIR]")
