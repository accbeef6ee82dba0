"""The one-reader queue the buses, the peer streams and DM's stage 2 use."""

from __future__ import annotations

import asyncio

from mbds.mailbox import Mailbox


def test_a_reader_takes_everything_put_in_order_and_waits_when_empty() -> None:
    async def run() -> None:
        box: Mailbox[int | None] = Mailbox()
        box.put(1)
        box.put(2)
        assert list(await box.take()) == [1, 2]
        assert not box.idle                      # no reader waits
        reader = asyncio.ensure_future(box.take())
        await asyncio.sleep(0)
        assert not reader.done() and box.idle    # nothing there: it waits
        box.put(3)
        assert not box.idle                      # woken, not yet taken
        box.put(None)
        assert list(await reader) == [3, None]   # woken once, takes both
        assert not box.idle
        box.put(4)
        box.put(5)
        assert await box.get() == 4              # one at a time, oldest first
        assert await box.get() == 5
        getter = asyncio.ensure_future(box.get())
        await asyncio.sleep(0)
        getter.cancel()                           # a cancelled wait loses nothing
        await asyncio.sleep(0)
        box.put(6)
        assert await box.get() == 6
        loop = asyncio.get_running_loop()
        try:                                      # a deadline that passes with nothing
            await box.get(until=loop.time() + 0.01)
            raise AssertionError("no TimeoutError")
        except TimeoutError:
            pass
        box.put(7)                                # the mailbox still works afterwards
        assert await box.get(until=loop.time() + 0.01) == 7

    asyncio.run(run())
