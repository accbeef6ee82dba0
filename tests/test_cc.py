"""CC's lock table: shared/exclusive semantics, FIFO order, whole-set grants."""

import asyncio

from backend.cc import LockTable, S, X


def granted(t: LockTable, handle) -> bool:  # noqa: ANN001
    return t._sets[handle].ready.is_set()


def test_shared_locks_are_compatible() -> None:
    async def go() -> None:
        t = LockTable()
        a = t.request(1, {("cluster", 1): S})
        b = t.request(2, {("cluster", 1): S})
        assert granted(t, a) and granted(t, b)
    asyncio.run(go())


def test_exclusive_waits_for_shared_and_blocks_later_shared() -> None:
    async def go() -> None:
        t = LockTable()
        a = t.request(1, {("cluster", 1): S})
        b = t.request(2, {("cluster", 1): X})
        c = t.request(3, {("cluster", 1): S})    # FIFO: may not overtake the waiting X
        assert granted(t, a) and not granted(t, b) and not granted(t, c)
        t.release(a)
        assert granted(t, b) and not granted(t, c)
        t.release(b)
        assert granted(t, c)
    asyncio.run(go())


def test_whole_set_granted_at_once_and_no_deadlock_in_opposite_orders() -> None:
    async def go() -> None:
        t = LockTable()
        a = t.request("A", {("cluster", 1): X, ("cluster", 2): X})
        # B asks for the same clusters "in the other order": it simply queues behind A.
        b = t.request("B", {("cluster", 2): X, ("cluster", 1): X})
        assert granted(t, a) and not granted(t, b)
        t.release(a)
        await asyncio.wait_for(t.wait(b), 1)
        t.release(b)
        assert t.holders() == {}
    asyncio.run(go())


def test_disjoint_resources_run_concurrently_and_withdraw_works() -> None:
    async def go() -> None:
        t = LockTable()
        a = t.request(1, {("cluster", 1): X})
        b = t.request(2, {("cluster", 2): X})
        w = t.request(3, {("cluster", 1): X})
        assert granted(t, a) and granted(t, b) and not granted(t, w)
        t.release(w)                      # a waiting set can be withdrawn (abort)
        t.release(a)
        assert ("cluster", 1) not in t.holders()
    asyncio.run(go())


def test_many_concurrent_owners_all_finish() -> None:
    async def go() -> None:
        t = LockTable()
        order: list[int] = []

        async def worker(i: int) -> None:
            res = {("cluster", i % 3): X, ("file", "F"): S}
            h = await t.acquire(i, res)
            order.append(i)
            await asyncio.sleep(0)
            t.release(h)

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(50))), 5)
        assert sorted(order) == list(range(50))
        # Conflicting owners ran in the order they queued.
        for k in range(3):
            same = [i for i in order if i % 3 == k]
            assert same == sorted(same)
    asyncio.run(go())
