"""The client library: a synchronous `Client` (the CLI, tests, most benchmarks) and an
asyncio `AsyncClient` (many sessions on one event loop), one protocol for both."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from mbds.errors import SemanticError
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_MESSAGE
from mbds.values import Value, to_pb

DEFAULT_CONTROLLER = os.environ.get("MBDS_CONTROLLER", "127.0.0.1:50051")


class ClientError(Exception):
    """The controller refused or failed a call; `code` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Result:
    """One request's answer, shaped like `mbds exec --json` prints it."""
    op: str
    columns: list[str]
    records: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "records": self.records, "stats": self.stats,
                "elapsed_ms": round(self.elapsed_ms, 3)}


def stats_dict(s: pb.RequestStats) -> dict[str, Any]:
    return {"clusters_examined": s.clusters_examined, "records_retrieved": s.records_retrieved,
            "backends": [{"backend": b.backend, "records": b.records,
                          "elapsed_ms": round(b.elapsed_ms, 3)} for b in s.backends]}


def _error(e: grpc.RpcError) -> ClientError:
    return ClientError(e.code().name, e.details() or e.code().name)


def _request(text: str, timeout: float) -> pb.ExecuteRequest:
    return pb.ExecuteRequest(text=text, timeout_s=timeout)


def _ended(batch: pb.ExecuteReplies) -> bool:
    """Whether `batch` is its request's last message; raises the request's failure."""
    if not batch.end:
        return False
    if batch.HasField("failure"):
        raise ClientError(batch.failure.code, batch.failure.message)
    return True


def _closed() -> ClientError:
    return ClientError("UNAVAILABLE", "the controller closed the session")


class Client:
    """A connection to the controller. Requests go over one `Session` stream, opened
    at the first request and kept (a call per request costs both ends several times
    the CPU of a message on an open stream); a request made while another is still
    being read, from this thread or another, goes as an `Execute` call of its own."""

    def __init__(self, address: str = DEFAULT_CONTROLLER, *, timeout: float = 120.0,
                 channel_options: Sequence[tuple[str, Any]] = ()) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE), *channel_options])
        self.stub = rpc.ControllerStub(self.channel)
        self._session: Session | None = None
        self._in_use = threading.Lock()     # held while a request is read off the session
        self.sessions_opened = 0

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def stream(self, text: str) -> Iterator[pb.ExecuteReply]:
        """The raw reply stream of one traffic unit (headers, row batches, done)."""
        if not self._in_use.acquire(blocking=False):
            yield from self.call(text)
            return
        try:
            if self._session is None or not self._session.alive():
                if self._session is not None:
                    self._session.close()
                self._session = Session(self.stub, self.timeout)
                self.sessions_opened += 1
            session = self._session
            try:
                yield from session.ask(text)
            finally:
                if session.pending:  # left mid-answer, or the stream broke: not reusable
                    session.close()
                    self._session = None
        finally:
            self._in_use.release()

    def call(self, text: str) -> Iterator[pb.ExecuteReply]:
        """The reply stream of one traffic unit over an `Execute` call of its own."""
        try:
            for batch in self.stub.Execute(_request(text, self.timeout),
                                           timeout=self.timeout + 5):
                yield from batch.replies
        except grpc.RpcError as e:
            raise _error(e) from None

    def execute(self, text: str) -> list[Result]:
        """Run one request or transaction; one Result per request."""
        return collect(self.stream(text))

    def define(self, yaml_text: str) -> pb.DefineReply:
        try:
            return self.stub.Define(pb.DefineRequest(yaml=yaml_text), timeout=self.timeout)
        except grpc.RpcError as e:
            raise _error(e) from None

    def status(self) -> pb.StatusReply:
        try:
            return self.stub.Status(pb.StatusRequest(), timeout=10)
        except grpc.RpcError as e:
            raise _error(e) from None

    def load(self, file: str, attributes: list[str],
             rows: Iterable[tuple[Sequence[Value], str | None]], *, chunk: int = 2000
             ) -> Iterator[pb.RequestDone]:
        """Bulk-insert records (values aligned with `attributes`); yields each chunk's done.

        A value the wire cannot carry (an integer beyond 64 bits, say) ends the stream
        before its chunk is sent and is raised here, named: chunks sent before it stay
        loaded, as with any refused chunk."""
        refused: list[str] = []

        def chunks() -> Iterator[pb.LoadRequest]:
            req = pb.LoadRequest(file=file, attributes=attributes)
            for n, (values, body) in enumerate(rows):
                try:
                    encoded = [to_pb(v) for v in values]
                except (SemanticError, TypeError, ValueError) as e:   # gRPC would hide it
                    refused.append(f"record {n + 1}: {e}")
                    return
                r = req.records.add(values=encoded)
                if body is not None:
                    r.body = body
                if len(req.records) >= chunk:
                    yield req
                    req = pb.LoadRequest(file=file, attributes=attributes)
            if req.records:
                yield req
        try:
            for batch in self.stub.Load(chunks(), timeout=max(self.timeout, 3600)):
                for reply in batch.replies:
                    if reply.WhichOneof("body") == "done":
                        yield reply.done
        except grpc.RpcError as e:
            raise _error(e) from None
        if refused:
            raise ClientError("INVALID_ARGUMENT", refused[0])


class Session:
    """One open `Session` stream: requests are written to it, one at a time, and
    each one's replies read up to the message marked `end`.

    gRPC's synchronous streams have no deadline per read, so a watchdog thread
    cancels the stream when an answer takes `timeout` + 5 s (the controller
    itself fails a request at `timeout`): a controller that stops answering
    raises DEADLINE_EXCEEDED here instead of blocking its client for ever.
    """

    def __init__(self, stub: rpc.ControllerStub, timeout: float) -> None:
        self.timeout = timeout
        self.requests: queue.SimpleQueue[pb.ExecuteRequest | None] = queue.SimpleQueue()
        self.replies = stub.Session(iter(self.requests.get, None))
        self.deadline: float | None = None   # set while a request's `end` is unread
        self.expired = False
        self.closed = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="mbds-session-watchdog").start()

    @property
    def pending(self) -> bool:
        """A request was written and its `end` not read (left mid-answer, or broken)."""
        return self.deadline is not None

    def alive(self) -> bool:
        return not self.closed.is_set() and self.replies.is_active()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.requests.put(None)
            self.replies.cancel()

    def _watch(self) -> None:
        while not self.closed.is_set():
            deadline = self.deadline
            if deadline is not None and time.monotonic() >= deadline:
                self.expired = True
                self.replies.cancel()
                return
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            self.closed.wait(max(wait, 0.0))

    def ask(self, text: str) -> Iterator[pb.ExecuteReply]:
        self.deadline = time.monotonic() + self.timeout + 5
        self.requests.put(_request(text, self.timeout))
        try:
            for batch in self.replies:
                yield from batch.replies
                if batch.end:
                    self.deadline = None
                    _ended(batch)
                    return
        except grpc.RpcError as e:
            if self.expired:
                raise _deadline(self.timeout) from None
            raise _error(e) from None
        raise _closed()


def _deadline(timeout: float) -> ClientError:
    return ClientError("DEADLINE_EXCEEDED",
                       f"no answer from the controller in {timeout + 5:g} s")


class AsyncClient:
    """A connection to the controller for asyncio code: its own channel and one `Session`
    stream, opened at the first request, with the synchronous `Client`'s protocol.

    Requests on one client go one at a time over the session; one made while another is
    still being read goes as an `Execute` call of its own. `execute` fails a request
    unanswered after `timeout` + 5 s (the controller fails it at `timeout`); `batches`
    sets no deadline of its own, so a caller timing many sessions can watch them all
    with one timer instead of one per request.
    """

    def __init__(self, address: str = DEFAULT_CONTROLLER, *, timeout: float = 120.0,
                 channel_options: Sequence[tuple[str, Any]] = ()) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = grpc.aio.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE), *channel_options])
        self.stub = rpc.ControllerStub(self.channel)
        self._session: Any = None       # a grpc.aio stream-stream call
        self._in_use = False            # a request is being read off the session
        self.sessions_opened = 0

    async def connect(self, timeout: float = 30.0) -> None:
        """Wait until the channel is connected (so set-up is not part of a timed run)."""
        await asyncio.wait_for(self.channel.channel_ready(), timeout)

    async def close(self) -> None:
        if self._session is not None:
            self._session.cancel()
            self._session = None
        await self.channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def batches(self, text: str) -> AsyncIterator[pb.ExecuteReplies]:
        """The reply batches of one traffic unit, the last one marked `end`."""
        if self._in_use:
            async for batch in self._call(text):
                yield batch
            return
        self._in_use = True
        ended = False
        try:
            if self._session is None:
                self._session = self.stub.Session()
                self.sessions_opened += 1
            await self._session.write(_request(text, self.timeout))
            while True:
                batch = await self._session.read()
                if batch is grpc.aio.EOF:
                    raise _closed()
                ended = batch.end
                yield batch
                if _ended(batch):
                    return
        except grpc.RpcError as e:
            raise _error(e) from None
        finally:
            self._in_use = False
            if not ended and self._session is not None:   # left mid-answer: not reusable
                self._session.cancel()
                self._session = None

    async def _call(self, text: str) -> AsyncIterator[pb.ExecuteReplies]:
        try:
            async for batch in self.stub.Execute(_request(text, self.timeout),
                                                 timeout=self.timeout + 5):
                yield batch
        except grpc.RpcError as e:
            raise _error(e) from None

    async def execute(self, text: str) -> list[Result]:
        """Run one request or transaction; one Result per request."""
        replies: list[pb.ExecuteReply] = []
        try:
            async with asyncio.timeout(self.timeout + 5):
                async for batch in self.batches(text):
                    replies.extend(batch.replies)
        except TimeoutError:
            raise _deadline(self.timeout) from None
        return collect(replies)


def collect(replies: Iterable[pb.ExecuteReply]) -> list[Result]:
    results: list[Result] = []
    for reply in replies:
        kind = reply.WhichOneof("body")
        if kind == "header":
            results.append(Result(reply.header.op, list(reply.header.columns)))
        elif kind == "rows":
            r = results[reply.request_index]
            r.records.extend(dict(zip(r.columns, row, strict=True))
                             for row in json.loads(reply.rows.rows_json))
        elif kind == "done":    # a write's `done` comes after the commit: its acknowledgement
            results[reply.request_index].stats = stats_dict(reply.done.stats)
            results[reply.request_index].elapsed_ms = reply.done.elapsed_ms
    return results
