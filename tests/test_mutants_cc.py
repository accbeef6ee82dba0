"""CC's lock table, for the mutants tests/test_cc.py let live (docs/mutation.md): who holds
what, handles of one owner, releases, and the seconds a lock set waited."""

import asyncio

from backend.cc import LockTable, S, X


def test_the_table_names_each_request_owner_mode_and_grant() -> None:
    t = LockTable()
    t.request("a", {("cluster", 1): X})
    t.request("b", {("cluster", 1): S, ("cluster", 2): S})
    assert t.holders() == {("cluster", 1): [("a", X, True), ("b", S, False)],
                           ("cluster", 2): [("b", S, True)]}


def test_two_lock_sets_of_one_owner_are_released_separately() -> None:
    t = LockTable()
    first = t.request("unit", {("cluster", 1): X})
    second = t.request("unit", {("cluster", 2): X})
    assert first != second
    t.release(first)
    assert t.holders() == {("cluster", 2): [("unit", X, True)]}
    t.release(second)
    assert t.holders() == {}


def test_releasing_twice_or_an_unknown_handle_does_nothing() -> None:
    t = LockTable()
    h = t.request("a", {("cluster", 1): X})
    t.release(h)
    t.release(h)
    t.release(("nobody", 99))
    assert t.holders() == {}


def test_a_release_grants_waiters_behind_any_of_its_resources() -> None:
    # The first resource's queue empties (and goes) on release; the waiter is on the second.
    t = LockTable()
    holder = t.request("a", {("cluster", 1): X, ("cluster", 2): X})
    waiter = t.request("b", {("cluster", 2): X})
    t.release(holder)
    assert t.holders() == {("cluster", 2): [("b", X, True)]}
    t.release(waiter)


def test_acquire_names_its_owner_and_wait_returns_the_seconds_waited() -> None:
    async def go() -> None:
        t = LockTable()
        blocker = t.request("a", {("cluster", 1): X})
        h = t.request("b", {("cluster", 1): X})
        waiting = asyncio.create_task(t.wait(h))
        await asyncio.sleep(0.05)
        t.release(blocker)
        waited = await waiting
        assert 0.04 <= waited < 30
        t.release(h)
        got = await t.acquire("c", {("cluster", 3): S})
        assert t.holders() == {("cluster", 3): [("c", S, True)]}
        t.release(got)
    asyncio.run(go())
