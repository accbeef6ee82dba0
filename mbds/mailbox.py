"""A one-reader queue for the event loop: what a stream's writer or a stage's loop has
still to take, taken all at once. Lighter than `asyncio.Queue` (no getters' queue, no
size bound, one future per wait), which a traffic unit passes through several times."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Mailbox(Generic[T]):
    """Items in the order they were put; one task at a time takes them."""

    def __init__(self) -> None:
        self.items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    @property
    def idle(self) -> bool:
        """Its reader is waiting for the next item, and nothing is waiting for it."""
        return self._waiter is not None and not self.items

    def put(self, item: T) -> None:
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _arrival(self, until: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        while not self.items:
            waiter = self._waiter = loop.create_future()
            timer = None if until is None else loop.call_at(until, _expire, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                self._waiter = None

    async def take(self) -> deque[T]:
        """Everything put so far; waits for at least one item."""
        await self._arrival()
        items, self.items = self.items, deque()
        return items

    async def get(self, until: float | None = None) -> T:
        """The oldest item; waits for one, or raises TimeoutError once the loop's clock
        reaches `until`."""
        if not self.items:
            await self._arrival(until)
        return self.items.popleft()
