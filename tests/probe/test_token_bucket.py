"""Per-requester token buckets (meshhealth.probe.token_bucket): tables and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.probe.token_bucket import TokenBuckets


def _takes(buckets: TokenBuckets, key: str, times: list[float]) -> list[bool]:
    return [buckets.take(key, now) for now in times]


@pytest.mark.parametrize(
    ("rate_per_s", "burst", "times", "expected"),
    [
        # A new key starts full: `burst` at once, then refused.
        (1.0, 3, [0, 0, 0, 0], [True, True, True, False]),
        # One token per second comes back.
        (1.0, 1, [0, 0.5, 1.0, 1.5, 2.0], [True, False, True, False, True]),
        # Idle for long: the bucket is full again, not fuller.
        (1.0, 2, [0, 0, 100, 100, 100], [True, True, True, True, False]),
        # Half a token per second: two seconds per request.
        (0.5, 1, [0, 1, 2, 3, 4], [True, False, True, False, True]),
        # A clock that goes back is a clock that stands still.
        (1.0, 1, [10, 5, 10.5, 11], [True, False, False, True]),
    ],
)
def test_take_table(
    rate_per_s: float, burst: int, times: list[float], expected: list[bool]
) -> None:
    buckets = TokenBuckets(rate_per_s=rate_per_s, burst=burst, max_keys=8)
    assert _takes(buckets, "10.0.0.1", times) == expected


def test_keys_are_independent() -> None:
    buckets = TokenBuckets(rate_per_s=1.0, burst=1, max_keys=8)
    assert buckets.take("a", 0)
    assert not buckets.take("a", 0)
    assert buckets.take("b", 0)
    assert buckets.tokens("a", 0) == 0.0
    assert buckets.tokens("never", 0) == 1.0


def test_full_table_forgets_full_buckets_then_the_least_recently_used() -> None:
    buckets = TokenBuckets(rate_per_s=1.0, burst=2, max_keys=2)
    assert buckets.take("a", 0)
    assert buckets.take("b", 0)
    assert buckets.take("a", 0.1)  # a is now the most recently used, and empty
    assert buckets.take("c", 0.2)  # the table is full: b (least recently used) goes
    assert len(buckets) == 2
    assert buckets.tokens("a", 0.2) < 1.0  # a kept its (empty) bucket
    assert buckets.tokens("b", 0.2) == 2.0  # b forgotten: a fresh bucket


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate_per_s": 0.0, "burst": 1, "max_keys": 1},
        {"rate_per_s": float("inf"), "burst": 1, "max_keys": 1},
        {"rate_per_s": 1.0, "burst": 0, "max_keys": 1},
        {"rate_per_s": 1.0, "burst": 1, "max_keys": 0},
    ],
)
def test_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        TokenBuckets(**kwargs)  # type: ignore[arg-type]


RATES = st.floats(min_value=0.01, max_value=100.0)
BURSTS = st.integers(min_value=1, max_value=20)
STEPS = st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=1, max_size=60)


@settings(deadline=None)
@given(rate_per_s=RATES, burst=BURSTS, steps=STEPS)
def test_never_more_than_burst_plus_rate_times_elapsed(
    rate_per_s: float, burst: int, steps: list[float]
) -> None:
    """The token bucket's contract: over any run, granted <= burst + rate * elapsed."""
    buckets = TokenBuckets(rate_per_s=rate_per_s, burst=burst, max_keys=4)
    now = 0.0
    granted = 0
    for step in steps:
        now += step
        granted += buckets.take("k", now)
        assert granted <= burst + rate_per_s * now + 1e-9
        assert 0.0 <= buckets.tokens("k", now) <= burst


@settings(deadline=None)
@given(rate_per_s=RATES, burst=BURSTS, gap_s=st.floats(min_value=0.0, max_value=1000.0))
def test_a_patient_requester_is_served(rate_per_s: float, burst: int, gap_s: float) -> None:
    """One who waits 1/rate between requests is never refused."""
    buckets = TokenBuckets(rate_per_s=rate_per_s, burst=burst, max_keys=4)
    now = gap_s
    for _ in range(10):
        assert buckets.take("k", now)
        now += 1.0 / rate_per_s


@settings(deadline=None)
@given(
    keys=st.lists(st.sampled_from("abcdefghij"), min_size=1, max_size=80),
    max_keys=st.integers(min_value=1, max_value=5),
)
def test_table_never_exceeds_max_keys(keys: list[str], max_keys: int) -> None:
    buckets = TokenBuckets(rate_per_s=1.0, burst=1, max_keys=max_keys)
    for i, key in enumerate(keys):
        buckets.take(key, i * 0.01)
        assert len(buckets) <= max_keys
