"""The synchronous client's long calls: a `Session` stream and a bulk load, each watched
by a thread so that a controller that stops answering fails the call instead of
blocking its client for ever (gRPC's synchronous streams have no deadline per read)."""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import grpc

from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.replies import ClientError, _deadline, _ended, _error, _request, hinted


class Owed:
    """A load's batches sent and not yet answered. While the controller owes an answer
    and the caller is reading, a watchdog cancels the call once it has been silent for
    `limit` s (a load has no deadline of its own: it may run for hours)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.sent = self.answered = 0
        self.since = time.monotonic()       # of the silence the watchdog measures
        self.reading = True
        self.expired, self.over = threading.Event(), threading.Event()

    def sending(self, batches: Iterator[pb.LoadRequest]) -> Iterator[pb.LoadRequest]:
        for batch in batches:
            if self.sent == self.answered:
                self.since = time.monotonic()   # owed from now
            self.sent += 1
            yield batch

    def resume(self) -> None:
        self.reading, self.since = True, time.monotonic()

    def watch(self, call: Any) -> None:
        def run() -> None:
            while not self.over.wait(1.0):
                if self.reading and self.sent > self.answered and \
                        time.monotonic() - self.since > self.limit:
                    expire(call, self.expired)
                    return
        threading.Thread(target=run, name="mbds-load-watch", daemon=True).start()


class Session:
    """One open `Session` stream: requests are written to it, one at a time, and
    each one's replies read up to the message marked `end`.

    gRPC's synchronous streams have no deadline per read, so a watchdog thread
    cancels the stream when the controller sends nothing for `timeout` + 5 s while
    a reply is awaited (the controller itself fails a request at `timeout`): a
    controller that stops answering raises DEADLINE_EXCEEDED here instead of
    blocking its client for ever. The time a reader spends on the messages it was
    given is not counted, so a slow reader of a long answer is not cut off.
    """

    def __init__(self, stub: rpc.ControllerStub, timeout: float) -> None:
        self.timeout = timeout
        self.requests: queue.SimpleQueue[pb.ExecuteRequest | None] = queue.SimpleQueue()
        self.replies = stub.Session(iter(self.requests.get, None))
        self.pending = False                 # a request was written, its `end` unread
        self.deadline: float | None = None   # set while a reply is awaited
        self.expired = False
        self.closed = threading.Event()
        # Neither the finalizer nor the watchdog holds the Session itself: one that
        # nobody holds is collected, which cancels its stream and ends the thread.
        self._finalizer = weakref.finalize(self, _end, self.closed, self.requests,
                                           self.replies)
        threading.Thread(target=_watch, args=(weakref.ref(self), self.closed), daemon=True,
                         name="mbds-session-watchdog").start()

    def alive(self) -> bool:
        return not self.closed.is_set() and self.replies.is_active()

    def close(self) -> None:
        self._finalizer()

    def expire(self) -> float | None:
        """Cancel the stream if its deadline has passed (None); else the seconds to
        wait before looking again."""
        deadline, now = self.deadline, time.monotonic()
        if deadline is not None and now >= deadline:
            self.expired = True
            self.replies.cancel()
            return None
        return 1.0 if deadline is None else min(1.0, deadline - now)

    def ask(self, text: str) -> Iterator[pb.ExecuteReply]:
        request = _request(text, self.timeout)
        self.pending = True
        self.requests.put(request)
        try:
            while True:
                self.deadline = time.monotonic() + self.timeout + 5
                batch = next(self.replies, None)
                self.deadline = None
                if batch is None:
                    break
                yield from batch.replies
                if batch.end:
                    self.pending = False
                    _ended(batch)
                    return
        except grpc.RpcError as e:
            if self.expired:
                raise _deadline(self.timeout) from None
            # A stream that never connected took nothing to the controller.
            if e.code() == grpc.StatusCode.UNAVAILABLE and \
                    "failed to connect" not in (e.details() or ""):
                raise _unanswered(hinted(e)) from None
            raise _error(e) from None
        finally:
            self.deadline = None
        raise _unanswered("the controller closed the session")


def _unanswered(why: str) -> ClientError:
    """The session broke after the request was written and before its end: the
    controller may have run it (a write may be committed), so it is not sent again."""
    return ClientError("UNAVAILABLE", "the session to the controller broke before the "
                       f"request was answered: it may or may not have run ({why})")


def _end(closed: threading.Event, requests: queue.SimpleQueue[pb.ExecuteRequest | None],
         replies: Any) -> None:
    """Close a Session's stream: its request iterator ends and the call is cancelled."""
    if not closed.is_set():
        closed.set()
        requests.put(None)
        replies.cancel()


def _watch(ref: weakref.ref[Session], closed: threading.Event) -> None:
    """A Session's watchdog, holding it only while looking at its deadline."""
    while not closed.is_set():
        session = ref()
        if session is None:
            return
        wait = session.expire()
        del session
        if wait is None:
            return
        closed.wait(max(wait, 0.0))


def expire(call: Any, expired: threading.Event) -> None:
    expired.set()
    call.cancel()
