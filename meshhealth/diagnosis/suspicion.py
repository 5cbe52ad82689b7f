"""Suspicion per path: ok -> suspect -> unreachable (pure, explicit timestamps).

    params = suspicion_params(cluster_size=4, interval_s=10.0)
    state = observe(PathSuspicion(), ok=False, now=t0, params=params)   # suspect
    state = observe(state, ok=False, now=t0 + 10, params=params,
                    confirmers=frozenset({"c/node2"}), possible_confirmers=2)

A path's verdict is a `Reachability` (meshhealth.model): one failure makes it
`suspect`; it becomes `unreachable` after `min_failures` failures in a row *and* the
suspicion time, which shrinks from a ceiling to a floor as independent confirmations
arrive (Lifeguard's formula, written anew; `multiplier` is the local health factor).
One success brings it back to `ok`. docs/diagnosis.md gives the formula and why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from meshhealth import defaults
from meshhealth.model import Reachability


@dataclass(frozen=True, slots=True)
class SuspicionParams:
    floor_s: float  # the shortest suspicion time (enough confirmations)
    ceiling_s: float  # the longest (no confirmation at all)
    confirmations_wanted: int  # confirmations that bring the time down to the floor
    min_failures: int  # failures in a row before `unreachable`, whatever the time


def suspicion_floor_s(
    cluster_size: int,
    interval_s: float,
    *,
    alpha: float = defaults.SUSPICION_FLOOR_INTERVALS,
    multiplier: float = 1.0,
) -> float:
    """alpha * max(1, log10(N)) probe intervals, stretched by the local health factor."""
    if interval_s <= 0 or alpha < 0 or multiplier < 1:
        raise ValueError(
            f"suspicion floor: interval_s {interval_s} must be > 0, alpha {alpha} >= 0, "
            f"multiplier {multiplier} >= 1"
        )
    node_scale = max(1.0, math.log10(max(1, cluster_size)))
    return alpha * node_scale * interval_s * multiplier


def suspicion_params(
    cluster_size: int,
    interval_s: float,
    *,
    multiplier: float = 1.0,
    alpha: float = defaults.SUSPICION_FLOOR_INTERVALS,
    beta: float = defaults.SUSPICION_CEILING_FACTOR,
    confirmations_wanted: int = defaults.SUSPICION_CONFIRMATIONS,
    min_failures: int = defaults.SUSPICION_MIN_FAILURES,
) -> SuspicionParams:
    """The floor, ceiling and thresholds for a cluster of `cluster_size` nodes."""
    if beta < 1 or confirmations_wanted < 0 or min_failures < 2:
        raise ValueError(
            f"suspicion: beta {beta} must be >= 1, confirmations {confirmations_wanted} "
            f">= 0, min_failures {min_failures} >= 2 (never from one failure)"
        )
    floor_s = suspicion_floor_s(cluster_size, interval_s, alpha=alpha, multiplier=multiplier)
    return SuspicionParams(floor_s, beta * floor_s, confirmations_wanted, min_failures)


def suspicion_time_s(confirmations: int, wanted: int, floor_s: float, ceiling_s: float) -> float:
    """How long a path must keep failing, given `confirmations` of `wanted` (Lifeguard).

    The time falls logarithmically from the ceiling (no confirmation) to the floor
    (`wanted` or more); with nothing to wait for (`wanted` 0) it is the floor.
    """
    if wanted <= 0:
        return floor_s
    confirmations = min(max(confirmations, 0), wanted)
    fraction = math.log(confirmations + 1) / math.log(wanted + 1)
    return max(floor_s, ceiling_s - fraction * (ceiling_s - floor_s))


def remaining_suspicion_s(
    confirmations: int, wanted: int, elapsed_s: float, floor_s: float, ceiling_s: float
) -> float:
    """Time left before `unreachable` after failing for `elapsed_s`; <= 0: it is due."""
    return suspicion_time_s(confirmations, wanted, floor_s, ceiling_s) - elapsed_s


@dataclass(frozen=True, slots=True)
class PathSuspicion:
    """One path's suspicion state (observer -> target, one path kind)."""

    verdict: Reachability = Reachability.REACHABLE
    since: float | None = None  # when the verdict was entered; None: never probed
    failing_since: float | None = None  # first failure of the current run
    failures: int = 0  # failures in a row
    confirmers: frozenset[str] = field(default_factory=frozenset)  # distinct, this run


def _wanted(params: SuspicionParams, possible_confirmers: int | None) -> int:
    if possible_confirmers is None:
        return params.confirmations_wanted
    return min(params.confirmations_wanted, max(possible_confirmers, 0))


def _settle(
    state: PathSuspicion, now: float, params: SuspicionParams, possible: int | None
) -> PathSuspicion:
    """suspect -> unreachable when the failures and the time are both there."""
    if state.verdict is not Reachability.SUSPECT or state.failing_since is None:
        return state
    if state.failures < params.min_failures:
        return state
    elapsed_s = max(0.0, now - state.failing_since)
    left_s = remaining_suspicion_s(
        len(state.confirmers), _wanted(params, possible), elapsed_s, params.floor_s,
        params.ceiling_s,
    )  # fmt: skip
    if left_s > 0:
        return state
    return replace(state, verdict=Reachability.UNREACHABLE, since=now)


def observe(
    state: PathSuspicion,
    *,
    ok: bool,
    now: float,
    params: SuspicionParams,
    confirmers: Iterable[str] = (),
    possible_confirmers: int | None = None,
) -> PathSuspicion:
    """The state after one probe result at unix time `now`.

    `confirmers`: who independently saw the target fail since (ids, counted once each;
    the caller leaves itself out). `possible_confirmers`: how many could have (other
    observers of the target plus peers asked for an indirect probe); None: as many as
    wanted.
    """
    if ok:
        if state.verdict is Reachability.REACHABLE and state.since is not None:
            return state
        return PathSuspicion(Reachability.REACHABLE, since=now)
    if state.verdict is Reachability.REACHABLE:
        suspect = PathSuspicion(
            Reachability.SUSPECT, since=now, failing_since=now, failures=1,
            confirmers=frozenset(confirmers),
        )  # fmt: skip
        return _settle(suspect, now, params, possible_confirmers)
    failing = replace(
        state, failures=state.failures + 1, confirmers=state.confirmers | frozenset(confirmers)
    )
    return _settle(failing, now, params, possible_confirmers)


def confirm(
    state: PathSuspicion,
    *,
    now: float,
    params: SuspicionParams,
    confirmers: Iterable[str],
    possible_confirmers: int | None = None,
) -> PathSuspicion:
    """New confirmations between probes (another observer's report, an indirect answer).

    They may make a suspect path unreachable now, if it has already failed
    `min_failures` times; a path that is ok or unreachable is left as it is.
    """
    if state.verdict is not Reachability.SUSPECT:
        return state
    more = replace(state, confirmers=state.confirmers | frozenset(confirmers))
    return _settle(more, now, params, possible_confirmers)


def path_broken(state: PathSuspicion, *, now: float, params: SuspicionParams) -> PathSuspicion:
    """A second opinion for a path only this node observes: a helper's indirect probe
    reached the target while this path failed `min_failures` times in a row, so the
    path from this node is broken, not the target: `unreachable` now, without waiting
    for confirmations no other observer can give. Fewer failures (one lost probe, this
    node's own noise) or a path that is not suspect: unchanged. The caller asks only
    while this agent is well (an unwell observer's failures are its own)."""
    if state.verdict is not Reachability.SUSPECT or state.failures < params.min_failures:
        return state
    return replace(state, verdict=Reachability.UNREACHABLE, since=now)
