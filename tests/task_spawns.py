"""A trio instrument that counts the tasks a piece of code spawns (for batching tests)."""

from __future__ import annotations

import trio


class SpawnCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1
