"""Retry delays: doubling from min_s to max_s, with optional jitter. Pure (no sleeping).

One implementation for every retry loop: etcd reconnects and watch restarts (kvstore,
registrar, discovery, publisher, clustermesh) and health-endpoint restarts (agent.endpoint).
"""

from __future__ import annotations

import random


class Backoff:
    """Doubling delays with jitter: min_s, 2*min_s, ... up to max_s. Pure (no sleeping)."""

    def __init__(self, min_s: float, max_s: float, *, jitter: float = 0.2) -> None:
        if not 0 < min_s <= max_s:
            raise ValueError(f"back-off needs 0 < min_s <= max_s, got {min_s}, {max_s}")
        self.min_s = min_s
        self.max_s = max_s
        self.jitter = jitter
        self._next_s = min_s

    def reset(self) -> None:
        self._next_s = self.min_s

    def next_delay_s(self) -> float:
        """The next delay (with up to `jitter` fraction removed at random)."""
        delay = self._next_s
        self._next_s = min(self.max_s, self._next_s * 2)
        if not self.jitter:
            return delay
        return delay * (1.0 - self.jitter * random.random())
