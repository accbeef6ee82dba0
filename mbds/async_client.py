"""The asyncio client: many sessions on one event loop (the users benchmark), with the
synchronous `Client`'s protocol (mbds/client.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from mbds.client import (
    DEFAULT_CONTROLLER,
    ClientError,
    Result,
    _closed,
    _deadline,
    _ended,
    _error,
    _request,
    collect,
    open_channel,
)
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc


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
                 channel_options: Sequence[tuple[str, Any]] = (),
                 ca: str | Path | None = None, token: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = open_channel(grpc.aio, address, ca, token, channel_options)
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
        request = _request(text, self.timeout)
        self._in_use = True
        ended = answered = False
        try:
            await self._send(request)
            while True:
                batch = await self._session.read()
                if batch is grpc.aio.EOF:
                    raise _closed()
                ended, answered = batch.end, True
                yield batch
                if _ended(batch):
                    return
        except grpc.RpcError as e:
            if not answered and e.code() == grpc.StatusCode.UNAVAILABLE:
                raise _broken(e) from None
            raise _error(e) from None
        finally:
            self._in_use = False
            if not ended and self._session is not None:   # left mid-answer: not reusable
                self._session.cancel()
                self._session = None

    async def _send(self, request: pb.ExecuteRequest) -> None:
        """Write `request` on the session, opening one if there is none or it has ended.

        A kept session can be dead without its call knowing yet (the controller
        restarted since its last answer: grpc.aio learns it only when a write fails,
        where the synchronous client's `alive()` sees it first). A write that fails
        put nothing of the request on the wire, so the controller cannot have run it:
        it is written once more on a fresh session. A request whose write succeeded is
        never sent again, since the controller may have received and run it.
        """
        while True:
            fresh = self._session is None or self._session.done()
            if fresh:
                if self._session is not None:
                    self._session.cancel()
                self._session = self.stub.Session()
                self.sessions_opened += 1
            try:
                await self._session.write(request)
                return
            except (grpc.RpcError, asyncio.InvalidStateError) as e:
                self._session.cancel()
                self._session = None
                if fresh:
                    raise _unsent(e) from None

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


def _unsent(e: grpc.RpcError | asyncio.InvalidStateError) -> ClientError:
    """A request that could not be written to a fresh session: the controller has
    nothing of it. Core's INTERNAL for a write on a closed stream is UNAVAILABLE here."""
    code = e.code().name if isinstance(e, grpc.RpcError) else "UNAVAILABLE"
    details = (e.details() if isinstance(e, grpc.RpcError) else str(e)) or code
    if code == "INTERNAL":
        code = "UNAVAILABLE"
    return ClientError(code, f"the request was not sent (not run): the session to the "
                             f"controller closed ({details})")


def _broken(e: grpc.RpcError) -> ClientError:
    """The session broke after the request was written and before any answer: the
    controller may have run it (a write may have been committed), so it is not sent
    again; a read can be asked again."""
    return ClientError("UNAVAILABLE", "the session to the controller broke before the "
                       "request was answered: it may or may not have run "
                       f"({e.details() or e.code().name})")
