"""CC — concurrency control (SPEC §4): shared/exclusive locks in FIFO queues.

Resources are the paper's three kinds plus one of ours:
  ("attr", file, attr)     a type-C attribute (a new sub-descriptor may be created);
  ("didgroup", file, attr) a descriptor-id group (a new cluster may be created);
  ("cluster", cluster_id)  a cluster (a new address may be added);
  ("file", file)           every cluster of a file: an UPDATE of a directory
                           attribute can move a record into any cluster, even a new one.

Why this is deadlock-free and serializable: a traffic unit asks for its whole
lock set in one call, and each request is granted only when every request
queued ahead of it on that resource is compatible (strict FIFO). A traffic
unit therefore waits only for units that queued before it. DM queues lock
sets in bus order, which is the same total order on every backend, so two
conflicting traffic units run in the same order everywhere: the outcome is
that of the serial order of the bus.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

S = "S"
X = "X"


@dataclass(eq=False)
class _Request:
    owner: Hashable
    mode: str
    granted: bool = False


@dataclass(eq=False)
class _LockSet:
    owner: Hashable
    requests: dict[Hashable, _Request]
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    queued_at: float = field(default_factory=time.perf_counter)


class LockTable:
    """FIFO shared/exclusive locks. Use from one event loop."""

    def __init__(self) -> None:
        self._queues: dict[Hashable, list[_Request]] = {}
        self._sets: OrderedDict[tuple[Hashable, int], _LockSet] = OrderedDict()
        self._serial = 0

    def request(self, owner: Hashable, wants: dict[Hashable, str]) -> tuple[Hashable, int]:
        """Queue a lock set now (the caller's turn is fixed here); returns its handle."""
        self._serial += 1
        handle = (owner, self._serial)
        reqs = {}
        for res, mode in wants.items():
            req = _Request(owner, mode)
            self._queues.setdefault(res, []).append(req)
            reqs[res] = req
        self._sets[handle] = _LockSet(owner, reqs)
        self._grant()
        return handle

    async def wait(self, handle: tuple[Hashable, int]) -> float:
        """Wait until the whole set is granted; returns the seconds waited."""
        ls = self._sets[handle]
        await ls.ready.wait()
        return time.perf_counter() - ls.queued_at

    async def acquire(self, owner: Hashable, wants: dict[Hashable, str]) -> tuple[Hashable, int]:
        handle = self.request(owner, wants)
        await self.wait(handle)
        return handle

    def release(self, handle: tuple[Hashable, int]) -> None:
        """Release (or withdraw, if still waiting) a lock set."""
        ls = self._sets.pop(handle, None)
        if ls is None:
            return
        for res, req in ls.requests.items():
            queue = self._queues[res]
            queue.remove(req)
            if not queue:
                del self._queues[res]
        self._grant()

    def holders(self) -> dict[Hashable, list[tuple[Hashable, str, bool]]]:
        """The lock table as (owner, mode, granted) per resource, for status and tests."""
        return {res: [(r.owner, r.mode, r.granted) for r in q] for res, q in self._queues.items()}

    def _grant(self) -> None:
        for queue in self._queues.values():
            seen_x = False
            for i, req in enumerate(queue):
                if req.mode == X:
                    # An exclusive request is grantable only at the head of its queue.
                    req.granted = i == 0
                    seen_x = True
                else:
                    req.granted = not seen_x
                if seen_x and i > 0:
                    break
        for ls in self._sets.values():
            if not ls.ready.is_set() and all(r.granted for r in ls.requests.values()):
                ls.ready.set()
