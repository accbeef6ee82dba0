"""The client library: a synchronous `Client` (the CLI, tests, most benchmarks) and an
asyncio `AsyncClient` (many sessions on one event loop), one protocol for both; what
both read back of a request is `mbds/replies.py`; the synchronous client's watched
streams (a Session, a load) are `mbds/client_calls.py`."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from mbds import tls
from mbds.client_calls import Owed, Session, expire
from mbds.columns import load_requests
from mbds.errors import shorten
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.replies import (
    ClientError,
    Result,
    _code,
    _deadline,
    _error,
    _request,
    client_closed,
    closed_under_way,
    collect,
)
from mbds.service import MAX_MESSAGE, port_beyond
from mbds.values import Value

DEFAULT_CONTROLLER = os.environ.get("MBDS_CONTROLLER", "127.0.0.1:50051")
# Records per bulk-load batch (one traffic unit): large enough that the cost per unit
# (commit, placement, messages) is small beside the records' own.
LOAD_CHUNK = 10_000
STATUS_TIMEOUT = 10.0
# A channel that lost the controller connects again after a backoff, and a request made
# meanwhile fails at once: gRPC grows that backoff to 120 s, so a controller back for
# many seconds could still look down. Held to a second, the next request after that finds
# it.
RECONNECT = [("grpc.initial_reconnect_backoff_ms", 100),
             ("grpc.max_reconnect_backoff_ms", 1000)]


def _credentials(ca: str | Path | None, token: str | None) -> grpc.ChannelCredentials | None:
    """TLS when the cluster's CA is given (or env MBDS_CA), with the token (or env
    MBDS_TOKEN); None for plaintext, which carries no token."""
    ca = ca or os.environ.get("MBDS_CA") or None
    token = token or os.environ.get("MBDS_TOKEN") or None
    if ca is None:
        if token:
            raise ClientError("INVALID_ARGUMENT", "a token is only sent over TLS: give the "
                              "cluster's CA (ca=, env MBDS_CA) too")
        return None
    try:
        return tls.client_credentials(Path(ca), token)
    except tls.TlsError as e:
        raise ClientError("INVALID_ARGUMENT", str(e)) from None


def open_channel(api: Any, address: str, ca: str | Path | None, token: str | None,
                 channel_options: Sequence[tuple[str, Any]]) -> Any:
    """A channel to the controller from `api` (`grpc` or `grpc.aio`, which open channels
    alike): TLS with the CA and token when given, else plaintext."""
    return dial(api, address, _credentials(ca, token), channel_options)


def dial(api: Any, address: str, creds: grpc.ChannelCredentials | None,
         channel_options: Sequence[tuple[str, Any]]) -> Any:
    """`open_channel` with the credentials already made (None: plaintext). The
    `channel_options` come last, so they may change any of the client's own."""
    if port_beyond(address):
        raise ClientError("INVALID_ARGUMENT", f"{shorten(address)}: a port is at most 65535")
    options = [("grpc.max_receive_message_length", MAX_MESSAGE), *RECONNECT,
               *channel_options]
    return (api.secure_channel(address, creds, options=options) if creds
            else api.insecure_channel(address, options=options))


class Client:
    """A connection to the controller. Requests go over one `Session` stream, opened
    at the first request and kept (a call per request costs both ends several times
    the CPU of a message on an open stream); a request made while another is still
    being read, from this thread or another, goes as an `Execute` call of its own.

    `close()` ends the session and the channel (requests under way raise CANCELLED,
    later ones FAILED_PRECONDITION); a client dropped unclosed does so when collected."""

    def __init__(self, address: str = DEFAULT_CONTROLLER, *, timeout: float = 120.0,
                 channel_options: Sequence[tuple[str, Any]] = (),
                 ca: str | Path | None = None, token: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = open_channel(grpc, address, ca, token, channel_options)
        self.stub = rpc.ControllerStub(self.channel)
        self._session: Session | None = None
        self._in_use = threading.Lock()     # held while a request is read off the session
        self.sessions_opened = 0
        self.closed = False
        # A client dropped without close() (`Client(a).execute(...)`) closes its channel
        # when collected; its Session closes itself the same way.
        self._finalizer = weakref.finalize(self, self.channel.close)

    def close(self) -> None:
        self.closed = True
        if self._session is not None:
            self._session.close()
            self._session = None
        self._finalizer()

    def _check_open(self) -> None:
        if self.closed:
            raise client_closed()

    def _failed(self, e: grpc.RpcError | ClientError | ValueError) -> Exception:
        """What a failed call raises: one `close()` cut (cancelled, or refused by the
        closed channel) is named so, rather than as gRPC's local cancellation."""
        if self.closed and (isinstance(e, ValueError) or _code(e) == "CANCELLED"):
            return closed_under_way()
        return _error(e) if isinstance(e, grpc.RpcError) else e

    def cancel(self) -> None:
        """End the request being read off the session, from another thread (Ctrl-C in
        `mbds shell`): its reader raises CANCELLED, and the next request opens a new
        session. A write under way stays all-or-nothing; whether it took effect is
        for the next read to tell."""
        session = self._session
        if session is not None:
            session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def stream(self, text: str) -> Iterator[pb.ExecuteReply]:
        """The raw reply stream of one traffic unit (headers, row batches, done)."""
        self._check_open()
        if not self._in_use.acquire(blocking=False):
            yield from self.call(text)
            return
        try:
            if self._session is None or not self._session.alive():
                if self._session is not None:
                    self._session.close()
                try:
                    self._session = Session(self.stub, self.timeout)
                except ValueError as e:     # the channel was closed since the check
                    raise self._failed(e) from None
                self.sessions_opened += 1
            session = self._session
            try:
                yield from session.ask(text)
            except ClientError as e:
                raise self._failed(e) from None
            finally:
                if session.pending:  # left mid-answer, or the stream broke: not reusable
                    session.close()
                    self._session = None
        finally:
            self._in_use.release()

    def call(self, text: str) -> Iterator[pb.ExecuteReply]:
        """The reply stream of one traffic unit over an `Execute` call of its own."""
        self._check_open()
        expired = threading.Event()
        try:
            replies = self.stub.Execute(_request(text, self.timeout))
            while True:
                # As on the session, the deadline counts the controller's silence only.
                timer = threading.Timer(self.timeout + 5, expire, (replies, expired))
                timer.start()
                try:
                    batch = next(replies, None)
                finally:
                    timer.cancel()
                if batch is None:
                    return
                yield from batch.replies
        except (grpc.RpcError, ValueError) as e:
            if expired.is_set():
                raise _deadline(self.timeout) from None
            raise self._failed(e) from None

    def execute(self, text: str) -> list[Result]:
        """Run one request or transaction; one Result per request."""
        return collect(self.stream(text))

    def define(self, yaml_text: str) -> pb.DefineReply:
        self._check_open()
        try:
            return self.stub.Define(pb.DefineRequest(yaml=yaml_text), timeout=self.timeout)
        except (grpc.RpcError, ValueError) as e:
            raise self._failed(e) from None

    def status(self, file: str = "") -> pb.StatusReply:
        """The cluster's state and every file's definition; with `file`, its descriptors.
        Within the client's timeout, and 10 s at most: it asks the backends only whether
        they are up."""
        self._check_open()
        try:
            return self.stub.Status(pb.StatusRequest(file=file),
                                    timeout=min(self.timeout, STATUS_TIMEOUT))
        except (grpc.RpcError, ValueError) as e:
            raise self._failed(e) from None

    def load(self, file: str, attributes: list[str],
             rows: Iterable[tuple[Sequence[Value], str | None]], *, chunk: int = LOAD_CHUNK
             ) -> Iterator[pb.RequestDone]:
        """Bulk-insert records (values aligned with `attributes`); yields each batch's done.

        Records travel in columnar batches of `chunk`, or fewer when their bytes would
        pass `LOAD_BYTES` (`mbds/columns.py`), several in flight; each batch is one
        traffic unit, stored on every backend or on none. A value the wire cannot carry
        (an integer beyond 64 bits, say) or a record no message can carry ends the stream
        before its batch is sent and is raised here, named: batches acknowledged before
        it stay loaded, as with any refused batch. An exception `rows` raises ends the
        input there: the batches sent are answered (yielded), then it is raised here as
        it was raised, so what was yielded is what is stored. A controller that owes an
        answer and stays silent for `timeout` + 5 s fails the load (DEADLINE_EXCEEDED)."""
        refused: list[str] = []
        failed: list[Exception] = []

        def kept(rows: Iterable[tuple[Sequence[Value], str | None]]
                 ) -> Iterator[tuple[Sequence[Value], str | None]]:
            try:
                yield from rows
            except Exception as e:     # raised in gRPC's thread it would cancel the call
                failed.append(e)

        self._check_open()
        owed = Owed(self.timeout + 5)
        try:
            replies = self.stub.Load(
                owed.sending(load_requests(file, attributes, kept(rows), chunk, refused)),
                timeout=max(self.timeout, 3600))
            owed.watch(replies)
            for batch in replies:
                for reply in batch.replies:
                    if reply.WhichOneof("body") == "done":
                        owed.answered += 1
                        owed.reading = False        # the caller's time is not silence
                        yield reply.done
                        owed.resume()
        except (grpc.RpcError, ValueError) as e:
            if owed.expired.is_set():
                raise _deadline(self.timeout) from None
            if failed:
                raise failed[0] from None
            raise self._failed(e) from None
        finally:
            owed.over.set()
        if failed:
            raise failed[0]
        if refused:
            raise ClientError("INVALID_ARGUMENT", refused[0])
