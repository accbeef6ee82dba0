"""How many bytes of large requests the controller serves at once.

A request of tens of MB is copied several times on its way (its text, its parsed
bodies, each backend's traffic unit, the bus message), so many at once could take the
controller's memory to several times what they carry. Requests of LARGE bytes or more
enter through `Admission`, FIFO, while their bytes in service stay within a bound; one
larger than the bound alone enters when nothing else large is in.
"""

from __future__ import annotations

import asyncio
from collections import deque

from mbds.service import MAX_MESSAGE

LARGE = 1 << 20                 # a request's text from this many bytes is counted
IN_SERVICE = 2 * MAX_MESSAGE    # bytes of large requests served at once


class Admission:
    def __init__(self, limit: int = IN_SERVICE) -> None:
        self.limit = limit
        self.used = 0
        self.waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def enter(self, size: int) -> int:
        """Wait for room for `size` bytes; returns what to give back to `leave`."""
        n = min(size, self.limit)
        if not self.waiting and self.used + n <= self.limit:
            self.used += n
            return n
        turn = asyncio.get_running_loop().create_future()
        self.waiting.append((n, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.leave(n)               # let in just as it was cancelled
            else:
                self.waiting.remove((n, turn))
                self._let_in()
            raise
        return n

    def leave(self, n: int) -> None:
        self.used -= n
        self._let_in()

    def _let_in(self) -> None:
        while self.waiting and self.used + self.waiting[0][0] <= self.limit:
            n, turn = self.waiting.popleft()
            self.used += n
            turn.set_result(None)
