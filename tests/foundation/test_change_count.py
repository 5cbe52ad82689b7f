"""meshhealth.change_count: a reader never misses a change, and waits for the next."""

from __future__ import annotations

import trio
import trio.testing

from meshhealth.change_count import ChangeCount


async def test_a_missed_change_returns_at_once_and_a_wait_wakes_on_the_next() -> None:
    count = ChangeCount()
    count.bump()
    assert await count.wait_changed(0) == 1  # seen 0, it is 1: no wait
    woke: list[int] = []

    async def reader() -> None:
        woke.append(await count.wait_changed(1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []  # nothing changed since 1
        count.bump()
    assert woke == [2]
