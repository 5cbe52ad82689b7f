"""Suspicion per own path in the agent (meshhealth.agent.path_verdicts): tables, a
property over random result sequences, and the timer under trio's MockClock."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.agent.path_verdicts import PathVerdicts, source_id
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.documents.status import LocalNode
from meshhealth.model import (
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Reachability,
    RoundReport,
    Target,
    TargetType,
)

V = Reachability
INTERVAL_S = 10.0
NODES = [Target("c", f"n{i}", f"127.0.0.{i}", None) for i in range(1, 5)]  # 4 nodes
NODES8 = [Target("c", f"n{i}", f"127.0.0.{i}", None) for i in range(1, 9)]  # 3 can confirm
PATH = PathKey("c", "n2", TargetType.NODE, Protocol.ICMP)
HTTP = PathKey("c", "n2", TargetType.NODE, Protocol.HTTP)


def tracker(
    targets: list[Target] = NODES, failing: Callable[[str, str], int] = lambda cluster, node: 0
) -> PathVerdicts:
    verdicts = PathVerdicts(interval_s=INTERVAL_S, failing_observers=failing, clock=lambda: 0.0)
    verdicts.finish_round(targets)
    return verdicts


def test_params_follow_the_probe_set_and_local_health() -> None:
    verdicts = tracker()
    assert verdicts.params.floor_s == 5.0  # 0.5 x max(1, log10(4)) x 10 s
    assert verdicts.params.ceiling_s == 30.0
    assert verdicts.possible_confirmers == 2  # 4 nodes, not us, not the target
    verdicts.set_multiplier(3)
    assert verdicts.params.floor_s == 15.0
    assert verdicts.params.ceiling_s == 90.0


# (ok?, at) results of one path -> its verdict after each, no confirmation (30 s).
LONE_FAILURES = [
    ((False, 0.0), V.SUSPECT),  # one failure: never unreachable
    ((False, 10.0), V.SUSPECT),  # two, 10 s < 30 s
    ((False, 20.0), V.SUSPECT),
    ((False, 30.0), V.UNREACHABLE),  # failing for the ceiling
    ((False, 40.0), V.UNREACHABLE),
    ((True, 50.0), V.REACHABLE),  # one success is enough
    ((False, 60.0), V.SUSPECT),
]


def test_a_lone_observer_waits_the_ceiling() -> None:
    verdicts = tracker()
    for (ok, at), expected in LONE_FAILURES:
        assert verdicts.observe(PATH, ok=ok, now=at).verdict is expected, at


@pytest.mark.parametrize(
    ("confirmers", "due_s"),
    [(0, 30.0), (1, 30.0 - 25.0 * 0.5), (2, 30.0 - 25.0 * 0.792481), (3, 5.0), (5, 5.0)],
)
def test_confirmations_shorten_the_time(confirmers: int, due_s: float) -> None:
    verdicts = tracker(NODES8)
    verdicts.observe(PATH, ok=False, now=0.0)
    verdicts.observe(PATH, ok=False, now=1.0)
    for i in range(confirmers):
        verdicts.confirm("c", "n2", source_id("c", f"n{3 + i}"), now=1.0)
    state = verdicts.get(PATH)
    assert state is not None
    if due_s <= 1.0:
        assert state.verdict is V.UNREACHABLE
    else:
        assert verdicts.due_at(state) == pytest.approx(due_s, abs=0.01)


def test_a_confirmer_counts_once_and_only_for_failing_paths() -> None:
    verdicts = tracker()
    verdicts.observe(PATH, ok=False, now=0.0)
    verdicts.observe(HTTP, ok=True, now=0.0)
    assert verdicts.confirm("c", "n2", "c/n3", now=1.0) == []
    assert verdicts.confirm("c", "n2", "c/n3", now=2.0) == []
    state = verdicts.get(PATH)
    assert state is not None and state.confirmers == frozenset({"c/n3"})
    http = verdicts.get(HTTP)
    assert http is not None and http.verdict is V.REACHABLE and http.confirmers == frozenset()


async def test_confirmations_settle_a_path_that_failed_twice() -> None:
    verdicts = tracker()
    verdicts.observe(PATH, ok=False, now=0.0)
    verdicts.observe(PATH, ok=False, now=10.0)
    with trio.move_on_after(0) as waiting:  # results are reported with their round
        await verdicts.changed_between_rounds()
    assert waiting.cancelled_caught
    # 2 possible confirmers in 4 nodes: both of them bring it down to the floor (5 s)
    assert verdicts.confirm("c", "n2", "c/n3", now=11.0) == []
    assert verdicts.confirm("c", "n2", "c/n4", now=11.0) == [PATH]
    assert await verdicts.changed_between_rounds() == [PATH]
    assert verdicts.counts()[V.UNREACHABLE] == 1


def test_two_nodes_wait_the_floor_not_the_ceiling() -> None:
    verdicts = tracker(NODES[:2])
    assert verdicts.possible_confirmers == 0
    verdicts.observe(PATH, ok=False, now=0.0)
    assert verdicts.observe(PATH, ok=False, now=5.0).verdict is V.UNREACHABLE


def test_nodes_that_left_are_forgotten_and_snapshots_are_stable() -> None:
    verdicts = tracker()
    verdicts.observe(PATH, ok=False, now=0.0)
    first = verdicts.snapshot()
    assert verdicts.snapshot() is first  # nothing changed: the same object
    assert first[PATH].verdict is V.SUSPECT
    assert verdicts.finish_round([NODES[0], NODES[2]]) == [PATH]
    assert PATH not in verdicts.snapshot()
    assert PATH in first  # a snapshot is never changed


RESULTS = st.lists(
    st.tuples(st.booleans(), st.floats(min_value=0.0, max_value=40.0), st.integers(0, 3)),
    max_size=30,
)


@settings(deadline=None)
@given(RESULTS)
def test_never_unreachable_without_two_failures_and_the_floor(
    steps: list[tuple[bool, float, int]],
) -> None:
    verdicts = tracker()
    now = 0.0
    failures = 0
    failing_since: float | None = None
    for ok, gap_s, confirmers in steps:
        now += gap_s
        state = verdicts.observe(PATH, ok=ok, now=now)
        for i in range(confirmers):
            verdicts.confirm("c", "n2", f"c/n{3 + i}", now=now)
        state = verdicts.get(PATH) or state
        if ok:
            failures, failing_since = 0, None
            assert state.verdict is V.REACHABLE
            continue
        failures += 1
        failing_since = now if failing_since is None else failing_since
        if failures < 2 or now - failing_since < verdicts.params.floor_s:
            assert state.verdict is V.SUSPECT
        if now - failing_since >= verdicts.params.ceiling_s and failures >= 2:
            assert state.verdict is V.UNREACHABLE


async def test_the_timer_settles_between_rounds(autojump_clock: trio.testing.MockClock) -> None:
    """With one confirmation the time is 17.5 s: the path turns unreachable then, not
    at the next probe (20 s)."""
    changes: list[tuple[float, list[PathKey]]] = []
    verdicts = PathVerdicts(
        interval_s=INTERVAL_S, failing_observers=lambda cluster, node: 0, clock=trio.current_time
    )
    verdicts.finish_round(NODES8)

    async def follow() -> None:
        while True:
            paths = await verdicts.changed_between_rounds()
            changes.append((trio.current_time(), paths))

    async with trio.open_nursery() as nursery:
        await nursery.start(verdicts.run)
        nursery.start_soon(follow)
        start = trio.current_time()
        verdicts.observe(PATH, ok=False)
        await trio.sleep(10.0)
        verdicts.observe(PATH, ok=False)
        verdicts.confirm("c", "n2", "c/n3")
        await trio.sleep(5.0)
        state = verdicts.get(PATH)
        assert state is not None and state.verdict is V.SUSPECT
        await trio.sleep(5.0)
        state = verdicts.get(PATH)
        assert state is not None and state.verdict is V.UNREACHABLE
        assert state.since == pytest.approx(start + 17.5)
        assert [paths for _, paths in changes] == [[PATH]]
        nursery.cancel_scope.cancel()


async def test_the_timer_follows_a_longer_time_when_the_agent_is_unwell(
    autojump_clock: trio.testing.MockClock,
) -> None:
    verdicts = PathVerdicts(
        interval_s=INTERVAL_S, failing_observers=lambda cluster, node: 0, clock=trio.current_time
    )
    verdicts.finish_round(NODES)
    async with trio.open_nursery() as nursery:
        await nursery.start(verdicts.run)
        start = trio.current_time()
        verdicts.observe(PATH, ok=False)
        await trio.sleep(10.0)
        verdicts.observe(PATH, ok=False)
        verdicts.set_multiplier(2)  # ceiling 60 s now
        await trio.sleep(25.0)
        state = verdicts.get(PATH)
        assert state is not None and state.verdict is V.SUSPECT
        await trio.sleep(30.0)
        state = verdicts.get(PATH)
        assert state is not None and state.verdict is V.UNREACHABLE
        assert state.since == pytest.approx(start + 60.0)
        nursery.cancel_scope.cancel()


def test_the_record_shows_each_paths_verdict_in_the_status_nodes() -> None:
    """ProbeResults feeds each result to the verdicts; the status `nodes` show them as
    of the finished round, and are built again when a verdict changes between rounds."""
    local = LocalNode("c", "n1", "127.0.0.1", None)
    verdicts = PathVerdicts(
        interval_s=INTERVAL_S, failing_observers=lambda cluster, node: 0, clock=lambda: 1000.0
    )
    results = ProbeResults(local, window=10, verdicts=verdicts)
    lost = ProbeResult(ProbeStatus.TIMEOUT, 1000.0, (), sent=3)
    reports = tuple(
        PathReport(PathKey(t.cluster, t.node, TargetType.NODE, protocol), t.node_ip, result)
        for t in NODES
        for protocol, result in (
            (
                Protocol.ICMP,
                lost if t.node == "n2" else ProbeResult(ProbeStatus.OK, 1000.0, (0.001,)),
            ),
            (Protocol.HTTP, ProbeResult(ProbeStatus.OK, 1000.0, (0.001,))),
        )
    )
    for report in reports:
        results.add(report)
    results.finish_round(RoundReport(1000.0, 1.0, tuple(NODES), reports))
    part = results.status_nodes(NODES)
    n2 = next(node for node in part.nodes if node["name"] == "n2")
    assert n2["host"]["primary_address"]["icmp"]["state"] == "suspect"
    assert n2["state"] == "suspect"
    assert part.summary["suspect"] == 1 and part.summary["unreachable"] == 0
    assert results.status_nodes(NODES) is part  # nothing changed: cached
    key = PathKey("c", "n2", TargetType.NODE, Protocol.ICMP)
    verdicts.observe(key, ok=False, now=1010.0)  # a second failure
    assert verdicts.confirm("c", "n2", "c/n3", now=1011.0) == []
    assert verdicts.confirm("c", "n2", "c/n4", now=1011.0) == [key]  # floor: 5 s
    assert results.status_nodes(NODES) is part  # shown once the agent takes the change
    results.take_verdicts([key])  # as NodeAgent does when verdicts change between rounds
    after = results.status_nodes(NODES)
    n2 = next(node for node in after.nodes if node["name"] == "n2")
    assert n2["host"]["primary_address"]["icmp"]["state"] == "unreachable"
    assert n2["host"]["primary_address"]["icmp"]["state_since"] == "1970-01-01T00:16:51Z"
    assert after.summary["unreachable"] == 1


def test_other_observers_in_the_summary_confirm_a_suspect_path() -> None:
    """The cluster summary's count of observers failing a target (this one included)
    confirms: 3 of them (2 others) in 4 nodes bring the time to the floor."""
    failing = {("c", "n2"): 0}
    verdicts = tracker(failing=lambda cluster, node: failing.get((cluster, node), 0))
    verdicts.observe(PATH, ok=False, now=0.0)
    verdicts.observe(PATH, ok=False, now=10.0)
    assert verdicts.confirm_from_observers(now=10.0) == []
    failing[("c", "n2")] = 1  # only us: no confirmation
    assert verdicts.confirm_from_observers(now=11.0) == []
    state = verdicts.get(PATH)
    assert state is not None and state.confirmers == frozenset()
    failing[("c", "n2")] = 3
    assert verdicts.confirm_from_observers(now=11.0) == [PATH]
    assert verdicts.counts()[V.UNREACHABLE] == 1


def test_a_new_failure_reads_the_observers_at_once() -> None:
    verdicts = tracker(failing=lambda cluster, node: 3)
    verdicts.observe(PATH, ok=False, now=0.0)
    assert verdicts.observe(PATH, ok=False, now=5.0).verdict is V.UNREACHABLE  # the floor
