"""Token buckets per key (a requester's address): how often each may ask. Pure.

    buckets = TokenBuckets(rate_per_s=1.0, burst=3, max_keys=1024)
    if buckets.take("10.0.0.7", now=trio.current_time()): ...   # else: 429

Each key has a bucket of `burst` tokens that refills at `rate_per_s` (never above
`burst`); a request takes one token or is refused. A key never seen starts full. At
most `max_keys` buckets are kept: when a new key comes and the table is full, buckets
that are full again (idle long enough to have refilled: forgetting them changes
nothing) are dropped first, then the least recently used one, so a flood of source
addresses bounds memory and, at worst, gives a forgotten requester a fresh bucket.
Time is an argument (`now`, any monotonic clock, seconds); a clock that goes back is
treated as standing still.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Float sums of `elapsed * rate` land a hair short of a whole token for a requester that
# waits exactly 1/rate: that much short still counts as a token.
_ROUNDING = 1e-9


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float  # `now` of the last refill


class TokenBuckets:
    """One token bucket per key (see the module docstring)."""

    def __init__(self, *, rate_per_s: float, burst: int, max_keys: int) -> None:
        if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
            raise ValueError(f"rate_per_s must be a positive number, got {rate_per_s}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_keys = max_keys
        # Insertion order is use order: a key is moved to the end when it takes.
        self._buckets: dict[str, _Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def tokens(self, key: str, now: float) -> float:
        """The tokens `key` has at `now` (a key never seen: `burst`)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return float(self.burst)
        return self._refilled(bucket, now)

    def take(self, key: str, now: float) -> bool:
        """Take one token of `key`'s bucket; False (nothing taken) when it has none."""
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            self._make_room(now)
            bucket = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = self._refilled(bucket, now)
            bucket.updated = max(bucket.updated, now)
        self._buckets[key] = bucket  # the most recently used, last
        if bucket.tokens < 1.0 - _ROUNDING:
            return False
        bucket.tokens = max(bucket.tokens - 1.0, 0.0)
        return True

    def _refilled(self, bucket: _Bucket, now: float) -> float:
        elapsed_s = max(now - bucket.updated, 0.0)
        return min(float(self.burst), bucket.tokens + elapsed_s * self.rate_per_s)

    def _make_room(self, now: float) -> None:
        if len(self._buckets) < self.max_keys:
            return
        full = [k for k, b in self._buckets.items() if self._refilled(b, now) >= self.burst]
        for key in full:
            del self._buckets[key]
        while len(self._buckets) >= self.max_keys:
            del self._buckets[next(iter(self._buckets))]  # the least recently used
