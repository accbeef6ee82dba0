"""The asyncio client: many sessions on one event loop (the users benchmark), with the
synchronous `Client`'s protocol (mbds/client.py)."""

from __future__ import annotations

import asyncio
import warnings
import weakref
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from mbds.client import DEFAULT_CONTROLLER, _credentials, dial
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.replies import (
    ClientError,
    Result,
    _closed,
    _deadline,
    _ended,
    _error,
    _request,
    client_closed,
    closed_under_way,
    collect,
    hinted,
)


class _Held:
    """What an AsyncClient holds open: its channel, that channel's loop, its session."""

    __slots__ = ("channel", "loop", "session")

    def __init__(self) -> None:
        self.channel: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.session: Any = None


_CLOSING: set[asyncio.Task[None]] = set()


def _dropped(held: _Held) -> None:
    """An AsyncClient collected unclosed: its session is cancelled (which ends the
    controller's side of it) and its channel closed, on their loop."""
    loop, channel = held.loop, held.channel
    if channel is None or loop is None or loop.is_closed():
        return
    warnings.warn("an AsyncClient was collected unclosed: its session and channel are "
                  "closed now (`await client.close()` or `async with` closes them)",
                  ResourceWarning, stacklevel=2)

    def shut() -> None:
        if held.session is not None:
            held.session.cancel()
        task = loop.create_task(channel.close())
        _CLOSING.add(task)          # the loop holds its tasks weakly
        task.add_done_callback(_CLOSING.discard)

    try:
        loop.call_soon_threadsafe(shut)
    except RuntimeError:        # the loop closed meanwhile, and its channel with it
        pass


class AsyncClient:
    """A connection to the controller for asyncio code: its own channel and one `Session`
    stream, opened at the first request, with the synchronous `Client`'s protocol.

    Requests on one client go one at a time over the session; one made while another is
    still being read goes as an `Execute` call of its own. `execute` fails a request
    when the controller sends nothing of its answer for `timeout` + 5 s (the controller
    fails it at `timeout`); `batches` sets no deadline of its own, so a caller timing
    many sessions can watch them all with one timer instead of one per request.

    The channel opens at first use, on the event loop running then (a client may be
    made before the loop runs), and serves that loop only. Close it (`await close()`,
    or `async with`); one dropped unclosed has its session and channel closed on their
    loop when it is collected, with a ResourceWarning, as asyncio's own objects do.
    """

    def __init__(self, address: str = DEFAULT_CONTROLLER, *, timeout: float = 120.0,
                 channel_options: Sequence[tuple[str, Any]] = (),
                 ca: str | Path | None = None, token: str | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self._creds = _credentials(ca, token)   # a wrong CA or token fails here, at once
        self._options = channel_options
        # The channel, its loop and the session, held apart from the client so that its
        # finalizer can close them once the client is collected unclosed.
        self._held = _Held()
        self._finalizer = weakref.finalize(self, _dropped, self._held)
        self._stub: rpc.ControllerStub | None = None
        self._in_use = False            # a request is being read off the session
        self.sessions_opened = 0
        self.closed = False

    @property
    def _channel(self) -> Any:          # a grpc.aio channel, bound to `_loop`
        return self._held.channel

    @_channel.setter
    def _channel(self, channel: Any) -> None:
        self._held.channel = channel

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self._held.loop

    @_loop.setter
    def _loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._held.loop = loop

    @property
    def _session(self) -> Any:          # a grpc.aio stream-stream call
        return self._held.session

    @_session.setter
    def _session(self, session: Any) -> None:
        self._held.session = session

    @property
    def channel(self) -> Any:
        """The grpc.aio channel, opened on the running loop at first use."""
        if self.closed:
            raise client_closed()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ClientError("FAILED_PRECONDITION", "an AsyncClient works inside a "
                              "running event loop only (from a coroutine)") from None
        if self._channel is None:
            self._channel = dial(grpc.aio, self.address, self._creds, self._options)
            self._stub = rpc.ControllerStub(self._channel)
            self._loop = loop
        elif loop is not self._loop:
            # grpc.aio's calls complete on the loop their channel was opened on: used
            # from another one they would never complete.
            raise ClientError("FAILED_PRECONDITION", "this AsyncClient's channel was "
                              "opened on another event loop: use a client per event loop")
        return self._channel

    @property
    def stub(self) -> rpc.ControllerStub:
        self.channel    # noqa: B018 (opens it, or raises why it cannot be used here)
        assert self._stub is not None
        return self._stub

    async def connect(self, timeout: float = 30.0) -> None:
        """Wait until the channel is connected (so set-up is not part of a timed run)."""
        await asyncio.wait_for(self.channel.channel_ready(), timeout)

    async def close(self) -> None:
        """Close the channel; requests under way raise CANCELLED, later ones
        FAILED_PRECONDITION."""
        self.closed = True
        if self._session is not None:
            self._session.cancel()
            self._session = None
        channel, self._channel = self._channel, None
        # A channel of another (likely finished) loop cannot be awaited here; dropped,
        # grpc closes it when it is collected.
        if channel is not None and self._loop is asyncio.get_running_loop():
            await channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def batches(self, text: str) -> AsyncIterator[pb.ExecuteReplies]:
        """The reply batches of one traffic unit, the last one marked `end`."""
        self.channel    # noqa: B018 (raises now if the client cannot be used here)
        if self._in_use:
            async for batch in self._call(text):
                yield batch
            return
        request = _request(text, self.timeout)
        self._in_use = True
        ended = answered = False
        try:
            session = await self._send(request)
            while True:
                # The call written to, not `_session`: close() may drop that meanwhile.
                batch = await session.read()
                if batch is grpc.aio.EOF:
                    raise _closed()
                ended, answered = batch.end, True
                yield batch
                if _ended(batch):
                    return
        except asyncio.CancelledError:
            if self._cut_by_close():
                raise closed_under_way() from None
            raise
        except grpc.RpcError as e:
            if self.closed:
                raise closed_under_way() from None
            if not answered and e.code() == grpc.StatusCode.UNAVAILABLE:
                raise _broken(e) from None
            raise _error(e) from None
        finally:
            self._in_use = False
            if not ended and self._session is not None:   # left mid-answer: not reusable
                self._session.cancel()
                self._session = None

    async def _send(self, request: pb.ExecuteRequest) -> Any:
        """Write `request` on the session, opening one if there is none or it has ended;
        returns the session's call.

        A kept session can be dead without its call knowing yet (the controller
        restarted since its last answer: grpc.aio learns it only when a write fails,
        where the synchronous client's `alive()` sees it first). A write that fails
        put nothing of the request on the wire, so the controller cannot have run it:
        it is written once more on a fresh session. A request whose write succeeded is
        never sent again, since the controller may have received and run it.
        """
        while True:
            if self.closed:
                raise closed_under_way()
            fresh = self._session is None or self._session.done()
            if fresh:
                if self._session is not None:
                    self._session.cancel()
                self._session = self.stub.Session()
                self.sessions_opened += 1
            session = self._session
            try:
                await session.write(request)
            except (grpc.RpcError, asyncio.InvalidStateError) as e:
                if self._session is not None:
                    self._session.cancel()
                    self._session = None
                if self.closed:
                    raise closed_under_way() from None
                if fresh:
                    raise _unsent(e) from None
                continue
            if self.closed:         # closed while the request was written
                raise closed_under_way()
            return session

    async def _call(self, text: str) -> AsyncIterator[pb.ExecuteReplies]:
        try:
            # No deadline of its own, as for the session: `execute` times the silence.
            async for batch in self.stub.Execute(_request(text, self.timeout)):
                yield batch
        except asyncio.CancelledError:
            if self._cut_by_close():
                raise closed_under_way() from None
            raise
        except grpc.RpcError as e:
            raise (closed_under_way() if self.closed else _error(e)) from None

    def _cut_by_close(self) -> bool:
        """Whether a CancelledError from gRPC is `close()` cancelling the call under way
        (grpc.aio raises it for a call cancelled locally), not this task's owner
        cancelling the task, which must stay a cancellation."""
        task = asyncio.current_task()
        return self.closed and task is not None and not task.cancelling()

    async def execute(self, text: str) -> list[Result]:
        """Run one request or transaction; one Result per request."""
        replies: list[pb.ExecuteReply] = []
        loop = asyncio.get_running_loop()
        try:
            # The deadline measures the controller's silence: it restarts at each message.
            async with asyncio.timeout(self.timeout + 5) as silence:
                async for batch in self.batches(text):
                    replies.extend(batch.replies)
                    silence.reschedule(loop.time() + self.timeout + 5)
        except TimeoutError:
            raise _deadline(self.timeout) from None
        return collect(replies)


def _unsent(e: grpc.RpcError | asyncio.InvalidStateError) -> ClientError:
    """A request that could not be written to a fresh session: the controller has
    nothing of it. A session that could not open says why as the synchronous client
    does (`hinted`); core's INTERNAL for a write on a closed stream is UNAVAILABLE."""
    if isinstance(e, grpc.RpcError) and e.code() != grpc.StatusCode.INTERNAL:
        return ClientError(e.code().name, f"the request was not sent (not run): {hinted(e)}")
    details = (e.details() if isinstance(e, grpc.RpcError) else str(e)) or "UNAVAILABLE"
    return ClientError("UNAVAILABLE", f"the request was not sent (not run): the session to "
                                      f"the controller closed ({details})")


def _broken(e: grpc.RpcError) -> ClientError:
    """The session broke after the request was written and before any answer: the
    controller may have run it (a write may have been committed), so it is not sent
    again; a read can be asked again."""
    return ClientError("UNAVAILABLE", "the session to the controller broke before the "
                       "request was answered: it may or may not have run "
                       f"({e.details() or e.code().name})")
