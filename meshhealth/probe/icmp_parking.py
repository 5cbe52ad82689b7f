"""Where the pinger's batches sleep: woken by their replies or by one timer task.

    parking = BatchParking(clock)
    nursery.start_soon(parking.run_timers)        # the one timer task
    await parking.park(batch, deadline)           # in the batch's task
    parking.wake(batch)                           # from the receiver: all replies in
    parking.close()                               # every parked batch goes, raising

A parked batch costs a dict entry and a heap entry `(deadline, token)`, not a cancel
scope and an event per probe: its task waits in trio.lowlevel.wait_task_rescheduled and
is rescheduled by whichever comes first, the receiver (`wake`) or the timer task (the
deadline). A heap entry whose token is gone (the batch was woken by its replies, or
cancelled) is skipped when it comes due: it holds no reference to the batch.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import trio


class Batch:
    """The probes of one Pinger.ping_batch() call, as the receiver and the timer see
    them."""

    __slots__ = ("park_token", "sending", "task")

    def __init__(self) -> None:
        self.sending = True  # more requests to send: replies alone do not end it
        self.task: trio.lowlevel.Task | None = None  # set while parked
        self.park_token = 0  # its key in BatchParking's table while parked, else 0


class BatchParking:
    """Parked batches by token, and the heap of their deadlines."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._now = clock
        self._parked: dict[int, Batch] = {}
        self._timers: list[tuple[float, int]] = []
        self._tokens = 0
        self._timer_scope: trio.CancelScope | None = None
        self.closed = False

    @property
    def timer_entries(self) -> int:
        """Deadlines in the heap, including those of batches already woken."""
        return len(self._timers)

    async def park(self, batch: Batch, deadline: float) -> None:
        """Sleep until `deadline`, or until `wake(batch)`. Raises
        trio.ClosedResourceError when woken by `close()`."""
        self._tokens += 1
        token = self._tokens
        batch.park_token = token
        batch.task = trio.lowlevel.current_task()
        self._parked[token] = batch
        heapq.heappush(self._timers, (deadline, token))
        scope = self._timer_scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline

        def abort(_: object) -> trio.lowlevel.Abort:
            del self._parked[batch.park_token]
            batch.task = None
            batch.park_token = 0
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if self.closed:
            raise trio.ClosedResourceError("the pinger was closed during the probe")

    def wake(self, batch: Batch) -> None:
        """Reschedule a parked batch (no-op if it is not parked)."""
        task = batch.task
        if task is not None:
            del self._parked[batch.park_token]
            batch.task = None
            batch.park_token = 0
            trio.lowlevel.reschedule(task)

    async def run_timers(self) -> None:
        """The timer task: wakes each parked batch at its deadline; runs until cancelled."""
        timers = self._timers
        parked = self._parked
        while True:
            now = self._now()
            while timers and timers[0][0] <= now:
                batch = parked.get(heapq.heappop(timers)[1])
                if batch is not None:
                    self.wake(batch)
            batch = None  # hold no batch while asleep
            next_deadline = timers[0][0] if timers else math.inf
            with trio.CancelScope(deadline=next_deadline) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None

    def close(self) -> None:
        """Let every parked batch go (their `park` raises ClosedResourceError)."""
        self.closed = True
        for batch in list(self._parked.values()):  # batches of other tasks
            self.wake(batch)
        self._timers.clear()
