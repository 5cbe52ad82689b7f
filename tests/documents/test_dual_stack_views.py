"""Dual stack in the published report, the matrix, the feed and `watch` (pure)."""

from __future__ import annotations

from meshhealth.agent.reporting.publisher import change_signature, health_report
from meshhealth.cli.watch_state import WatchState, aggregate_paths, apply_feed_message
from meshhealth.documents.feed import path_message
from meshhealth.documents.matrix import build_matrix
from meshhealth.documents.matrix_json import matrix_document
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathHealth,
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
    TargetHealth,
    TargetType,
)
from meshhealth.probe.stats import StatsBook

DUAL = Target("c1", "n2", "10.0.0.2", "10.1.0.2", "fd77::2", "fd78::2")
OK = ProbeResult(ProbeStatus.OK, 100.0, (0.001,), received=1)
TIMEOUT = ProbeResult(ProbeStatus.TIMEOUT, 100.0)


def summaries(secondary_result: ProbeResult) -> StatsBook:
    book = StatsBook()
    paths = tuple(
        PathReport(
            PathKey("c1", "n2", t, p, secondary),
            DUAL.address(t, secondary) or "",
            secondary_result if secondary else OK,
        )
        for t in TargetType
        for p in REACHABILITY_PROTOCOLS
        for secondary in (False, True)
    )
    book.record(RoundReport(100.0, 0.5, (DUAL,), paths))
    return book


def test_health_report_has_the_secondary_paths_apart() -> None:
    report = health_report(
        RoundReport(100.0, 0.5, (DUAL,)),
        summaries(TIMEOUT).summaries(),
        cluster="c1",
        node="n1",
        interval_s=10.0,
    )
    target = report.targets[0]
    assert set(target.paths) == {"node/icmp", "node/http", "endpoint/icmp", "endpoint/http"}
    assert target.paths["node/icmp"].status is ProbeStatus.OK
    assert target.secondary_paths["node/icmp"].status is ProbeStatus.TIMEOUT
    assert target.secondary_family == "ipv6"  # DUAL's secondary addresses
    # A change of a secondary path's status is a change worth a write.
    statuses = change_signature(report)
    assert statuses[("c1", "n2", "node/icmp@secondary")] is ProbeStatus.TIMEOUT
    assert statuses[("c1", "n2", "node/icmp")] is ProbeStatus.OK


def test_a_single_stack_target_says_no_family() -> None:
    single = Target("c1", "n3", "10.0.0.3", "10.1.0.3")
    paths = tuple(
        PathReport(PathKey("c1", "n3", t, p), single.address(t) or "", OK)
        for t in TargetType
        for p in REACHABILITY_PROTOCOLS
    )
    book = StatsBook()
    book.record(RoundReport(100.0, 0.5, (single,), paths))
    report = health_report(
        RoundReport(100.0, 0.5, (single,)),
        book.summaries(),
        cluster="c1",
        node="n1",
        interval_s=10.0,
    )
    (target,) = report.targets
    assert (target.secondary_paths, target.secondary_family) == ({}, None)
    assert Target("c1", "n4", "fd77::4", None, "10.0.0.4").secondary_family == "ipv4"


def report_of(secondary_status: ProbeStatus) -> HealthReport:
    ok = PathHealth(ProbeStatus.OK, 0.001, 0.0)
    target = TargetHealth(
        "c1",
        "n2",
        {"node/icmp": ok, "node/http": ok},
        {"node/icmp": PathHealth(secondary_status, None, 1.0), "node/http": ok},
        secondary_family="ipv6",
    )
    return HealthReport("n1", "c1", 100.0, 10.0, (target,))


def test_matrix_cell_combines_both_families() -> None:
    failing = build_matrix([report_of(ProbeStatus.TIMEOUT)], now=101.0)
    cell = failing.rows[0].cells[1]
    assert cell.target == ("c1", "n2")
    assert cell.state == "unreachable"
    healthy = build_matrix([report_of(ProbeStatus.OK)], now=101.0)
    assert healthy.rows[0].cells[1].state == "reachable"
    doc = matrix_document(failing)
    cell_doc = doc["rows"][0]["cells"][1]
    assert cell_doc["secondary_paths"]["node/icmp"]["status"] == "timeout"
    assert cell_doc["secondary_family"] == "ipv6"
    assert "secondary_paths" not in doc["rows"][0]["cells"][0]  # n2 reported nothing on n1


def test_watch_sees_secondary_paths_from_reports_and_feed() -> None:
    views = aggregate_paths([report_of(ProbeStatus.TIMEOUT)])
    assert views[("c1", "n2")]["node/icmp@secondary"].status == "timeout"
    state = WatchState(source="test")
    key = PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP, secondary=True)
    summary = summaries(TIMEOUT).summaries()[key]
    message = path_message(key, "fd77::2", summary, ["status"], seq=1)
    assert message["secondary"] is True
    changes = apply_feed_message(state, dict(message), now=101.0)
    assert [c.path for c in changes] == ["node/icmp@secondary"]
    assert state.nodes[("c1", "n2")].state == "unreachable"
    primary = path_message(
        key.__class__("c1", "n2", TargetType.NODE, Protocol.ICMP), "x", summary, [], 2
    )
    assert "secondary" not in primary
