"""The matrix document as diagnosis reads it (diagnosis/view.py), and the
findings the matrix stories give through it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meshhealth.diagnosis.cells import NodeId, PathKind, PathObservation
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.view import matrix_view, path_state
from meshhealth.documents.matrix import build_matrix
from meshhealth.model import HealthReport, ProbeStatus, Reachability
from tests import matrix_stories as S

N1, N2, N3, N4 = (NodeId("lab1", f"node{i}") for i in range(1, 5))
DOWN = S.paths((S.TIMEOUT,) * 4)
NODES4 = ("lab1/node1", "lab1/node2", "lab1/node3", "lab1/node4")


def _findings(reports: list[HealthReport]) -> list[tuple[str, tuple[str, ...]]]:
    view = matrix_view(build_matrix(reports, now=S.NOW))
    return [(f.kind.value, tuple(str(n) for n in f.nodes)) for f in diagnose(view)]


def node_down() -> list[HealthReport]:
    """node4 is off: the others time out on every path, its last report is 60 s old."""
    return [
        S.report(s, {t: DOWN if t == "lab1/node4" else S.paths() for t in NODES4})
        for s in NODES4[:3]
    ] + [S.report("lab1/node4", {t: S.paths() for t in NODES4}, age_s=120.0)]


def agent_not_publishing() -> list[HealthReport]:
    """node4's agent answers everyone but cannot write to etcd: its report is stale."""
    fresh = [S.report(s, {t: S.paths() for t in NODES4}) for s in NODES4[:3]]
    return [*fresh, S.report("lab1/node4", {t: S.paths() for t in NODES4}, age_s=120.0)]


def agent_down() -> list[HealthReport]:
    """node4's kernel answers ICMP, its agent refuses HTTP (and publishes nothing)."""
    refused = S.paths((S.OK, S.REFUSED, S.OK, S.OK))
    return [
        S.report(s, {t: refused if t == "lab1/node4" else S.paths() for t in NODES4})
        for s in NODES4[:3]
    ]


def secondary_down() -> list[HealthReport]:
    """Dual stack: node4's secondary addresses time out from everyone (no route for
    that family), its primary ones answer."""
    out = []
    for report in [S.report(s, {t: S.paths() for t in NODES4}) for s in NODES4[:3]]:
        targets = tuple(
            replace(t, secondary_paths=DOWN if t.node == "node4" else S.paths())
            for t in report.targets
        )
        out.append(replace(report, targets=targets))
    return out


@pytest.mark.parametrize(
    ("story", "expected"),
    [
        (secondary_down, [("path", ("lab1/node4",))]),
        (S.healthy, []),
        (S.meshed, []),
        (S.stale_and_missing, []),  # one stale row, one silent node: no one to blame
        (S.endpoint_forward_drop, [("endpoint-down", ("lab1/node2",))]),
        (S.node_unreachable_by_all, [("node-isolated", ("lab1/node3",))]),
        (node_down, [("node-down", ("lab1/node4",))]),
        (agent_not_publishing, [("observer-degraded", ("lab1/node4",))]),
        (agent_down, [("agent-down", ("lab1/node4",))]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_story_findings(story: object, expected: list[tuple[str, tuple[str, ...]]]) -> None:
    assert callable(story)
    assert _findings(story()) == expected


@pytest.mark.parametrize(
    ("status", "stale", "state"),
    [
        (ProbeStatus.OK, False, Reachability.REACHABLE),
        (ProbeStatus.TIMEOUT, False, Reachability.UNREACHABLE),
        (ProbeStatus.REFUSED, False, Reachability.UNREACHABLE),
        (ProbeStatus.HTTP_ERROR, False, Reachability.UNREACHABLE),
        (ProbeStatus.ERROR, False, Reachability.UNREACHABLE),
        (ProbeStatus.UNKNOWN, False, None),
        (ProbeStatus.OK, True, Reachability.STALE),
        (ProbeStatus.TIMEOUT, True, Reachability.STALE),
        (ProbeStatus.UNKNOWN, True, None),
    ],
)
def test_path_state(status: ProbeStatus, stale: bool, state: Reachability | None) -> None:
    assert path_state(status, stale=stale) == state


def test_cells_observers_and_nodes_of_the_stale_story() -> None:
    matrix = build_matrix(S.stale_and_missing(), now=S.NOW)
    view = matrix_view(matrix)
    remote = NodeId("lab2", "node1")
    # node3 and lab2/node1 report nothing: known nodes, not observers.
    assert {o.node for o in view.observers} == {N1, N2}
    assert not any(o.degraded for o in view.observers)
    assert view.nodes == tuple(sorted({N1, N2, N3, remote}))
    assert view.silent == {N2, N3, remote}  # node2 stale; node3, lab2/node1 no report
    assert view.stale_since == {N2: S.NOW - 100.0} and view.fresh_rows == {N1}
    cells = {(c.observer, c.target): c for c in view.cells}
    assert set(cells) == {(N1, N1), (N1, N2), (N1, N3), (N1, remote), (N2, N1), (N2, N2)}
    fresh_since = S.NOW - 2.0
    assert cells[(N1, N3)].paths[PathKind.ENDPOINT_HTTP] == PathObservation(
        Reachability.REACHABLE, fresh_since
    )
    # The remote node: no endpoint, node/http not probed yet: only node/icmp counts.
    assert dict(cells[(N1, remote)].paths) == {
        PathKind.NODE_ICMP: PathObservation(Reachability.REACHABLE, fresh_since)
    }
    # node2's report is 100 s old: every path it reports is stale, since its probe time.
    assert {p for p in cells[(N2, N1)].paths.values()} == {
        PathObservation(Reachability.STALE, S.NOW - 100.0)
    }
    assert len(cells[(N2, N1)].paths) == 4


def test_failures_and_their_since() -> None:
    view = matrix_view(build_matrix(S.node_unreachable_by_all(), now=S.NOW))
    cells = {(c.observer, c.target): c for c in view.cells}
    assert cells[(N1, N3)].state(PathKind.NODE_HTTP) is Reachability.UNREACHABLE
    assert cells[(N1, N3)].since(PathKind.NODE_HTTP) == S.NOW - 2.0
    assert cells[(N1, N3)].state(PathKind.NODE_ICMP_DF) is Reachability.UNASSIGNED
    (finding,) = diagnose(view)
    assert finding.since == S.NOW - 2.0
