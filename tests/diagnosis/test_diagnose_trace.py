"""Where a failing observer's trace stopped, quoted in a finding's evidence
(diagnosis/diagnose.py `_quote_a_trace`): the health report's `trace` of a target, through
the matrix, to the path, partition, node-isolated, node-down and ingress-blocked findings
(pure, matrix stories)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meshhealth.diagnosis.cells import NodeId
from meshhealth.diagnosis.diagnose import diagnose, trace_text
from meshhealth.diagnosis.findings import Finding
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix
from meshhealth.model import HealthReport, TraceStop
from tests import matrix_stories as S

ROUTER = TraceStop("10.77.0.254", 1, S.NOW - 5)
SILENT = TraceStop(None, 0, S.NOW - 5)


def with_trace(
    reports: list[HealthReport], source: str, target: str, stop: TraceStop
) -> list[HealthReport]:
    """`source`'s report with `stop` as its trace to `target`."""
    out = []
    for r in reports:
        if f"{r.cluster}/{r.node}" == source:
            targets = tuple(
                replace(t, trace=stop) if f"{t.cluster}/{t.node}" == target else t
                for t in r.targets
            )
            out.append(replace(r, targets=targets))
        else:
            out.append(r)
    return out


def findings(reports: list[HealthReport]) -> dict[str, Finding]:
    found = diagnose(matrix_view(build_matrix(reports, now=S.NOW)))
    return {f.kind.value: f for f in found}


def ingress_blocked() -> list[HealthReport]:
    """Nothing reaches node3; its own probes pass."""
    return S.full_mesh(lambda s, t: t == "lab1/node3")


def node_down() -> list[HealthReport]:
    """Nothing reaches node3 and it publishes nothing (a link-drop of its rack cuts it
    off from etcd too)."""
    return [r for r in ingress_blocked() if r.node != "node3"]


def one_path_drop() -> list[HealthReport]:
    """node4's path to node6 drops everything; all else answers."""
    reports = []
    for source in S.NODES6:
        targets = {t: S.paths() for t in S.NODES6}
        if source == "lab1/node4":
            targets["lab1/node6"] = S.paths((S.TIMEOUT,) * 4)
        reports.append(S.report(source, targets))
    return reports


N1 = NodeId("lab1", "node1")


@pytest.mark.parametrize(
    ("stop", "text"),
    [
        (ROUTER, "the trace from lab1/node1 stops after 10.77.0.254 (hop 1)"),
        (TraceStop("fd00::1", 3, 0.0), "the trace from lab1/node1 stops after fd00::1 (hop 3)"),
        (SILENT, "the trace from lab1/node1 gets no answer from any hop"),
    ],
)
def test_trace_text(stop: TraceStop, text: str) -> None:
    assert trace_text(N1, stop) == text


@pytest.mark.parametrize(
    ("story", "kind", "observer", "target"),
    [
        (S.node_unreachable_by_all, "node-isolated", "lab1/node1", "lab1/node3"),
        (S.two_groups, "partition", "lab1/node3", "lab1/node1"),  # node1, 2 degraded
        (one_path_drop, "path", "lab1/node4", "lab1/node6"),
        (ingress_blocked, "ingress-blocked", "lab1/node2", "lab1/node3"),
        (node_down, "node-down", "lab1/node2", "lab1/node3"),  # a rack's uplink cut
    ],
)
def test_a_failing_observers_trace_ends_the_evidence(
    story: object, kind: str, observer: str, target: str
) -> None:
    assert callable(story)
    plain = findings(story())[kind]
    traced = findings(with_trace(story(), observer, target, ROUTER))[kind]
    quote = f"; the trace from {observer} stops after 10.77.0.254 (hop 1)"
    assert "trace" not in plain.evidence
    assert traced.evidence == plain.evidence + quote
    assert replace(traced, evidence=plain.evidence) == plain  # nothing else moves
    silent = findings(with_trace(story(), observer, target, SILENT))[kind]
    assert silent.evidence.endswith(f"; the trace from {observer} gets no answer from any hop")


def test_the_first_failing_cell_with_a_trace_is_quoted() -> None:
    reports = with_trace(S.node_unreachable_by_all(), "lab1/node2", "lab1/node3", ROUTER)
    reports = with_trace(reports, "lab1/node3", "lab1/node1", SILENT)
    evidence = findings(reports)["node-isolated"].evidence
    # cells in order: node1 -> node3 (no trace), node2 -> node3 (traced) first
    assert evidence.endswith("; the trace from lab1/node2 stops after 10.77.0.254 (hop 1)")
    assert evidence.count("the trace from") == 1


def test_a_trace_of_a_pair_that_is_not_the_findings_is_not_quoted() -> None:
    # node1 traced node2 (a path that answers): not evidence of node3's isolation
    reports = with_trace(S.node_unreachable_by_all(), "lab1/node1", "lab1/node2", ROUTER)
    assert "trace" not in findings(reports)["node-isolated"].evidence


def test_other_kinds_quote_no_trace() -> None:
    bad = S.endpoint_forward_drop()
    reports = with_trace(bad, "lab1/node1", "lab1/node2", ROUTER)
    found = findings(reports)
    assert "endpoint-down" in found
    assert all("trace" not in f.evidence for f in found.values())
