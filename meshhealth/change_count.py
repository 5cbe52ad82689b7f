"""A count of changes and a wait for the next one: what a component that others follow
exposes instead of callbacks or polling (pure trio).

    self._changes = ChangeCount()
    self._changes.bump()                       # the owner, after a change
    seen = await component.wait_changed(seen)  # a reader: returns at once if missed

A reader keeps the count it last saw; a change it was not waiting for is not lost.
"""

from __future__ import annotations

import trio


class ChangeCount:
    """`value` moves by one at each `bump`; `wait_changed(seen)` returns the new value
    once it differs from `seen`."""

    __slots__ = ("_event", "value")

    def __init__(self) -> None:
        self.value = 0
        self._event = trio.Event()

    def bump(self) -> None:
        self.value += 1
        self._event.set()
        self._event = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        while self.value == seen:
            await self._event.wait()
        return self.value
