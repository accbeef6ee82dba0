"""Who may call what: server interceptors that check the caller before any handler runs.

One place decides, for every service a process serves, which callers pass: internal
services by the role in the caller's certificate (mbds.tls), the client port by token.
A handler then never sees a call it should not have received.
"""

from __future__ import annotations

import contextvars
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from mbds import metrics
from mbds.tls import peer_role

log = logging.getLogger("mbds.doors")

READ, WRITE = "read", "write"
# The access of the client whose call is being handled: a read-only token may RETRIEVE only.
ACCESS: contextvars.ContextVar[str] = contextvars.ContextVar("access", default=WRITE)
HEALTH = "grpc.health.v1.Health"
MIN_TOKEN = 16


class DoorError(Exception):
    """A tokens file that cannot be used."""


def _guard(handler: grpc.RpcMethodHandler,
           check: Callable[[Any], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """The same handler, with `check(context)` awaited before it runs."""
    inner = (handler.unary_unary or handler.unary_stream or handler.stream_unary
             or handler.stream_stream)
    if handler.response_streaming:
        async def streaming(request: Any, context: Any) -> Any:
            await check(context)
            async for reply in inner(request, context):
                yield reply
        behaviour: Callable[..., Any] = streaming
    else:
        async def unary(request: Any, context: Any) -> Any:
            await check(context)
            return await inner(request, context)
        behaviour = unary
    return rebuilt(handler, behaviour, handler.request_deserializer)


def rebuilt(handler: grpc.RpcMethodHandler, behaviour: Callable[..., Any],
            request_deserializer: Callable[[bytes], Any] | None) -> grpc.RpcMethodHandler:
    """A handler of the same kind and serializer as `handler`, running `behaviour`."""
    make = {(False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler}[
        (handler.request_streaming, handler.response_streaming)]
    return make(behaviour, request_deserializer=request_deserializer,
                response_serializer=handler.response_serializer)


def _service(details: grpc.HandlerCallDetails) -> tuple[str, str]:
    service, _, method = details.method.lstrip("/").partition("/")
    return service, method


class RoleDoor(grpc.aio.ServerInterceptor):
    """Internal services: each passes only callers whose certificate names its role.

    `allowed` maps a service's full name to the role that may call it; a service not
    named (health) is open to any holder of a certificate the CA signed, which the TLS
    handshake has already required."""

    def __init__(self, allowed: Mapping[str, str]) -> None:
        self.allowed = dict(allowed)

    async def intercept_service(self, continuation: Any,
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        service, method = _service(details)
        role = self.allowed.get(service)
        if handler is None or role is None:
            return handler

        async def check(context: Any) -> None:
            if (caller := peer_role(context)) != role:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, (
                    f"{service}/{method} is for the {role} only; the caller's certificate "
                    f"is {'for the ' + caller if caller else 'of no cluster role'}"))
        return _guard(handler, check)


def load_tokens(path: Path) -> dict[str, str]:
    """Read a tokens file: one `read TOKEN` or `write TOKEN` a line, `#` comments."""
    tokens: dict[str, str] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise DoorError(f"cannot read tokens file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:     # at start, or changed so while the controller runs
        raise DoorError(f"tokens file {path} is not valid UTF-8 (byte "
                        f"0x{e.object[e.start]:02x} at position {e.start})") from None
    for n, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or words[0] not in (READ, WRITE):
            raise DoorError(f"{path} line {n}: expected `read TOKEN` or `write TOKEN`")
        if len(words[1]) < MIN_TOKEN:
            raise DoorError(f"{path} line {n}: a token needs at least {MIN_TOKEN} characters")
        tokens[words[1]] = words[0]
    if not tokens:
        raise DoorError(f"{path} holds no token")
    return tokens


class TokensFile:
    """A tokens file as the controller holds it: read again when it changes (looked at
    most once a second), so a token added works and a token removed is refused without
    a restart. A file that can no longer be read or parsed leaves the tokens as they
    were, and says so in the log."""

    RECHECK_S = 1.0

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stamp = self._stamp()
        self.tokens = _encoded(load_tokens(path))      # a bad file at start is refused
        self.checked = time.monotonic()

    def _stamp(self) -> tuple[int, int, int]:
        try:
            st = self.path.stat()
        except OSError:
            return (0, 0, 0)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> list[tuple[bytes, str]]:
        now = time.monotonic()
        if now - self.checked >= self.RECHECK_S:
            self.checked = now
            stamp = self._stamp()
            if stamp != self.stamp:
                self.stamp = stamp
                try:
                    self.tokens = _encoded(load_tokens(self.path))
                    log.info("tokens file %s read again: %d tokens", self.path,
                             len(self.tokens))
                except DoorError as e:
                    log.error("tokens file changed but cannot be used, tokens kept as they "
                              "were: %s", e)
        return self.tokens


def _encoded(tokens: Mapping[str, str]) -> list[tuple[bytes, str]]:
    return [(t.encode(), a) for t, a in tokens.items()]


class TokenDoor(grpc.aio.ServerInterceptor):
    """The client port: a call passes with a known token (`authorization: Bearer T`).

    A write token may do anything; a read token may call what cannot change data
    (`read_methods`), and the handler learns its access from ACCESS to refuse a
    write inside a request text. Health checks need no token. Tokens are checked when a
    call starts: a session opened before a token was removed lasts until it ends."""

    def __init__(self, tokens: TokensFile, read_methods: frozenset[str]) -> None:
        self.tokens = tokens
        self.read_methods = read_methods

    def _access(self, metadata: Any) -> str | None:
        given = next((v for k, v in metadata or () if k == "authorization"), "")
        scheme, _, token = str(given).partition(" ")
        if scheme.lower() != "bearer":
            return None
        found = None
        for known, access in self.tokens.current():   # every comparison runs, in constant time
            if hmac.compare_digest(known, token.encode()):
                found = access
        return found

    async def intercept_service(self, continuation: Any,
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        service, method = _service(details)
        if handler is None or service == HEALTH:
            return handler
        access = self._access(details.invocation_metadata)

        async def check(context: Any) -> None:
            # A refusal here is a failed call too: counted as the handlers count theirs
            # (controller/session.py's failure()), by kind.
            if access is None:   # abort raises: the handler never runs
                metrics.REQUEST_ERRORS.labels("Unauthenticated").inc()
                await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                    "this controller needs a token (authorization: Bearer "
                                    "TOKEN; env MBDS_TOKEN): missing or not known")
            if access == READ and method not in self.read_methods:
                metrics.REQUEST_ERRORS.labels("PermissionDenied").inc()
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"a read-only token may not call {method}")
            ACCESS.set(access or READ)
        return _guard(handler, check)
