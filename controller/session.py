"""A client's session: one gRPC stream carrying its requests, answered in order.

A call per request costs the controller and the client several times the CPU
of a message on an open stream (docs/benchmarks-seeds.md, `mbds bench users`), and
for a small request that overhead is most of what the controller does. So a
client keeps one `Session` open, as a database client keeps its connection:
it writes a request, reads `ExecuteReplies` up to the one marked `end`, and
writes the next. A request that fails fails alone — its last message carries
the `Failure` that `Execute` would have ended its call with — and the session
goes on. A client that goes away mid-answer cancels the stream, and PP aborts
that traffic unit everywhere, as it does for `Execute`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from controller.abdl import AbdlSyntaxError
from controller.coordinator import Coordinator
from mbds import metrics
from mbds.errors import FAILURE_MESSAGE, MbdsError, shorten
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.controller")


def failure(e: Exception) -> tuple[grpc.StatusCode, str]:
    """The status a failed request ends with, counted by kind (AbdlSyntaxError,
    SemanticError, BackendUnavailable, ...). The message is bounded whatever it
    repeats, since gRPC trailers beyond a few KiB fail the call itself."""
    metrics.REQUEST_ERRORS.labels(type(e).__name__).inc()
    if isinstance(e, AbdlSyntaxError):
        code, message = grpc.StatusCode.INVALID_ARGUMENT, f"syntax error: {e}"
    elif isinstance(e, DecodeError):   # a message on a client's stream that does not parse
        code, message = grpc.StatusCode.INVALID_ARGUMENT, f"a malformed message: {e}"
    elif isinstance(e, MbdsError):
        code, message = e.code, str(e)
    else:
        log.error("internal error", exc_info=e)
        code, message = grpc.StatusCode.INTERNAL, f"internal error: {e!r}"
    return code, shorten(message, FAILURE_MESSAGE)


class Sessions:
    """The open sessions, so that stopping the controller need not wait its grace
    period for clients that keep an idle session open."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.c = coordinator
        self.idle: set[asyncio.Task] = set()
        self.closing = False

    def close(self) -> None:
        """End idle sessions now; busy ones end after the request they are answering."""
        self.closing = True
        for task in self.idle:
            task.cancel()

    async def serve(self, requests: AsyncIterator[pb.ExecuteRequest]
                    ) -> AsyncIterator[pb.ExecuteReplies]:
        task = asyncio.current_task()
        assert task is not None
        it = aiter(requests)
        try:
            while not self.closing:
                self.idle.add(task)
                try:
                    request = await anext(it)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if self.closing:   # close(): end the stream with OK, now
                        return
                    raise
                finally:
                    self.idle.discard(task)
                # The answer, written out here rather than in a generator of its own per
                # request. Its last message is held back until PP's answer ends, so that
                # it can carry `end` (a small answer stays one message, with no empty
                # marker after it).
                held: pb.ExecuteReplies | None = None
                try:
                    async for reply in self.c.execute(request.text, request.timeout_s or None):
                        if held is not None:
                            yield held
                        held = reply
                except Exception as e:   # every failure is this request's answer
                    code, message = failure(e)
                    held = held or pb.ExecuteReplies()
                    held.failure.code, held.failure.message = code.name, message
                held = held or pb.ExecuteReplies()
                held.end = True
                yield held
        finally:
            self.idle.discard(task)
