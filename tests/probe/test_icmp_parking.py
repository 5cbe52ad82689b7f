"""Where the pinger's batches sleep (probe/icmp_parking.py), on trio's MockClock: a
batch wakes at its deadline or when woken, whichever comes first, never twice; close
lets every parked batch go with an error; a cancelled park leaves nothing behind."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from meshhealth.probe.icmp_parking import Batch, BatchParking


async def _with_timers(parking: BatchParking, nursery: trio.Nursery) -> None:
    nursery.start_soon(parking.run_timers)
    await trio.testing.wait_all_tasks_blocked()


async def test_a_batch_wakes_at_its_deadline(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0
    parking = BatchParking(trio.current_time)
    async with trio.open_nursery() as nursery:
        await _with_timers(parking, nursery)
        start = trio.current_time()
        await parking.park(Batch(), start + 2.5)
        assert trio.current_time() == pytest.approx(start + 2.5)
        # a later, shorter deadline shortens the timer's sleep
        await parking.park(Batch(), trio.current_time() + 0.5)
        assert trio.current_time() == pytest.approx(start + 3.0)
        nursery.cancel_scope.cancel()


async def test_wake_comes_before_the_deadline_and_the_stale_entry_is_skipped(
    mock_clock: trio.testing.MockClock,
) -> None:
    parking = BatchParking(trio.current_time)
    batch = Batch()
    woken_at: list[float] = []

    async def sleeper() -> None:
        await parking.park(batch, trio.current_time() + 60)
        woken_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        await _with_timers(parking, nursery)
        start = trio.current_time()
        nursery.start_soon(sleeper)
        await trio.testing.wait_all_tasks_blocked()
        assert batch.task is not None and batch.park_token != 0
        mock_clock.jump(1)
        parking.wake(batch)
        parking.wake(batch)  # not parked any more: nothing happens
        await trio.testing.wait_all_tasks_blocked()
        assert woken_at == [start + 1]  # by wake, 59 s before its deadline
        assert (batch.task, batch.park_token) == (None, 0)
        assert parking.timer_entries == 1  # the deadline stays, holding only a token
        mock_clock.jump(60)  # it comes due: skipped, the batch is not woken again
        await trio.testing.wait_all_tasks_blocked()
        assert len(woken_at) == 1 and parking.timer_entries == 0
        nursery.cancel_scope.cancel()


async def test_close_lets_every_parked_batch_go_with_an_error() -> None:
    parking = BatchParking(trio.current_time)
    errors: list[str] = []

    async def sleeper() -> None:
        try:
            await parking.park(Batch(), trio.current_time() + 3600)
        except trio.ClosedResourceError as exc:
            errors.append(str(exc))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(sleeper)
        await trio.testing.wait_all_tasks_blocked()
        parking.close()
    assert errors == ["the pinger was closed during the probe"] * 3
    assert parking.closed and parking.timer_entries == 0


async def test_a_cancelled_park_leaves_the_batch_unparked() -> None:
    parking = BatchParking(trio.current_time)
    batch = Batch()
    with trio.move_on_after(0.01):
        await parking.park(batch, trio.current_time() + 3600)
    assert (batch.task, batch.park_token) == (None, 0)
    parking.wake(batch)  # harmless after the cancel
