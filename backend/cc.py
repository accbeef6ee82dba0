"""CC — concurrency control (docs/spec.md §4): shared/exclusive locks in FIFO queues.

Resources are the paper's three kinds plus one of ours:
  ("attr", file, attr)     a type-C attribute (a new sub-descriptor may be created);
  ("didgroup", file, attr) a descriptor-id group (a new cluster may be created);
  ("cluster", cluster_id)  a cluster (a new address may be added);
  ("file", file)           the file above its clusters: IS / IX for units that lock
                           single clusters, S / X for units that read / write every
                           cluster (and X for an UPDATE of a directory attribute, which
                           can move a record into any cluster, even a new one).

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
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

# Multiple-granularity modes (Gray's): a unit that reads every cluster of a file
# takes the file in S instead of each cluster, one that writes them all takes it in
# X; a unit that locks single clusters announces it with IS / IX on the file, so
# the two kinds meet on the file lock and are ordered there.
IS, IX, S, X = "IS", "IX", "S", "X"
COMPATIBLE = {IS: {IS, IX, S}, IX: {IS, IX}, S: {IS, S}, X: set()}


# The handle of an empty lock set (a unit whose predicates read no type-C attribute
# asks for no attribute locks): nothing is queued for it, and it holds nothing.
NOTHING: tuple[Hashable, int] = ("", 0)


def join(a: str, b: str) -> str:
    """The weakest mode that covers both (S with IX would be SIX; X is the safe cover)."""
    if a == b or b == IS:
        return a
    return b if a == IS else X


@dataclass(eq=False, slots=True)
class _Request:
    owner: Hashable
    mode: str
    lock_set: _LockSet       # the set this request belongs to (woken when it is complete)
    granted: bool = False


@dataclass(eq=False, slots=True)
class _LockSet:
    owner: Hashable
    requests: dict[Hashable, _Request]
    ready: bool = False              # every lock of the set is granted
    # Made only for a set that has to wait: most sets are granted as they are queued.
    waiter: asyncio.Future[None] | None = None
    queued_at: float = 0.0

    def complete(self) -> None:
        self.ready = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class LockTable:
    """FIFO shared/exclusive locks. Use from one event loop."""

    def __init__(self) -> None:
        self._queues: dict[Hashable, list[_Request]] = {}
        self._sets: OrderedDict[tuple[Hashable, int], _LockSet] = OrderedDict()
        self._serial = 0

    def request(self, owner: Hashable, wants: dict[Hashable, str]) -> tuple[Hashable, int]:
        """Queue a lock set now (the caller's turn is fixed here); returns its handle."""
        if not wants:
            return NOTHING          # nothing to lock: granted, and nothing to release
        self._serial += 1
        handle = (owner, self._serial)
        ls = _LockSet(owner, {})
        queued: list[Hashable] = []         # resources someone else already queues on
        for res, mode in wants.items():
            req = ls.requests[res] = _Request(owner, mode, ls)
            queue = self._queues.get(res)
            if queue is None:
                # The usual case: nobody holds or waits for it, so it is granted now and
                # no queue needs deciding again.
                self._queues[res] = [req]
                req.granted = True
            else:
                queue.append(req)
                queued.append(res)
        self._sets[handle] = ls
        if queued:
            ls.queued_at = time.perf_counter()
            self._grant(queued)
        else:
            ls.ready = True     # every lock granted at once (or nothing to lock here)
        return handle

    def granted(self, handle: tuple[Hashable, int]) -> bool:
        """Does the set hold every lock it asked for?"""
        return handle is NOTHING or self._sets[handle].ready

    async def wait(self, handle: tuple[Hashable, int]) -> float:
        """Wait until the whole set is granted; returns the seconds waited."""
        if handle is NOTHING:
            return 0.0
        ls = self._sets[handle]
        if ls.ready:
            return 0.0 if not ls.queued_at else time.perf_counter() - ls.queued_at
        if ls.waiter is None:
            ls.waiter = asyncio.get_running_loop().create_future()
        await ls.waiter
        return time.perf_counter() - ls.queued_at

    async def acquire(self, owner: Hashable, wants: dict[Hashable, str]) -> tuple[Hashable, int]:
        handle = self.request(owner, wants)
        await self.wait(handle)
        return handle

    def release(self, handle: tuple[Hashable, int]) -> None:
        """Release (or withdraw, if still waiting) a lock set."""
        ls = self._sets.pop(handle, None)      # None: released already, or NOTHING
        if ls is None:
            return
        for res, req in ls.requests.items():
            queue = self._queues[res]
            queue.remove(req)
            if not queue:
                del self._queues[res]
        self._grant(ls.requests)

    def holders(self) -> dict[Hashable, list[tuple[Hashable, str, bool]]]:
        """The lock table as (owner, mode, granted) per resource, for status and tests."""
        return {res: [(r.owner, r.mode, r.granted) for r in q] for res, q in self._queues.items()}

    def _grant(self, resources: Iterable[Hashable]) -> None:
        """Re-decide the queues of `resources` (only a change there can grant anything),
        then wake the lock sets that now hold every lock: the cost is the size of the
        lock set that came or went, not of the whole table."""
        touched: list[_LockSet] = []
        for res in resources:
            queue = self._queues.get(res)
            if queue is None:
                continue
            ahead: set[str] = set()
            for req in queue:
                # Strict FIFO: granted only when compatible with every request queued
                # ahead, granted or not, so conflicting units run in queue (bus) order.
                granted = ahead <= COMPATIBLE[req.mode]
                if granted and not req.granted:
                    touched.append(req.lock_set)
                req.granted = granted
                ahead.add(req.mode)
                if X in ahead:
                    break           # nothing behind an exclusive request can be granted
        for ls in touched:
            if not ls.ready and all(r.granted for r in ls.requests.values()):
                ls.complete()
