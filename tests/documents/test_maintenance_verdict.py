"""Planned maintenance in the cluster's verdict (pure): a node in maintenance is in no
count but its own, keeps its state, its findings are expected, its own failures count
against nobody; the summary carries it on the wire (older readers see the verdict
without it), every view says "in maintenance", the metrics mark it."""

from __future__ import annotations

from collections.abc import Callable

import msgpack
import pytest

from meshhealth.agent.agent_metrics import agent_metrics
from meshhealth.agent.cluster_view.aggregator import summarise
from meshhealth.cli.format_findings import finding_line, format_findings_text
from meshhealth.cli.format_status import maintenance_lines, summary_verdict_text
from meshhealth.diagnosis.cluster_summary import build_summary
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import findings_json, is_expected
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.cluster_health import (
    discounted_text,
    finding_document,
    summary_verdict_document,
)
from meshhealth.documents.matrix import build_matrix
from meshhealth.metrics import Registry
from meshhealth.model import HealthReport
from meshhealth.wire.maintenance import MaintenanceWindow
from meshhealth.wire.summary import (
    ClusterSummary,
    MaintenanceNote,
    NodeCounts,
    decode_summary,
    encode_summary,
)
from tests import matrix_stories as S
from tests.agent.test_metrics import parse_exposition

END = S.NOW + 3600


def window(
    node: str, *, end: float = END, reason: str = "reboot", by: str = "ops"
) -> MaintenanceWindow:
    cluster, name = node.split("/")
    return MaintenanceWindow(cluster, name, S.NOW - 60, end, reason, by)


def summary_of(reports: list[HealthReport], windows: list[MaintenanceWindow]) -> ClusterSummary:
    matrix = build_matrix(reports, now=S.NOW, source_clusters=["lab1"], maintenance=windows)
    return build_summary(matrix, diagnose(matrix_view(matrix)), cluster="lab1", aggregator="node1")


@pytest.mark.parametrize(
    ("story", "windows", "counts", "node_states", "in_maintenance", "expected"),
    [
        (  # nothing in maintenance: as before
            S.node_unreachable_by_all, [], NodeCounts(reachable=2, unreachable=1),
            {"lab1/node3": "unreachable"}, {}, {("node-isolated", False)},
        ),
        (  # node3 is down for its maintenance: 2/2 reachable, 1 in maintenance
            S.node_unreachable_by_all, [window("lab1/node3")],
            NodeCounts(reachable=2, maintenance=1), {},
            {"lab1/node3": "unreachable"}, {("node-isolated", True)},
        ),
        (  # a healthy node in maintenance keeps its state (reachable), out of the counts
            S.healthy, [window("lab1/node2")], NodeCounts(reachable=2, maintenance=1), {},
            {"lab1/node2": "reachable"}, set(),
        ),
        (  # a draining node that cannot reach out: its failures count against nobody
            S.egress_blocked, [window("lab1/node3")], NodeCounts(reachable=5, maintenance=1),
            {}, {"lab1/node3": "reachable"}, {("egress-blocked", True)},
        ),
        (  # another node in maintenance does not hide node4's isolation
            S.isolated, [window("lab1/node1")],
            NodeCounts(reachable=4, unreachable=1, maintenance=1),
            {"lab1/node4": "unreachable"}, {"lab1/node1": "reachable"},
            {("node-isolated", False)},
        ),
        (  # a window that has ended (by the reader's clock) counts for nothing
            S.node_unreachable_by_all, [window("lab1/node3", end=S.NOW)],
            NodeCounts(reachable=2, unreachable=1), {"lab1/node3": "unreachable"}, {},
            {("node-isolated", False)},
        ),
        (  # a window of a node of another cluster, of the same name, neither
            S.node_unreachable_by_all, [window("lab2/node3")],
            NodeCounts(reachable=2, unreachable=1), {"lab1/node3": "unreachable"}, {},
            {("node-isolated", False)},
        ),
    ],
)  # fmt: skip
def test_the_verdict_leaves_nodes_in_maintenance_out(
    *,
    story: Callable[[], list[HealthReport]],
    windows: list[MaintenanceWindow],
    counts: NodeCounts,
    node_states: dict[str, str],
    in_maintenance: dict[str, str],
    expected: set[tuple[str, bool]],
) -> None:
    summary = summary_of(story(), windows)
    assert summary.nodes == counts
    assert summary.node_states == node_states
    assert {name: note.state for name, note in summary.maintenance.items()} == in_maintenance
    assert {(f.kind, f.expected) for f in summary.findings} == expected
    for name in in_maintenance:  # its own failures do not count against others
        assert summary.discounted[name].reason == "maintenance"
    assert decode_summary(encode_summary(summary)) == summary


def test_the_note_carries_the_window_and_an_older_reader_sees_the_verdict_without_it() -> None:
    summary = summary_of(S.node_unreachable_by_all(), [window("lab1/node3", by="alice@b")])
    assert summary.maintenance == {
        "lab1/node3": MaintenanceNote("unreachable", END, "reboot", "alice@b")
    }
    wire = msgpack.unpackb(encode_summary(summary))
    assert wire["nodes"] == {
        "reachable": 2, "unreachable": 0, "suspect": 0, "unknown": 0, "maintenance": 1
    }  # fmt: skip
    assert wire["findings"][0]["expected"] is True
    # what an older reader reads: the four counts (2/2), no maintenance, no expected
    older = {k: v for k, v in wire.items() if k != "maintenance"}
    older["nodes"] = {k: v for k, v in wire["nodes"].items() if k != "maintenance"}
    older["findings"] = [{k: v for k, v in f.items() if k != "expected"} for f in wire["findings"]]
    read = decode_summary(msgpack.packb(older))
    assert read.nodes == NodeCounts(reachable=2) and read.nodes.total == 2
    assert read.maintenance == {} and not read.findings[0].expected


def test_every_view_says_in_maintenance() -> None:
    summary = summary_of(
        S.node_unreachable_by_all(), [window("lab1/node3", reason="kernel \x1b[2J upgrade")]
    )
    verdict = summary_verdict_document(summary, S.NOW)
    assert (verdict["reachable"], verdict["total"], verdict["maintenance"]) == (2, 2, 1)
    assert verdict["discounted_text"] is None  # the headline counts it on its own
    assert summary_verdict_text(verdict, S.NOW) == (
        "2/2 reachable (2 observers each), 1 in maintenance   "
        "(aggregator lab1/node1, updated 0s ago)"
    )
    assert maintenance_lines(verdict) == [
        "  In maintenance:   lab1/node3 in maintenance (unreachable) until "
        "2026-11-18T12:06:40Z (1h0m0s left) by ops: kernel \x1b[2J upgrade"
    ]  # the formatters escape the whole text (status: escape_lines)
    [finding] = [finding_document(f) for f in summary.findings]
    assert finding["expected"] is True
    assert finding_line(finding).startswith(
        "Finding:   node-isolated lab1/node3 (confidence 0.94, expected: in maintenance): "
    )
    # `meshhealth diagnose`: the same rule from the matrix's windows
    matrix = build_matrix(
        S.node_unreachable_by_all(), now=S.NOW, maintenance=[window("lab1/node3")]
    )
    doc = findings_json(diagnose(matrix_view(matrix)), matrix.generated_at, matrix.maintenance)
    assert [f.get("expected") for f in doc["findings"]] == [True]
    assert "(expected: in maintenance) " in format_findings_text(doc)
    # `meshhealth matrix`: one note line per node in maintenance
    assert matrix.notes[-1].startswith("lab1/node3 in maintenance until 2026-11-18T12:06:40Z")


def test_the_aggregator_wakes_when_a_window_ends() -> None:
    reports = S.node_unreachable_by_all()
    soon = S.NOW + 5  # before any report turns stale
    summary, wake_at = summarise(
        reports, cluster="lab1", aggregator="node1", now=S.NOW,
        maintenance=[window("lab1/node3", end=soon)],
    )  # fmt: skip
    assert summary.nodes.maintenance == 1 and wake_at == soon
    after, _ = summarise(
        reports, cluster="lab1", aggregator="node1", now=soon,
        maintenance=[window("lab1/node3", end=soon)],
    )  # fmt: skip
    assert after.nodes == NodeCounts(reachable=2, unreachable=1)


def test_metrics_mark_the_node_and_its_expected_findings() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="lab1", source_node="node1")
    metrics.sync_summaries(
        {"lab1": summary_of(S.node_unreachable_by_all(), [window("lab1/node3")])}
    )
    samples = parse_exposition(registry.expose())
    assert samples['meshhealth_node_maintenance{cluster="lab1",node="lab1/node3"}'] == 1
    assert samples[
        'meshhealth_finding{kind="node-isolated",node="lab1/node3",expected="true"}'
    ] == 1  # fmt: skip
    assert samples['meshhealth_cluster_nodes{cluster="lab1",state="maintenance"}'] == 1
    assert not [k for k in samples if k.startswith("meshhealth_cluster_node_state{")]
    # the window ends: the node counts again, its finding is no longer expected
    metrics.sync_summaries({"lab1": summary_of(S.node_unreachable_by_all(), [])})
    samples = parse_exposition(registry.expose())
    assert not [k for k in samples if k.startswith("meshhealth_node_maintenance{")]
    assert samples[
        'meshhealth_finding{kind="node-isolated",node="lab1/node3",expected="false"}'
    ] == 1  # fmt: skip
    assert samples['meshhealth_cluster_nodes{cluster="lab1",state="maintenance"}'] == 0
    assert discounted_text(summary_of(S.node_unreachable_by_all(), []).discounted) == (
        "lab1/node3 is cut off (node-isolated)"
    )


@pytest.mark.parametrize(
    ("kind", "nodes", "expected"),
    [
        ("node-down", ["lab1/node3"], True),
        ("node-down", ["lab1/node2"], False),
        ("partition", ["lab1/node3", "lab1/node2"], False),  # node2 is not in maintenance
        ("partition", ["lab1/node3", "lab1/node4"], True),
        ("path", ["lab1/node1", "lab1/node3"], True),  # to the node in maintenance
        ("path", ["lab1/node3", "lab1/node1"], True),  # from it
        ("path", ["lab1/node1", "lab1/node2"], False),
        ("node-down", [], False),  # names nobody: nothing to expect
    ],
)
def test_which_findings_are_expected(kind: str, nodes: list[str], expected: bool) -> None:
    assert is_expected(kind, nodes, {"lab1/node3", "lab1/node4"}) is expected


@pytest.mark.parametrize(
    ("story", "windows", "failing"),
    [
        (S.healthy, [], 0),
        (S.node_unreachable_by_all, [], 4),  # node1, node2 -> node3; node3 -> node1, node2
        (S.node_unreachable_by_all, [window("lab1/node3")], 0),  # planned: no failure
        (S.node_unreachable_by_all, [window("lab1/node1")], 2),  # node2 <-> node3 left
        (S.node_unreachable_by_all, [window("lab1/node3", end=S.NOW - 1)], 4),  # over
    ],
)
def test_matrix_fail_on_unreachable_leaves_out_nodes_in_maintenance(
    story: Callable[[], list[HealthReport]], windows: list[MaintenanceWindow], failing: int
) -> None:
    matrix = build_matrix(story(), now=S.NOW, source_clusters=["lab1"], maintenance=windows)
    assert matrix.unexpected_failures() == failing
