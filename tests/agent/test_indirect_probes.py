"""The requester of indirect probes (meshhealth.agent.indirect.probes) in trio time
(MockClock): what a round queues, the one deadline of a check, what is forgotten, and
the findings in the status document and `meshhealth status`."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from meshhealth.agent.indirect.policy import Conclusion, HelperOutcome, check_notes
from meshhealth.agent.indirect.probes import IndirectProbes, confirm_suspicion
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.cli.format_status import path_line
from meshhealth.documents.indirect import HelperPath, IndirectQuery
from meshhealth.documents.matrix import Matrix
from meshhealth.documents.status import LocalNode
from meshhealth.documents.status_schema import NodeDocument
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
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
from tests.documents.test_document_types import shape_errors

OWN = Target("c1", "me", "10.0.0.1")
A, B, C = (Target("c1", n, f"10.0.0.{i}") for i, n in ((2, "a"), (3, "b"), (4, "c")))
TARGETS = (OWN, A, B, C)


def _key(node: str, protocol: Protocol = Protocol.ICMP) -> PathKey:
    return PathKey("c1", node, TargetType.NODE, protocol)


def _round(failed: set[str], targets: tuple[Target, ...] = TARGETS) -> RoundReport:
    paths = tuple(
        PathReport(
            _key(t.node, protocol),
            t.node_ip,
            ProbeResult(ProbeStatus.TIMEOUT if t.node in failed else ProbeStatus.OK, 0.0),
        )
        for t in targets
        for protocol in REACHABILITY_PROTOCOLS
    )
    return RoundReport(started_at=0.0, duration_s=1.0, targets=targets, paths=paths)


async def unpublished() -> Matrix:
    """No published reports here (no etcd): helpers come from the live nodes."""
    raise OSError("no etcd in this test")


class Helpers:
    """`ask`: helper `a` reaches everything, `b` nothing, `c` never answers."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, IndirectQuery]] = []

    async def __call__(self, helper: Target, query: IndirectQuery) -> HelperOutcome:
        self.asked.append((helper.node, query))
        ref = (helper.cluster, helper.node)
        if helper.node == "c":
            await trio.sleep_forever()
        status = ProbeStatus.OK if helper.node == "a" else ProbeStatus.TIMEOUT
        paths = {
            name: HelperPath(name, status, 0.001 if status is ProbeStatus.OK else None)
            for name in ("node/icmp", "node/http")
        }
        return HelperOutcome(ref, paths=paths)


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_round_queues_failed_targets_and_the_check_has_one_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    helpers = Helpers()
    shown: list[int] = []
    concluded = trio.Event()

    def show(checks: object) -> None:
        shown.append(len(checks))  # type: ignore[arg-type]
        concluded.set()

    probes = IndirectProbes(
        OWN,
        read_matrix=unpublished,
        live=lambda: TARGETS,
        ask=helpers,
        deadline_s=2.0,
        on_checks=show,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(probes.run)
        start = trio.current_time()
        probes.note_round(_round({"me", "b"}))  # our own paths never need helpers
        probes.note_round(_round({"me", "b"}))  # b's check runs: not queued twice
        await concluded.wait()
        nursery.cancel_scope.cancel()
    # a and c were asked about b (the target is never its own helper); c never answered,
    # so the check ended at its deadline, 2 s after it began.
    assert sorted(name for name, _ in helpers.asked) == ["a", "c"]
    assert trio.current_time() - start == pytest.approx(2.0, abs=0.2)
    check = probes.checks[_key("b")]
    assert check.conclusion is Conclusion.PATH_BROKEN
    assert check.reachable_via == (("c1", "a"),)
    assert check.unanswered == (("c1", "c"),)
    assert probes.counters.sent["timeout"].value == 1
    assert probes.counters.checks["path-broken"].value == 2  # icmp and http of b
    assert shown == [2]

    # b is OK again: its findings go, and the status is told.
    probes.note_round(_round(set()))
    assert probes.checks == {}
    assert shown == [2, 0]


async def test_helpers_off_asks_nobody(autojump_clock: trio.testing.MockClock) -> None:
    helpers = Helpers()
    probes = IndirectProbes(
        OWN, read_matrix=unpublished, live=lambda: TARGETS, ask=helpers, deadline_s=2.0, helpers=0
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(probes.run)
        probes.note_round(_round({"b"}))
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert helpers.asked == []
    assert probes.checks == {}


async def test_endpoint_failure_asks_for_the_endpoint_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    helpers = Helpers()
    probes = IndirectProbes(
        OWN, read_matrix=unpublished, live=lambda: (OWN, A, B), ask=helpers, deadline_s=2.0
    )
    endpoint = PathKey("c1", "b", TargetType.ENDPOINT, Protocol.HTTP)
    [check] = await probes.check(B, [endpoint])
    assert helpers.asked == [("a", IndirectQuery("c1", "b", endpoint=True))]
    # a's answer has no endpoint path: nothing learned about it.
    assert check.conclusion is Conclusion.NO_ANSWER


async def test_no_other_node_to_ask(autojump_clock: trio.testing.MockClock) -> None:
    probes = IndirectProbes(
        OWN, read_matrix=unpublished, live=lambda: (OWN, B), ask=Helpers(), deadline_s=2.0
    )
    [check] = await probes.check(B, [_key("b")])
    assert check.conclusion is Conclusion.NO_HELPER


async def test_findings_show_in_status_and_its_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probes = IndirectProbes(
        OWN, read_matrix=unpublished, live=lambda: TARGETS, ask=Helpers(), deadline_s=2.0
    )
    results = ProbeResults(
        LocalNode("c1", "me", "10.0.0.1", None),
        window=5,
        verdicts=PathVerdicts(
            interval_s=10.0, failing_observers=lambda cluster, node: 0, clock=lambda: 1000.0
        ),
    )
    report = _round({"b"})
    results.finish_round(report)
    await probes.check(B, [_key("b")])
    results.set_indirect(check_notes(probes.checks))
    nodes = results.status_nodes(report.targets).nodes
    b: NodeDocument = next(n for n in nodes if n["name"] == "b")
    assert shape_errors(b, NodeDocument) == []
    icmp = b["host"]["primary_address"]["icmp"]
    assert icmp["indirect"]["conclusion"] == "path-broken"
    assert icmp["indirect"]["reachable_via"] == ["c1/a"]
    assert path_line(icmp, verbose=False, now=None) == (
        "Connection timed out (suspect since 1970-01-01T00:16:40Z); "
        "reachable via c1/a: path from this node broken"
    )
    # A failing path without findings, and an OK path, have no `indirect`.
    assert "indirect" not in b["host"]["primary_address"]["http"]
    a = next(n for n in nodes if n["name"] == "a")
    assert "indirect" not in a["host"]["primary_address"]["icmp"]


async def test_target_down_confirms_and_path_broken_settles_a_twice_failed_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A `target-down` check counts each helper that failed the path as a confirmation of
    its suspicion. A `path-broken` check (a helper reaches the target) confirms nothing,
    but settles a path that failed twice in a row as unreachable at once, while this agent
    is well: the second opinion for a path only this node observes. One failure, or an
    unwell agent: the path stays suspect."""
    d = Target("c1", "d", "10.0.0.5")
    verdicts = PathVerdicts(
        interval_s=1.0, failing_observers=lambda cluster, node: 0, clock=lambda: 100.0
    )
    verdicts.finish_round((OWN, A, B, C, d))
    verdicts.observe(_key("d"), ok=False)
    assert verdicts.get(_key("d")).verdict is Reachability.SUSPECT  # type: ignore[union-attr]
    well = {"now": True}
    confirm = confirm_suspicion(verdicts, lambda: well["now"])

    # d: b fails it too, c never answers: target down, confirmed by b.
    probes = IndirectProbes(
        OWN,
        read_matrix=unpublished,
        live=lambda: (OWN, B, C, d),
        ask=Helpers(),
        deadline_s=2.0,
        on_check=confirm,
    )
    [down] = await probes.check(d, [_key("d")])
    assert down.conclusion is Conclusion.TARGET_DOWN
    assert verdicts.get(_key("d")).confirmers == {"c1/b"}  # type: ignore[union-attr]

    # With `a` among d's helpers, d is reached: the path is broken, no confirmation; after
    # one failure it stays suspect.
    probes = IndirectProbes(
        OWN,
        read_matrix=unpublished,
        live=lambda: (OWN, A, B, d),
        ask=Helpers(),
        deadline_s=2.0,
        on_check=confirm,
    )
    verdicts.observe(_key("d"), ok=True)  # a new failing run starts from no confirmers
    verdicts.observe(_key("d"), ok=False)
    [broken] = await probes.check(d, [_key("d")])
    assert broken.conclusion is Conclusion.PATH_BROKEN
    state = verdicts.get(_key("d"))
    assert state is not None and state.confirmers == frozenset()
    assert state.verdict is Reachability.SUSPECT
    # Twice in a row, but this agent is unwell: its own failures, still suspect.
    verdicts.observe(_key("d"), ok=False)
    well["now"] = False
    await probes.check(d, [_key("d")])
    assert verdicts.get(_key("d")).verdict is Reachability.SUSPECT  # type: ignore[union-attr]
    # Well again: the helper's answer settles it, long before the suspicion time.
    well["now"] = True
    await probes.check(d, [_key("d")])
    assert verdicts.get(_key("d")).verdict is Reachability.UNREACHABLE  # type: ignore[union-attr]


async def test_secondary_paths_are_not_checked(autojump_clock: trio.testing.MockClock) -> None:
    """Helpers answer about primary addresses only: a failing secondary (dual-stack)
    path queues no check."""
    helpers = Helpers()
    probes = IndirectProbes(
        OWN, read_matrix=unpublished, live=lambda: TARGETS, ask=helpers, deadline_s=2.0
    )
    key = PathKey("c1", "b", TargetType.NODE, Protocol.ICMP, secondary=True)
    report = RoundReport(
        started_at=0.0,
        duration_s=1.0,
        targets=TARGETS,
        paths=(PathReport(key, "fd00::3", ProbeResult(ProbeStatus.TIMEOUT, 0.0)),),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(probes.run)
        probes.note_round(report)
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert helpers.asked == []
