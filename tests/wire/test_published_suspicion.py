"""The suspicion state and local health in the published report: the codec's optional
fields, what the publisher puts in and counts as a change, and how the matrix, watch
and diagnosis read them back."""

from __future__ import annotations

from dataclasses import replace

import msgpack
import pytest

from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.reporting.publisher import (
    LocalHealthMark,
    change_signature,
    health_report,
)
from meshhealth.cli.format_matrix import report_text
from meshhealth.cli.watch_state import NodeView, PathView, aggregate_paths
from meshhealth.diagnosis.cells import NodeId, PathKind
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix, cell_state
from meshhealth.documents.matrix_json import matrix_document
from meshhealth.documents.reachability import statuses_reachability
from meshhealth.model import (
    HealthReport,
    PathHealth,
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Reachability,
    RoundReport,
    Target,
    TargetHealth,
    TargetType,
)
from meshhealth.probe.stats import StatsBook
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.health import decode_health_report, encode_health_report
from meshhealth.wire.values import to_jsonable
from tests import matrix_stories

OK, TIMEOUT = ProbeStatus.OK, ProbeStatus.TIMEOUT
NOW = 1_795_000_000.0
TARGETS = (
    Target("c", "n1", "127.0.0.1", None),
    Target("c", "n2", "127.0.0.2", None),
    Target("c", "n3", "127.0.0.3", None),
)


def _report(paths: dict[str, PathHealth], **extra: object) -> HealthReport:
    return HealthReport(
        node="n1",
        cluster="c",
        probe_time=NOW,
        interval_s=10.0,
        targets=(TargetHealth("c", "n2", paths),),
        **extra,  # type: ignore[arg-type]
    )


def test_codec_round_trip_of_the_optional_fields() -> None:
    report = _report(
        {
            "node/icmp": PathHealth(TIMEOUT, None, 0.2, state="suspect", state_since=NOW - 4),
            "node/http": PathHealth(OK, 0.001, 0.0),
        },
        health_score=3,
        degraded_since=NOW - 30,
        degraded_reasons=("targets-failing", "some-future-reason"),
    )
    back = decode_health_report(encode_health_report(report))
    assert back == report  # a code this version does not know is kept
    wire = to_jsonable(report)
    assert wire["health_score"] == 3 and wire["degraded_since"] == NOW - 30
    assert wire["degraded_reasons"] == ["targets-failing", "some-future-reason"]
    assert "state" not in wire["targets"][0]["paths"]["node/http"]  # type: ignore[index]


def test_a_healthy_report_carries_none_of_them() -> None:
    wire = to_jsonable(_report({"node/icmp": PathHealth(OK, 0.001, 0.0)}))
    assert "health_score" not in wire and "degraded_since" not in wire
    assert "degraded_reasons" not in wire
    assert set(wire["targets"][0]["paths"]["node/icmp"]) == {"status", "rtt_s", "loss"}  # type: ignore[index]


def test_a_verdict_this_version_does_not_know_is_ignored() -> None:
    wire = to_jsonable(_report({"node/icmp": PathHealth(TIMEOUT, None, 1.0)}))
    wire["targets"][0]["paths"]["node/icmp"]["state"] = "haunted"  # type: ignore[index]
    back = decode_health_report(msgpack.packb(wire))
    assert back.targets[0].paths["node/icmp"].state is None  # the status decides


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("health_score", 99),
        ("health_score", "3"),
        ("degraded_since", "yesterday"),
        ("degraded_reasons", "loop-lag"),
        ("degraded_reasons", [3]),
        ("degraded_reasons", ["Loop Lag!"]),
        ("degraded_reasons", ["x"] * 17),
    ],
)
def test_bad_local_health_fields_are_refused(field: str, value: object) -> None:
    wire = to_jsonable(_report({}))
    wire[field] = value
    with pytest.raises(DecodeError, match=field):
        decode_health_report(msgpack.packb(wire))


def _round(n3_icmp: ProbeStatus) -> tuple[RoundReport, StatsBook]:
    book = StatsBook()
    reports = []
    for target in TARGETS:
        for protocol in Protocol:
            key = PathKey("c", target.node, TargetType.NODE, protocol)
            status = n3_icmp if target.node == "n3" and protocol is Protocol.ICMP else OK
            result = ProbeResult(status, NOW, (0.001,) if status is OK else ())
            reports.append(PathReport(key, target.node_ip, result))
    report = RoundReport(NOW, 1.0, TARGETS, tuple(reports))
    book.record(report)
    return report, book


def test_the_publisher_puts_a_failing_paths_verdict_and_counts_its_change() -> None:
    verdicts = PathVerdicts(
        interval_s=10.0, failing_observers=lambda cluster, node: 0, clock=lambda: NOW
    )
    verdicts.finish_round(TARGETS)
    key = PathKey("c", "n3", TargetType.NODE, Protocol.ICMP)
    verdicts.observe(key, ok=False, now=NOW)
    report, book = _round(TIMEOUT)
    summaries = book.summaries()
    suspect = health_report(
        report, summaries, cluster="c", node="n1", interval_s=10.0, verdicts=verdicts.snapshot()
    )
    n3 = next(t for t in suspect.targets if t.node == "n3")
    assert n3.paths["node/icmp"].state == "suspect"
    assert n3.paths["node/icmp"].state_since == NOW
    assert n3.paths["node/http"].state is None  # OK: nothing to add
    verdicts.observe(key, ok=False, now=NOW + 10)
    verdicts.observe(key, ok=False, now=NOW + 40)  # the ceiling (3 nodes: 1 could confirm)
    unreachable = health_report(
        report, summaries, cluster="c", node="n1", interval_s=10.0, verdicts=verdicts.snapshot()
    )
    assert change_signature(unreachable) != change_signature(suspect)  # suspect -> unreachable
    degraded = health_report(
        report,
        summaries,
        cluster="c",
        node="n1",
        interval_s=10.0,
        verdicts=verdicts.snapshot(),
        local=LocalHealthMark(score=3, degraded_since=NOW),
    )
    assert degraded.health_score == 3 and degraded.degraded_since == NOW
    assert change_signature(degraded) != change_signature(unreachable)  # the flag is news
    assert degraded.degraded_reasons == ()  # a mark without reasons: none published
    why = health_report(
        report,
        summaries,
        cluster="c",
        node="n1",
        interval_s=10.0,
        verdicts=verdicts.snapshot(),
        local=LocalHealthMark(score=3, degraded_since=NOW, reasons=("loop-lag",)),
    )
    assert why.degraded_reasons == ("loop-lag",)
    assert change_signature(why) != change_signature(degraded)  # a new reason is news
    healthy = health_report(report, summaries, cluster="c", node="n1", interval_s=10.0)
    assert all(p.state is None for t in healthy.targets for p in t.paths.values())


def test_matrix_watch_and_diagnosis_read_the_published_verdicts() -> None:
    reports = matrix_stories.suspect_and_degraded()
    matrix = build_matrix(reports, now=matrix_stories.NOW)
    row1 = next(r for r in matrix.rows if r.source == ("lab1", "node1"))
    cell = next(c for c in row1.cells if c.target == ("lab1", "node3"))
    assert cell.state == "suspect"
    doc = matrix_document(matrix)
    assert doc["summary"]["suspect"] == 1
    row2 = next(r for r in doc["rows"] if r["name"] == "node2")
    assert row2["degraded_since"] == "2026-11-18T11:06:10Z" and row2["health_score"] == 3
    view = matrix_view(matrix)
    observed = next(
        c
        for c in view.cells
        if (c.observer, c.target) == (NodeId("lab1", "node1"), NodeId("lab1", "node3"))
    )
    icmp = observed.paths[PathKind.NODE_ICMP]
    assert icmp.state is Reachability.SUSPECT and icmp.since == matrix_stories.NOW - 3
    degraded = {o.node for o in view.observers if o.degraded}
    assert degraded == {NodeId("lab1", "node2")}


@pytest.mark.parametrize(
    "paths",
    [
        {"node/icmp": PathHealth(TIMEOUT, None, 1.0, state="suspect")},
        {"node/icmp": PathHealth(TIMEOUT, None, 1.0, state="unreachable")},
        {"node/icmp": PathHealth(TIMEOUT, None, 1.0)},
        {
            "node/icmp": PathHealth(TIMEOUT, None, 1.0, state="suspect"),
            "node/http": PathHealth(TIMEOUT, None, 1.0, state="unreachable"),
        },
        {"node/icmp": PathHealth(OK, 0.001, 0.0), "node/http": PathHealth(OK, 0.001, 0.0)},
    ],
)
def test_matrix_and_watch_agree_on_published_verdicts(paths: dict[str, PathHealth]) -> None:
    expected = statuses_reachability(
        [p.status for p in paths.values()], [p.state for p in paths.values()]
    )
    assert cell_state(paths) == expected
    views = aggregate_paths([_report(paths)])[("c", "n2")]
    assert NodeView("c", "n2", paths=views).state == expected
    assert isinstance(next(iter(views.values())), PathView)


def test_the_degraded_reasons_reach_the_matrix_and_diagnosis() -> None:
    reports = [
        replace(r, degraded_reasons=("targets-failing",)) if r.degraded_since else r
        for r in matrix_stories.suspect_and_degraded()
    ]
    matrix = build_matrix(reports, now=matrix_stories.NOW)
    row2 = next(r for r in matrix_document(matrix)["rows"] if r["name"] == "node2")
    assert row2.get("degraded_reasons") == ["targets-failing"]
    assert report_text(row2).endswith("DEGRADED (targets-failing)")
    observer = next(o for o in matrix_view(matrix).observers if o.node.node == "node2")
    assert observer.degraded_reasons == ("targets-failing",)
