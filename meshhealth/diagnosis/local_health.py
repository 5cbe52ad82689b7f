"""Local health awareness: is this agent itself the unwell one? (pure)

An agent whose event loop lags, whose targets mostly fail at once, or which cannot reach
etcd suspects itself first (Lifeguard's "local health awareness"). From what it measures
it gets a score (0 .. LOCAL_HEALTH_MAX_MULTIPLIER - 1), and from the score:

- a factor (score + 1, at most 8x) that stretches its probe timeouts and suspicion time,
  so that a starved agent does not call its peers unreachable for its own slowness;
- a `degraded` flag for its reports, so that diagnosis discounts its failures (its
  successes still count: a reply that came back is proof whoever received it).

    score = health_score(LocalSignals(loop_lag_s=0.6, targets=10, targets_failing=9,
                                      etcd_reachable=True))
    timeout_s = stretch_s(1.0, score)
    degraded = is_degraded(score)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshhealth import defaults


@dataclass(frozen=True, slots=True)
class LocalSignals:
    """What the agent measures about itself, now."""

    loop_lag_s: float  # how late the scheduler's last wake-up was
    targets: int  # paths (or targets) probed in the last round
    targets_failing: int  # of which failed
    etcd_reachable: bool


def lag_points(loop_lag_s: float, *, lag_s: float = defaults.LOCAL_HEALTH_LAG_S) -> int:
    """0 below `lag_s`; 1 at it, one more per doubling, at most 3."""
    if not loop_lag_s >= lag_s:  # also NaN
        return 0
    if loop_lag_s >= 4 * lag_s:  # also inf, and before the log overflows
        return 3
    return 1 + math.floor(math.log2(loop_lag_s / lag_s))


def failing_points(
    targets: int,
    targets_failing: int,
    *,
    share: float = defaults.LOCAL_HEALTH_FAILING_SHARE,
    min_targets: int = defaults.LOCAL_HEALTH_MIN_TARGETS,
) -> int:
    """3 when at least `share` of at least `min_targets` targets fail at once, else 0."""
    if targets < min_targets or targets <= 0:
        return 0
    return 3 if min(targets_failing, targets) / targets >= share else 0


def health_score(
    signals: LocalSignals, *, max_multiplier: int = defaults.LOCAL_HEALTH_MAX_MULTIPLIER
) -> int:
    """0 (well) .. max_multiplier - 1 (as unwell as we count)."""
    points = lag_points(signals.loop_lag_s) + failing_points(
        signals.targets, signals.targets_failing
    )
    if not signals.etcd_reachable:
        points += defaults.LOCAL_HEALTH_ETCD_POINTS
    return max(0, min(points, max_multiplier - 1))


def timeout_multiplier(
    score: int, *, max_multiplier: int = defaults.LOCAL_HEALTH_MAX_MULTIPLIER
) -> int:
    """score + 1, between 1 and `max_multiplier` (Lifeguard: timeouts up to 8x)."""
    return max(1, min(score + 1, max_multiplier))


def stretch_s(timeout_s: float, score: int) -> float:
    """`timeout_s` stretched for an agent at `score`."""
    return timeout_s * timeout_multiplier(score)


# Why an agent is unwell, as its report publishes them (`degraded_reasons`): diagnosis
# tells "my egress is blocked" (targets-failing alone, while others reach it) from "I am
# unwell" (loop-lag, etcd-unreachable) by them.
REASON_LOOP_LAG = "loop-lag"
REASON_TARGETS_FAILING = "targets-failing"
REASON_ETCD_UNREACHABLE = "etcd-unreachable"
REASON_CODES: tuple[str, ...] = (REASON_LOOP_LAG, REASON_TARGETS_FAILING, REASON_ETCD_UNREACHABLE)


def reason_codes(signals: LocalSignals) -> tuple[str, ...]:
    """The signals that score points, as codes (in REASON_CODES order)."""
    codes = []
    if lag_points(signals.loop_lag_s):
        codes.append(REASON_LOOP_LAG)
    if failing_points(signals.targets, signals.targets_failing):
        codes.append(REASON_TARGETS_FAILING)
    if not signals.etcd_reachable:
        codes.append(REASON_ETCD_UNREACHABLE)
    return tuple(codes)


def is_degraded(score: int, *, degraded_score: int = defaults.LOCAL_HEALTH_DEGRADED_SCORE) -> bool:
    """Whether this agent marks its reports degraded."""
    return score >= degraded_score
