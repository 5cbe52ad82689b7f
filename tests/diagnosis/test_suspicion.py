"""meshhealth.diagnosis.suspicion: the Lifeguard formula and the per-path state machine."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth import defaults
from meshhealth.diagnosis.suspicion import (
    PathSuspicion,
    SuspicionParams,
    confirm,
    observe,
    path_broken,
    remaining_suspicion_s,
    suspicion_floor_s,
    suspicion_params,
    suspicion_time_s,
)
from meshhealth.model import Reachability
from tests.repo_paths import REPO_ROOT

T0 = 1_800_000_000.0
P = SuspicionParams(floor_s=5.0, ceiling_s=30.0, confirmations_wanted=3, min_failures=2)


@pytest.mark.parametrize(
    ("cluster_size", "interval_s", "multiplier", "expected_s"),
    [
        (1, 10.0, 1.0, 5.0),  # log10 floored at 1: small clusters get the base floor
        (4, 10.0, 1.0, 5.0),
        (10, 10.0, 1.0, 5.0),
        (100, 10.0, 1.0, 10.0),
        (1000, 10.0, 1.0, 15.0),
        (1000, 1.0, 1.0, 1.5),
        (4, 10.0, 8.0, 40.0),  # an unwell agent waits up to 8x longer
        (0, 10.0, 1.0, 5.0),
    ],
)
def test_floor_scales_with_log10_of_the_cluster(
    cluster_size: int, interval_s: float, multiplier: float, expected_s: float
) -> None:
    got = suspicion_floor_s(cluster_size, interval_s, multiplier=multiplier)
    assert got == pytest.approx(expected_s)


def test_params_from_defaults() -> None:
    params = suspicion_params(4, 10.0)
    assert params.floor_s == pytest.approx(defaults.SUSPICION_FLOOR_INTERVALS * 10.0)
    assert params.ceiling_s == pytest.approx(defaults.SUSPICION_CEILING_FACTOR * params.floor_s)
    assert params.confirmations_wanted == defaults.SUSPICION_CONFIRMATIONS
    assert params.min_failures == defaults.SUSPICION_MIN_FAILURES >= 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cluster_size": 4, "interval_s": 0.0},
        {"cluster_size": 4, "interval_s": 10.0, "multiplier": 0.5},
        {"cluster_size": 4, "interval_s": 10.0, "beta": 0.5},
        {"cluster_size": 4, "interval_s": 10.0, "min_failures": 1},
        {"cluster_size": 4, "interval_s": 10.0, "confirmations_wanted": -1},
    ],
)
def test_params_refuse_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="suspicion"):
        suspicion_params(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("confirmations", "wanted", "expected_s"),
    [
        (0, 3, 30.0),  # nobody confirms: the ceiling
        (1, 3, 30.0 - 25.0 * math.log(2) / math.log(4)),  # 17.5
        (2, 3, 30.0 - 25.0 * math.log(3) / math.log(4)),
        (3, 3, 5.0),  # enough: the floor
        (7, 3, 5.0),  # more than enough: still the floor
        (0, 0, 5.0),  # nobody could confirm: no point waiting, the floor
        (1, 1, 5.0),
        (-1, 3, 30.0),
    ],
)
def test_time_shrinks_logarithmically_with_confirmations(
    confirmations: int, wanted: int, expected_s: float
) -> None:
    assert suspicion_time_s(confirmations, wanted, 5.0, 30.0) == pytest.approx(expected_s)


def test_remaining_is_time_minus_elapsed() -> None:
    assert remaining_suspicion_s(0, 3, 12.0, 5.0, 30.0) == pytest.approx(18.0)
    assert remaining_suspicion_s(3, 3, 12.0, 5.0, 30.0) == pytest.approx(-7.0)


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(
    st.integers(0, 20),
    st.integers(0, 20),
    st.floats(0.1, 100.0),
    st.floats(1.0, 10.0),
)
def test_time_is_bounded_and_never_grows_with_confirmations(
    confirmations: int, wanted: int, floor_s: float, beta: float
) -> None:
    ceiling_s = beta * floor_s
    now = suspicion_time_s(confirmations, wanted, floor_s, ceiling_s)
    more = suspicion_time_s(confirmations + 1, wanted, floor_s, ceiling_s)
    assert floor_s <= now <= ceiling_s + 1e-9
    assert more <= now + 1e-9


def _run(events: list[tuple[float, bool, int]], possible: int | None = None) -> list[Reachability]:
    """Feed (offset_s, ok, confirmations) results; the verdict after each."""
    state = PathSuspicion()
    verdicts = []
    for offset_s, ok, confirmations in events:
        confirmers = frozenset(f"c/n{i}" for i in range(confirmations))
        state = observe(
            state, ok=ok, now=T0 + offset_s, params=P, confirmers=confirmers,
            possible_confirmers=possible,
        )  # fmt: skip
        verdicts.append(state.verdict)
    return verdicts


OK, SUS, UNR = Reachability.REACHABLE, Reachability.SUSPECT, Reachability.UNREACHABLE


@pytest.mark.parametrize(
    ("events", "possible", "expected"),
    [
        # a single lost probe: suspect for one round, then ok again
        ([(0, True, 0), (10, False, 0), (20, True, 0)], None, [OK, SUS, OK]),
        # a dead target everyone sees: unreachable at the second failure
        ([(0, False, 3), (10, False, 3)], None, [SUS, UNR]),
        # confirmed at once but only one failure: still suspect however long
        ([(0, False, 3)], None, [SUS]),
        # nobody confirms: 30 s of failures (the 4th failure at 10 s intervals)
        ([(0, False, 0), (10, False, 0), (20, False, 0), (30, False, 0)], None,
         [SUS, SUS, SUS, UNR]),
        # one confirmation of three: 17.5 s, so the third failure
        ([(0, False, 1), (10, False, 1), (20, False, 1)], None, [SUS, SUS, UNR]),
        # nobody could confirm (2-node cluster): the floor, so the second failure
        ([(0, False, 0), (10, False, 0)], 0, [SUS, UNR]),
        # one of one possible confirmer confirmed: the floor
        ([(0, False, 1), (10, False, 1)], 1, [SUS, UNR]),
        # the second failure comes early (round jitter) but after the floor
        ([(0, False, 3), (8, False, 3)], None, [SUS, UNR]),
        # within the floor: not yet
        ([(0, False, 3), (4, False, 3), (6, False, 3)], None, [SUS, SUS, UNR]),
        # recovery: one success from unreachable is enough
        ([(0, False, 3), (10, False, 3), (20, True, 0)], None, [SUS, UNR, OK]),
        # stays unreachable while it keeps failing
        ([(0, False, 3), (10, False, 3), (20, False, 0)], None, [SUS, UNR, UNR]),
        # a success resets the run: the time starts again
        ([(0, False, 0), (10, False, 0), (20, True, 0), (25, False, 0), (40, False, 0),
          (55, False, 0)], None, [SUS, SUS, OK, SUS, SUS, UNR]),
        # the clock going backwards is not elapsed time
        ([(0, False, 3), (-50, False, 3)], None, [SUS, SUS]),
    ],
)  # fmt: skip
def test_state_machine(
    events: list[tuple[float, bool, int]], possible: int | None, expected: list[Reachability]
) -> None:
    assert _run(events, possible) == expected


def test_confirmations_accumulate_and_count_once() -> None:
    state = observe(PathSuspicion(), ok=False, now=T0, params=P, confirmers={"a"})
    state = observe(state, ok=False, now=T0 + 10, params=P, confirmers={"a", "b"})
    assert state.confirmers == frozenset({"a", "b"})
    assert state.failures == 2
    assert state.failing_since == T0
    # two of three: 30 - 25 * log 3 / log 4 = 10.2 s > 10 s, not yet
    assert state.verdict is Reachability.SUSPECT
    state = observe(state, ok=False, now=T0 + 11, params=P, confirmers={"b"})
    assert state.verdict is Reachability.UNREACHABLE
    assert state.since == T0 + 11


def test_confirm_between_probes_settles_a_suspect_path() -> None:
    state = observe(PathSuspicion(), ok=False, now=T0, params=P)
    state = observe(state, ok=False, now=T0 + 10, params=P)
    assert state.verdict is Reachability.SUSPECT
    later = confirm(state, now=T0 + 12, params=P, confirmers={"x", "y", "z"})
    assert later.verdict is Reachability.UNREACHABLE
    assert later.since == T0 + 12


def test_confirm_never_settles_after_one_failure_nor_touches_ok() -> None:
    state = observe(PathSuspicion(), ok=False, now=T0, params=P)
    later = confirm(state, now=T0 + 100, params=P, confirmers={"x", "y", "z"})
    assert later.verdict is Reachability.SUSPECT
    ok = observe(PathSuspicion(), ok=True, now=T0, params=P)
    assert confirm(ok, now=T0 + 100, params=P, confirmers={"x"}) == ok


def test_a_helper_that_reaches_the_target_settles_a_path_that_failed_twice() -> None:
    """The second opinion for a one-observer path: two failures in a row and a helper
    that reaches the target make it unreachable at once (not after the ceiling); one
    lost probe, an ok or an already unreachable path stay as they are."""
    once = observe(PathSuspicion(), ok=False, now=T0, params=P)
    assert path_broken(once, now=T0 + 1, params=P) == once
    twice = observe(once, ok=False, now=T0 + 2, params=P)
    assert twice.verdict is Reachability.SUSPECT  # 2 s < the floor: no verdict yet
    broken = path_broken(twice, now=T0 + 3, params=P)
    assert (broken.verdict, broken.since) == (Reachability.UNREACHABLE, T0 + 3)
    assert path_broken(broken, now=T0 + 9, params=P) == broken
    ok = observe(PathSuspicion(), ok=True, now=T0, params=P)
    assert path_broken(ok, now=T0 + 1, params=P) == ok


def test_ok_keeps_its_since() -> None:
    first = observe(PathSuspicion(), ok=True, now=T0, params=P)
    again = observe(first, ok=True, now=T0 + 10, params=P)
    assert first.since == again.since == T0
    assert again.verdict is Reachability.REACHABLE


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(
    st.lists(st.tuples(st.floats(0.0, 60.0), st.booleans(), st.integers(0, 5)), max_size=30),
    st.one_of(st.none(), st.integers(0, 5)),
)
def test_never_unreachable_without_min_failures_and_the_floor(
    steps: list[tuple[float, bool, int]], possible: int | None
) -> None:
    state = PathSuspicion()
    now = T0
    for gap_s, ok, confirmations in steps:
        now += gap_s
        before = state
        state = observe(
            state, ok=ok, now=now, params=P,
            confirmers=frozenset(str(i) for i in range(confirmations)),
            possible_confirmers=possible,
        )  # fmt: skip
        if ok:
            assert state.verdict is Reachability.REACHABLE
            continue
        expected = 1 if before.verdict is Reachability.REACHABLE else before.failures + 1
        assert state.failures == expected
        if state.verdict is Reachability.UNREACHABLE:
            assert state.failures >= P.min_failures
            assert state.failing_since is not None
            assert now - state.failing_since >= P.floor_s
        if before.verdict is Reachability.REACHABLE:
            assert state.verdict is Reachability.SUSPECT  # never straight to unreachable


def test_docs_show_the_defaults() -> None:
    """docs/diagnosis.md's table of suspicion defaults says what defaults.py holds."""
    import re

    doc = (REPO_ROOT / "docs" / "diagnosis.md").read_text()
    rows = dict(re.findall(r"^\| `(SUSPICION_\w+)`[^|]*\| ([\d.]+) \|", doc, re.MULTILINE))
    names = [n for n in dir(defaults) if n.startswith("SUSPICION_")]
    assert sorted(rows) == sorted(names)
    for name in names:
        assert float(rows[name]) == float(getattr(defaults, name)), name
