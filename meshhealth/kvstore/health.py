"""etcd reachability as the agent sees it, and request counters."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import trio


class EtcdHealth:
    """Whether etcd answers, as decided by the liveness check and by failed requests.

    `up` starts False ("not checked yet") until the first liveness check answers.
    `since` is the unix time of the last change, `last_error` the most recent failure
    (one line), `answered_at` the trio time of the newest answer (any request's).
    `wait_until(up)` / `wait_changed()` let tasks react to changes.
    Only touched from the trio thread.
    """

    def __init__(self) -> None:
        self.up = False
        self.since = time.time()
        self.last_error = "not checked yet"
        self.changes = 0
        self.answered_at = -math.inf
        self._changed = trio.Event()

    def set_up(self) -> None:
        """etcd answered (a request or the liveness check)."""
        self.answered_at = trio.current_time()
        if not self.up:
            self._set(True)

    def set_down(self, error: str) -> None:
        self.last_error = error
        if self.up or self.changes == 0:
            self._set(False)

    def _set(self, up: bool) -> None:
        self.up = up
        self.since = time.time()
        self.changes += 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        """Return at the next change of `up`."""
        await self._changed.wait()

    async def wait_until(self, up: bool) -> None:
        """Return as soon as `self.up == up` (at once if it already is)."""
        while self.up != up:
            await self._changed.wait()


@dataclass(slots=True)
class EtcdStats:
    """Counters for metrics: requests sent, requests failed, watch streams (re)opened,
    reconnections with new TLS files, tokens asked for, tokens refused by etcd."""

    requests: int = 0
    errors: int = 0
    watch_streams: int = 0
    watch_threads_busy: int = 0  # blocking reads of watch streams in flight (threads)
    reconnects: int = 0
    authentications: int = 0
    token_refreshes: int = 0
    oversized_values: int = 0  # values too large to receive, left out of a listing
