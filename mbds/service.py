"""What every gRPC process shares: the message size limit, a port of its own, and waiting
for SIGTERM/SIGINT to shut down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable

import grpc

# The largest gRPC message any process sends or takes (a row batch is held well under it).
MAX_MESSAGE = 64 << 20
# What the items joined into one message (traffic units, replies, row batches, a load's
# records) may add up to: the limit less room for the message around them. An item
# larger than this alone can never be sent, and is refused naming the limit.
MESSAGE_BUDGET = MAX_MESSAGE - (1 << 20)
# A backend is named by its data dir: one path component.
MAX_BACKEND_NAME = 255
# Records in one load batch (a traffic unit), as rows or as columns: a constant or
# all-null column costs the wire a few bytes whatever its count, an empty row two, so
# the count itself is bounded. The client sends 10,000 (`LOAD_CHUNK`).
MAX_LOAD_RECORDS = 100_000
# The runs of a controller (epochs) a backend keeps the highest committed seq of, and
# tells at its hello: the latest ones, whose decision log may be checked against them.
COMMITTED_RUNS = 64
# An epoch as a controller makes it (uuid hex) is short; one past this is refused.
MAX_EPOCH = 64
# What backends told the controller of their commits, when no decision is written to
# take it along, is written to its log within this many seconds (`controller/carried.py`).
TOLD_EVERY = 1.0
# Pings on every open call, both ways, find a peer that stopped answering without
# closing its connection (a host gone, a partition, a frozen process): one unanswered
# for 10 s (gRPC's own ping timeout is 60 s) breaks the connection, so the controller
# takes a backend's bus for broken and refuses work naming it, instead of every unit
# waiting for its deadline, and a backend drops the bus of a controller that is no more,
# and may serve the next. Pings are answered by gRPC's core, not by the service's loop.
KEEPALIVE = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 10_000),
             ("grpc.http2.ping_timeout_ms", 10_000),
             ("grpc.http2.max_pings_without_data", 0)]
# Every server's options. gRPC sets SO_REUSEPORT by default, which lets a second process
# on a port in use share it silently (clients split between two controllers); off, the
# second one fails to bind (`listen_on`).
SERVER_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.so_reuseport", 0),
                  *KEEPALIVE,
                  # A client's pings on an idle call are welcome every 5 s, not refused as
                  # too many (gRPC's default allows one in 5 minutes).
                  ("grpc.http2.min_ping_interval_without_data_ms", 5_000)]
# The gRPC metadata of every internal call but Hello: the caller's cluster and, from a
# controller, its epoch (checked by `backend/owner.py`, the peers and IIG).
CLUSTER_KEY, EPOCH_KEY = "mbds-cluster", "mbds-epoch"


def caller(metadata: Iterable[tuple[str, str | bytes]] | None) -> tuple[str, str]:
    """The (cluster, epoch) a call names in its metadata ("" for one it does not name)."""
    found = {CLUSTER_KEY: "", EPOCH_KEY: ""}
    for key, value in metadata or ():
        if key in found and isinstance(value, str):
            found[key] = value
    return found[CLUSTER_KEY], found[EPOCH_KEY]


def foreign(mine: str, metadata: Iterable[tuple[str, str | bytes]] | None, who: str) -> str:
    """Why a call from another cluster is refused by `who` ("" if it names `mine`, or if
    `who` has no cluster yet)."""
    named = caller(metadata)[0]
    if not mine or named == mine:
        return ""
    return (f"{who} belongs to cluster {mine}; the call names "
            f"{'cluster ' + named[:40] if named else 'no cluster'}: a backend's records are "
            "its own cluster's, and it joins no other")


# Set in the environment of a process whose owner stops it (mbds/cluster.py).
OWNED = "MBDS_OWNED"


def too_large(what: str, size: int) -> str:
    """The refusal of `what`, `size` bytes, that no message can carry."""
    return (f"{what} is {size:,} bytes, more than a message may carry "
            f"({MESSAGE_BUDGET:,} bytes of the {MAX_MESSAGE >> 20} MiB gRPC message limit, "
            "MAX_MESSAGE)")


async def until_stopped(ready: asyncio.Event | None = None) -> None:
    """Signal `ready` (tests, embedding) and return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # A process of `mbds up` (or any LocalCluster) leaves Ctrl-C to its owner, which
    # stops the controller before the backends: the terminal sends SIGINT to them all.
    owned = bool(os.environ.get(OWNED))
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):   # not on every platform
            loop.add_signal_handler(sig, (lambda: None) if owned and sig == signal.SIGINT
                                    else stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()


class ListenError(Exception):
    """A server could not bind the address it was given."""


def port_beyond(address: str) -> bool:
    """Whether HOST:PORT names a port past 65535, which gRPC would take modulo 65536
    (99999 as 34463) without a word."""
    port = address.rpartition(":")[2]
    return port.isdigit() and int(port) > 65535


def listen_on(server: grpc.aio.Server, address: str, what: str,
              credentials: grpc.ServerCredentials | None = None) -> int:
    """Bind `address` (TLS with `credentials`, else plaintext); the port bound."""
    if port_beyond(address):
        raise ListenError(f"{what} cannot listen on {address}: a port is at most 65535")
    try:
        return (server.add_secure_port(address, credentials) if credentials is not None
                else server.add_insecure_port(address))
    except RuntimeError:           # grpc's "Failed to bind to address"
        raise ListenError(f"{what} cannot listen on {address}: the port is in use, or the "
                          "address is not one of this host's") from None
