"""The controller process: thin gRPC servicers (Controller, Iig, health) over a Coordinator."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from controller.coordinator import STALLED_READER, Coordinator
from controller.session import Sessions, failure
from mbds import dirlock, eventloop, metrics, tls
from mbds.doors import RoleDoor, TokenDoor, TokensFile, rebuilt
from mbds.errors import MbdsError
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import SERVER_OPTIONS, foreign, listen_on, until_stopped
from mbds.values import from_pb

log = logging.getLogger("mbds.controller")


async def _fail(context, e: Exception) -> None:
    await context.abort(*failure(e))


class ControllerServicer(rpc.ControllerServicer):
    def __init__(self, coordinator: Coordinator) -> None:
        self.c = coordinator
        self.sessions = Sessions(coordinator)

    async def Session(self, request_iterator, context):
        async for reply in self.sessions.serve(request_iterator):
            yield reply

    async def Execute(self, request: pb.ExecuteRequest, context):
        try:
            async for reply in self.c.execute(request.text, request.timeout_s or None):
                yield reply
        except Exception as e:         # named and counted, whatever it is
            await _fail(context, e)

    async def Load(self, request_iterator, context):
        try:
            async for reply in self.c.load_stream(request_iterator):
                yield reply
        except Exception as e:         # named and counted, whatever it is
            await _fail(context, e)

    async def Define(self, request: pb.DefineRequest, context) -> pb.DefineReply:
        try:
            out = await self.c.define(request.yaml)
        except Exception as e:
            await _fail(context, e)
        return pb.DefineReply(files_created=out.created, files_unchanged=out.unchanged,
                              files_reindexed=out.reindexed)

    async def Status(self, request: pb.StatusRequest, context) -> pb.StatusReply:
        try:
            out = await self.c.status(request.file)
        except Exception as e:
            await _fail(context, e)
        return out


# Fields of a message that does not parse looked at for the string that is not UTF-8,
# at most: beyond them its error is protobuf's (a 64 MiB load chunk holds millions).
MAX_FIELDS_SEARCHED = 100_000
MAX_NESTING_SEARCHED = 8


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while data[i] & 0x80:              # IndexError past the end: a message cut short
        value |= (data[i] & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if shift > 63:
            raise ValueError("varint too long")
    return value | data[i] << shift, i + 1


def _not_utf8(data: bytes, message: Descriptor, name: str, fields: Iterator[int],
              depth: int = 0) -> str | None:
    """Which string field of a message's bytes is not UTF-8, and its first bad byte; None
    when none is, or the bytes go wrong before one is found."""
    i = 0
    try:
        while i < len(data) and next(fields) < MAX_FIELDS_SEARCHED:
            key, i = _varint(data, i)
            wire, field = key & 7, message.fields_by_number.get(key >> 3)
            if wire == 0:
                i = _varint(data, i)[1]
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            elif wire != 2:            # a group, or no wire type at all
                return None
            else:
                size, i = _varint(data, i)
                part, i = data[i:i + size], i + size
                where = f"{name}.{field.name}" if field is not None else ""
                if field is not None and field.type == field.TYPE_STRING:
                    try:
                        part.decode("utf-8")
                    except UnicodeDecodeError as e:
                        return (f"{where} is not valid UTF-8 (byte 0x{part[e.start]:02x} at "
                                f"position {e.start})")
                elif field is not None and field.type == field.TYPE_MESSAGE \
                        and depth < MAX_NESTING_SEARCHED:
                    found = _not_utf8(part, field.message_type, where, fields, depth + 1)
                    if found:
                        return found
    except (IndexError, ValueError):
        return None
    return None


class _Undecodable:
    """A request that did not parse, handed to its method to be refused there (a
    deserializer has no call to end)."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


def _deserializer(parse: Callable[[bytes], Any], message: Descriptor
                  ) -> Callable[[bytes], Any]:
    def read(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as e:
            found = _not_utf8(data, message, message.full_name, itertools.count())
            return _Undecodable(DecodeError(found) if found else e)
    return read


def _refusing(handler: grpc.RpcMethodHandler, message: Descriptor) -> grpc.RpcMethodHandler:
    """`handler` refusing a request that does not parse (a string that is not UTF-8, from
    a client other than ours) as INVALID_ARGUMENT, counted as a failed request; gRPC
    would end it as UNKNOWN, naming an exception of protobuf."""
    inner = (handler.unary_unary or handler.unary_stream or handler.stream_unary
             or handler.stream_stream)
    behaviour: Callable[..., Any]
    if handler.request_streaming:
        async def checked(requests: Any) -> Any:
            async for request in requests:
                if isinstance(request, _Undecodable):
                    raise request.error
                yield request

        async def streams(requests: Any, context: Any) -> Any:
            try:
                async for reply in inner(checked(requests), context):
                    yield reply
            except DecodeError as e:      # Load answers its own; Session's ends here
                await _fail(context, e)
        behaviour = streams
    elif handler.response_streaming:
        async def replies(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await _fail(context, request.error)
            async for reply in inner(request, context):
                yield reply
        behaviour = replies
    else:
        async def unary(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await _fail(context, request.error)
            return await inner(request, context)
        behaviour = unary
    return rebuilt(handler, behaviour, _deserializer(handler.request_deserializer, message))


class _Registered:
    """Takes the method handlers the generated `add_ControllerServicer_to_server` makes."""

    def __init__(self) -> None:
        self.methods: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, methods: dict) -> None:
        self.methods = methods


def add_controller(servicer: ControllerServicer, server: grpc.aio.Server) -> None:
    """The Controller service on `server`, each method refusing a request that does not
    parse (`_refusing`)."""
    registered = _Registered()
    rpc.add_ControllerServicer_to_server(servicer, registered)
    service = pb.DESCRIPTOR.services_by_name["Controller"]
    methods = {name: _refusing(h, service.methods_by_name[name].input_type)
               for name, h in registered.methods.items()}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, methods),))
    server.add_registered_method_handlers(service.full_name, methods)


class IigServicer(rpc.IigServicer):
    def __init__(self, coordinator: Coordinator) -> None:
        self.c = coordinator

    async def Place(self, request: pb.PlaceRequest, context) -> pb.PlaceReply:
        refused = foreign(self.c.membership.members.cluster, context.invocation_metadata(),
                          "this controller")
        if refused:                 # a backend of another cluster (its CA the same)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
        try:
            return await self.c.place(request.file,
                                      [from_pb(v) for v in request.directory_values],
                                      request.backend)
        except MbdsError as e:
            # A backend's call, not a client's: not counted in mbds_request_errors_total.
            from mbds.errors import FAILURE_MESSAGE, shorten
            await context.abort(e.code, shorten(str(e), FAILURE_MESSAGE))
            raise


async def rediscover(coordinator: Coordinator, target: str, every: float = 2.0) -> None:
    """Keep asking DNS for the backend replicas; admit any new one (scale-up)."""
    from controller.discovery import resolve
    host, _, port = target.rpartition(":")
    while True:
        await asyncio.sleep(every)
        found = await asyncio.get_running_loop().run_in_executor(None, resolve, host, int(port))
        known = {x.address for x in coordinator.links}
        new = [a for a in found if a not in known]
        if new:
            try:
                await coordinator.add_backends(new)
            except Exception as e:   # a replica still starting: try again later
                log.warning("could not admit %s yet: %s", ", ".join(new), e)


# What a read-only token may call; Execute and Session also refuse a request text
# that would change data (Coordinator.execute).
READ_METHODS = frozenset({"Execute", "Session", "Status"})


def _client_port(server: grpc.aio.Server, listen: str, identity: tls.Identity | None,
                 plaintext: bool, tokens: TokensFile | None, insecure: bool) -> int:
    """The client port: TLS with the controller's certificate when there is one, plaintext
    only on loopback (or --insecure), and never plaintext with tokens, which it would leak."""
    what = "the controller's client port"
    if identity is not None and not plaintext:
        return listen_on(server, listen, what, identity.client_server())
    if tokens:
        raise tls.TlsError("client tokens need TLS on the client port (--tls-dir, "
                           "without --client-plaintext)")
    tls.check_plaintext(listen, what, insecure)
    return listen_on(server, listen, what)


async def serve(*, listen: str, backends: list[str], advertise: str = "", discover: str = "",
                internal_timing: bool = True, timeout: float = 60.0,
                stalled_reader: float = STALLED_READER, split_search_from: int = 1,
                connect_timeout: float = 30.0, grace: float = 5.0, metrics_port: int = 0,
                data_dir: Path | None = None, synchronous: str = "NORMAL",
                internal_listen: str = "127.0.0.1:0",
                tls_dir: Path | None = None, client_plaintext: bool = False,
                tokens: TokensFile | None = None, insecure: bool = False,
                ready: asyncio.Event | None = None) -> None:
    """Run the controller until SIGTERM/SIGINT.

    Clients reach the Controller service on `listen`; the backends reach IIG on
    `internal_listen`, a server of its own, so no client can call what only
    backends may (placing a moved record allocates directory entries everywhere)."""
    identity = tls.Identity.load(tls_dir, "controller") if tls_dir else None
    tls.use(identity)
    if data_dir is not None:
        dirlock.hold(data_dir, "the controller's")
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[
        TokenDoor(tokens, READ_METHODS)] if tokens else [])
    port = _client_port(server, listen, identity, client_plaintext, tokens, insecure)
    host = listen.rsplit(":", 1)[0]
    internal = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[
        RoleDoor({"mbds.Iig": "backend"})] if identity else [])
    if identity is None:
        tls.check_plaintext(internal_listen, "IIG", insecure)
    internal_port = listen_on(internal, internal_listen, "IIG",
                              identity.internal_server() if identity else None)
    ihost = internal_listen.rsplit(":", 1)[0]
    iig_address = advertise or (f"{'127.0.0.1' if ihost in ('0.0.0.0', '[::]') else ihost}"
                                f":{internal_port}")
    coordinator = Coordinator(backends, iig_address=iig_address,
                              internal_timing=internal_timing, timeout=timeout,
                              stalled_reader=stalled_reader,
                              split_search_from=split_search_from,
                              connect_timeout=connect_timeout, synchronous=synchronous,
                              log_path=data_dir / "decisions.db" if data_dir else None,
                              metrics_url=_metrics_url(host, iig_address, metrics_port))
    metrics.watch_members(lambda: [(x.name, x.up) for x in coordinator.links])
    controller = ControllerServicer(coordinator)
    add_controller(controller, server)
    rpc.add_IigServicer_to_server(IigServicer(coordinator), internal)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, internal)
    await health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    await internal.start()
    await server.start()
    try:
        await coordinator.start()
    except BaseException:       # its servers stop before the error is reported
        await server.stop(0)
        await internal.stop(0)
        await coordinator.close()
        raise
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    watcher = asyncio.create_task(rediscover(coordinator, discover)) if discover else None
    door = ("TLS" if identity and not client_plaintext else "plaintext") + (
        f", {len(tokens.tokens)} tokens" if tokens else "")
    # The internal port is printed first: "listening" is the line a launcher waits for.
    print(f"controller internal (IIG) on {ihost}:{internal_port}", flush=True)
    print(f"controller listening on {host}:{port} with {len(backends)} backends ({door}; "
          f"event loop {eventloop.running()})", flush=True)
    await until_stopped(ready)
    if watcher is not None:
        watcher.cancel()
    await health_servicer.enter_graceful_shutdown()
    controller.sessions.close()     # idle sessions need no grace
    await server.stop(grace)
    await internal.stop(grace)
    await coordinator.close()


def _metrics_url(host: str, iig_address: str, port: int) -> str:
    """Where this controller's /metrics is served (on the --listen host, `cli/services`):
    on a wildcard address, by the name the backends reach it by (--advertise)."""
    if not port:
        return ""
    if host in ("0.0.0.0", "[::]", ""):
        host = iig_address.rsplit(":", 1)[0]
    return f"http://{host}:{port}/metrics"
