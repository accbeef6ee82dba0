"""CC's lock table: shared/exclusive semantics, FIFO order, whole-set grants."""

import asyncio
import time

import pytest

from backend.cc import IS, IX, LockTable, S, X, join
from backend.dm import lock_set
from backend.plan import FilePlan, RequestPlan
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from tests.inproc import census_iig
from tests.inproc import lock_set as census_lock_set


def granted(t: LockTable, handle) -> bool:
    return t.granted(handle)


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


def test_a_set_granted_as_queued_waits_for_nothing_and_a_blocked_one_for_its_grant() -> None:
    """`wait` returns at once, with no wait counted, for a set granted when it was
    queued; a set queued behind another returns only once the other is released, with
    the time it waited."""
    async def go() -> None:
        t = LockTable()
        t0 = time.perf_counter()
        a = t.request("A", {("cluster", 1): X, ("cluster", 2): S})
        b = t.request("B", {("cluster", 2): S, ("cluster", 1): S})
        assert await t.wait(a) == 0.0
        waiting = asyncio.ensure_future(t.wait(b))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        t.release(a)
        assert 0.01 <= await asyncio.wait_for(waiting, 1) <= time.perf_counter() - t0
        assert granted(t, b)
        # Granted before anyone waits for it: the wait is still the time it was queued.
        t1 = time.perf_counter()
        c = t.request("C", {("cluster", 3): X})
        d = t.request("D", {("cluster", 3): X})
        await asyncio.sleep(0.01)
        t.release(c)
        assert granted(t, d)
        assert 0.01 <= await t.wait(d) <= time.perf_counter() - t1
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


def test_an_empty_lock_set_is_granted_at_once() -> None:
    t = LockTable()
    assert granted(t, t.request("a", {}))


def test_a_release_wakes_only_what_it_unblocks_and_in_fifo_order() -> None:
    t = LockTable()
    first = t.request("w", {("cluster", 1): X, ("cluster", 2): X})
    reader1 = t.request("r1", {("cluster", 1): S})
    writer = t.request("w2", {("cluster", 2): X})
    reader2 = t.request("r2", {("cluster", 2): S, ("cluster", 3): S})
    other = t.request("o", {("cluster", 4): X})
    assert granted(t, first) and granted(t, other)
    assert not any(granted(t, h) for h in (reader1, writer, reader2))
    t.release(first)
    assert granted(t, reader1) and granted(t, writer) and not granted(t, reader2)
    t.release(writer)
    assert granted(t, reader2)


def test_intention_modes() -> None:
    t = LockTable()
    a = t.request("a", {("file", "F"): IS})
    b = t.request("b", {("file", "F"): IX})
    c = t.request("c", {("file", "F"): S})      # a whole-file reader: waits for the writer
    d = t.request("d", {("file", "F"): IS})     # compatible with all three ahead
    e = t.request("e", {("file", "F"): IX})     # not with the S ahead: FIFO holds it
    assert [granted(t, h) for h in (a, b, c, d, e)] == [True, True, False, True, False]
    t.release(b)
    assert granted(t, c) and not granted(t, e)
    t.release(c)
    assert granted(t, e)
    assert [join(IS, IX), join(S, IS), join(IX, S), join(IX, IX), join(X, IS)] == \
        [IX, S, X, IX, X]


def _plan(op: int, clusters: list[int], every: bool, moves: bool = False) -> RequestPlan:
    fp = FilePlan(FileSchema("F", [Attribute("K", "integer")]), clusters, every_cluster=every)
    return RequestPlan(pb.Request(op=op, moves_records=moves), files=[fp])


def test_lock_sets_escalate_to_the_file_when_every_cluster_is_visited() -> None:
    assert lock_set([_plan(pb.RETRIEVE, [1, 2, 3], True)]) == {("file", "F"): S}
    assert lock_set([_plan(pb.RETRIEVE, [], True)]) == {("file", "F"): S}   # empty file too
    assert lock_set([_plan(pb.RETRIEVE, [2], False)]) == {
        ("file", "F"): IS, ("cluster", 2): S}
    assert lock_set([_plan(pb.DELETE, [1, 2], True)]) == {("file", "F"): X}
    assert lock_set([_plan(pb.UPDATE, [2], False, moves=True)]) == {("file", "F"): X}
    assert lock_set([_plan(pb.UPDATE, [2], False)]) == {("file", "F"): IX, ("cluster", 2): X}
    # A transaction that reads cluster 2 and writes it: the stronger of each.
    both = lock_set([_plan(pb.RETRIEVE, [2, 3], False), _plan(pb.DELETE, [2], False)])
    assert both == {("file", "F"): IX, ("cluster", 2): X, ("cluster", 3): S}
    # An insert into a cluster the whole-file reader never saw still waits for it.
    insert = pb.Request(op=pb.INSERT, file="F", records=[pb.PlacedRecord(cluster_id=9)])
    t = LockTable()
    reader = t.request("r", lock_set([_plan(pb.RETRIEVE, [1, 2], True)]))
    writer = t.request("w", lock_set([RequestPlan(insert)]))
    assert granted(t, reader) and not granted(t, writer)
    t.release(reader)
    assert granted(t, writer)


# A transaction's lock set, built the way a backend builds it (REQP's traffic unit, DM's
# cluster search): a resource two requests both touch gets the join of their modes,
# whatever order the requests come in.
MONTEREY = "((FILE = Census) and (CITY = Monterey))"


@pytest.mark.parametrize("text", [
    f"[DELETE {MONTEREY}; RETRIEVE {MONTEREY} (POP)]",
    f"[RETRIEVE {MONTEREY} (POP); DELETE {MONTEREY}]",
])
def test_a_transaction_that_reads_and_writes_a_cluster_locks_it_exclusively(text: str) -> None:
    iig = census_iig()
    [monterey] = iig.directory.cluster_search("CENSUS", {"CITY": {
        iig.directory.at[("CENSUS", "CITY")].find("Monterey")}})
    assert census_lock_set(iig.directory, text) == {
        ("file", "CENSUS"): IX, ("cluster", monterey): X}


@pytest.mark.parametrize("text", [
    f"[RETRIEVE (FILE = Census) (CITY); UPDATE {MONTEREY} <AREA = 1.5>]",
    f"[UPDATE {MONTEREY} <AREA = 1.5>; RETRIEVE (FILE = Census) (CITY)]",
])
def test_a_whole_file_read_joined_with_a_write_locks_the_file_exclusively(text: str) -> None:
    locks = census_lock_set(census_iig().directory, text)
    assert locks[("file", "CENSUS")] == X
    # …so a reader of any single cluster queues behind it.
    t = LockTable()
    unit = t.request("unit", locks)
    reader = t.request("reader", census_lock_set(census_iig().directory,
                                                 f"RETRIEVE {MONTEREY} (POP)"))
    assert granted(t, unit) and not granted(t, reader)


def test_two_reads_of_the_file_and_a_cluster_lock_the_file_shared() -> None:
    locks = census_lock_set(census_iig().directory,
                            f"[RETRIEVE {MONTEREY} (POP); RETRIEVE (FILE = Census) (CITY)]")
    assert locks[("file", "CENSUS")] == S and set(locks.values()) == {S}


def test_an_empty_lock_set_is_granted_holds_nothing_and_releases_nothing() -> None:
    """A unit whose predicates read no type-C attribute asks for no attribute locks:
    nothing is queued for it, and releasing it (twice, too) frees nobody else's."""
    async def go() -> None:
        t = LockTable()
        a = t.request(1, {("cluster", 1): X})
        b = t.request(2, {("cluster", 1): S})
        empty = t.request(3, {})
        assert granted(t, empty) and await t.wait(empty) == 0.0
        assert t.holders() == {("cluster", 1): [(1, X, True), (2, S, False)]}
        t.release(empty)
        t.release(empty)
        assert granted(t, a) and not granted(t, b)
        t.release(a)
        assert granted(t, b)
    asyncio.run(go())
