"""Local health awareness in the agent: is this agent itself the unwell one?

    monitor = LocalHealthMonitor(etcd_up=lambda: etcd.health.up, own=(cluster, node))
    monitor.note_lag(lag_s)            # the prober loop: how late it woke up
    state = monitor.after_round(report, now=time.time())
    state.score, state.degraded_since, state.reasons
    monitor.timeout_s(1.0)             # the probe timeout, stretched while unwell
    monitor.document()                 # the status document's `local_health`

The rules are meshhealth.diagnosis.local_health (pure): each round the agent scores
itself from the worst event-loop lag since the last round (how late the prober loop
woke up for it), the share of its targets failing at once (every probed path of a
target failed; itself left out) and etcd being unreachable. From the score:

- its probe timeouts and the suspicion time stretch by `score + 1` (at most 8x, never
  past PROBE_TIMEOUT_MAX_FRACTION of the interval: the round must still fit in it);
- from LOCAL_HEALTH_DEGRADED_SCORE it is degraded: its status says so and its published
  report carries `degraded_since`, so that others discount its failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.change_count import ChangeCount
from meshhealth.diagnosis.local_health import (
    LocalSignals,
    failing_points,
    health_score,
    is_degraded,
    lag_points,
    reason_codes,
    timeout_multiplier,
)
from meshhealth.documents.status_schema import LocalHealthDocument
from meshhealth.model import RoundReport
from meshhealth.timefmt import iso_time


@dataclass(frozen=True, slots=True)
class LocalHealthState:
    """The agent's own health after a round."""

    score: int = 0  # 0 (well) .. LOCAL_HEALTH_MAX_MULTIPLIER - 1
    multiplier: int = 1  # timeouts and suspicion time stretch by this
    degraded_since: float | None = None  # unix seconds; None: not degraded
    reasons: tuple[str, ...] = ()  # what the score comes from, in words
    loop_lag_s: float = 0.0
    codes: tuple[str, ...] = ()  # the reasons as codes (loop-lag, targets-failing, ...)

    @property
    def degraded(self) -> bool:
        return self.degraded_since is not None


def failing_targets(report: RoundReport, own: tuple[str, str] | None) -> tuple[int, int]:
    """(targets probed, targets whose every probed path failed), `own` left out."""
    by_target: dict[tuple[str, str], bool] = {}
    for path in report.paths:
        key = (path.path.cluster, path.path.node)
        if key == own:
            continue
        by_target[key] = by_target.get(key, False) or path.result.ok
    return len(by_target), sum(1 for ok in by_target.values() if not ok)


def local_health(
    signals: LocalSignals, *, now: float, before: LocalHealthState
) -> LocalHealthState:
    """The state from this round's signals (pure); `before` keeps `degraded_since`."""
    score = health_score(signals)
    reasons = []
    if lag_points(signals.loop_lag_s):
        reasons.append(f"event loop lagging {signals.loop_lag_s:.1f} s")
    if failing_points(signals.targets, signals.targets_failing):
        reasons.append(f"{signals.targets_failing} of its {signals.targets} targets failing")
    if not signals.etcd_reachable:
        reasons.append("etcd unreachable")
    since = None
    if is_degraded(score):
        since = before.degraded_since if before.degraded_since is not None else now
    return LocalHealthState(
        score,
        timeout_multiplier(score),
        since,
        tuple(reasons),
        signals.loop_lag_s,
        reason_codes(signals),
    )


class LocalHealthMonitor:
    """Keeps the agent's LocalHealthState, one update per round (see the module doc)."""

    def __init__(
        self,
        *,
        etcd_up: Callable[[], bool],
        own: tuple[str, str],
        interval_s: float = defaults.PROBE_INTERVAL_S,
    ) -> None:
        self._etcd_up = etcd_up
        self.own = own
        self.interval_s = interval_s
        self.state = LocalHealthState()
        self._lag_s = 0.0
        self._changes = ChangeCount()  # when `degraded` flips (`fit`, the aggregator claim)

    def note_lag(self, lag_s: float) -> None:
        """How late the loop woke up (the worst since the last round counts)."""
        self._lag_s = max(self._lag_s, lag_s)

    def after_round(self, report: RoundReport, *, now: float) -> LocalHealthState:
        targets, failing = failing_targets(report, self.own)
        signals = LocalSignals(self._lag_s, targets, failing, self._etcd_up())
        self._lag_s = 0.0
        before = self.state
        self.state = local_health(signals, now=now, before=before)
        if self.state.degraded != before.degraded:
            self._changes.bump()
        return self.state

    @property
    def fit(self) -> bool:
        """This agent may aggregate its cluster: it is not degraded."""
        return not self.state.degraded

    @property
    def changes(self) -> int:
        return self._changes.value

    async def wait_changed(self, seen: int) -> int:
        """Wait until `changes` differs from `seen` (`degraded` flipped); the new count."""
        return await self._changes.wait_changed(seen)

    def timeout_s(self, timeout_s: float) -> float:
        """`timeout_s` stretched by the multiplier, within the interval's bound."""
        bound_s = max(timeout_s, defaults.PROBE_TIMEOUT_MAX_FRACTION * self.interval_s)
        return min(timeout_s * self.state.multiplier, bound_s)

    def document(self) -> LocalHealthDocument:
        """The status document's `local_health`."""
        return {
            "score": self.state.score,
            "degraded": self.state.degraded,
            "degraded_since": iso_time(self.state.degraded_since),
            "reasons": list(self.state.reasons),
            "reason_codes": list(self.state.codes),
        }
