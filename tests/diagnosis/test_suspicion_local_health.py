"""meshhealth.diagnosis.local_health: score, timeout factor and the degraded flag."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth import defaults
from meshhealth.diagnosis.local_health import (
    LocalSignals,
    failing_points,
    health_score,
    is_degraded,
    lag_points,
    stretch_s,
    timeout_multiplier,
)


@pytest.mark.parametrize(
    ("lag_s", "points"),
    [(0.0, 0), (0.01, 0), (0.249, 0), (0.25, 1), (0.49, 1), (0.5, 2), (0.99, 2), (1.0, 3),
     (30.0, 3), (float("nan"), 0), (-1.0, 0)],
)  # fmt: skip
def test_lag_points(lag_s: float, points: int) -> None:
    assert lag_points(lag_s) == points


@pytest.mark.parametrize(
    ("targets", "failing", "points"),
    [
        (0, 0, 0),
        (2, 2, 0),  # too few targets to say anything about ourselves
        (3, 2, 0),  # 2 of 3: both sides of a 2-vs-2 partition see this
        (3, 3, 3),
        (10, 7, 0),
        (10, 8, 3),
        (10, 12, 3),
    ],
)
def test_failing_points(targets: int, failing: int, points: int) -> None:
    assert failing_points(targets, failing) == points


def _signals(
    lag_s: float = 0.0, targets: int = 10, failing: int = 0, etcd: bool = True
) -> LocalSignals:
    return LocalSignals(loop_lag_s=lag_s, targets=targets, targets_failing=failing,
                        etcd_reachable=etcd)  # fmt: skip


@pytest.mark.parametrize(
    ("signals", "score", "multiplier", "degraded"),
    [
        (_signals(), 0, 1, False),  # well
        (_signals(lag_s=0.3), 1, 2, False),  # a little late: slower, not degraded
        (_signals(lag_s=0.6), 2, 3, True),  # starved
        (_signals(etcd=False), 2, 3, True),  # cut off from etcd
        (_signals(failing=9), 3, 4, True),  # most of our targets at once: likely us
        (_signals(failing=5), 0, 1, False),  # half: could be a partition, not us
        (_signals(lag_s=5.0, failing=10, etcd=False), 7, 8, True),  # capped at 8x
    ],
)
def test_score_multiplier_degraded(
    signals: LocalSignals, score: int, multiplier: int, degraded: bool
) -> None:
    assert health_score(signals) == score
    assert timeout_multiplier(score) == multiplier
    assert is_degraded(score) is degraded
    assert stretch_s(1.5, score) == pytest.approx(1.5 * multiplier)


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(
    st.floats(allow_nan=True),
    st.integers(-5, 1000),
    st.integers(-5, 1000),
    st.booleans(),
)
def test_score_and_multiplier_stay_in_bounds(
    lag_s: float, targets: int, failing: int, etcd: bool
) -> None:
    score = health_score(LocalSignals(lag_s, targets, failing, etcd))
    assert 0 <= score <= defaults.LOCAL_HEALTH_MAX_MULTIPLIER - 1
    assert 1 <= timeout_multiplier(score) <= defaults.LOCAL_HEALTH_MAX_MULTIPLIER


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_more_lag_never_lowers_the_score(a_s: float, b_s: float) -> None:
    low, high = sorted((a_s, b_s))
    assert health_score(_signals(lag_s=low)) <= health_score(_signals(lag_s=high))
