"""One cluster's summary from the matrix of its reports and diagnosis's findings (pure).

    matrix = build_matrix(reports, now=now)
    summary = build_summary(matrix, diagnose(matrix_view(matrix)),
                            cluster="lab1", aggregator="node2")
    wire.summary.encode_summary(summary)          # what the aggregator publishes

The verdict counts the cluster's nodes by the observers' consensus over the fresh rows
(`node_consensus`), leaving out observers whose own row explains their failures
(`discount_reasons`) and nodes in planned maintenance; `failing_observers` tells each
target how many counting observers fail to reach it (confirmations of suspicion);
`keep_since` keeps a continuing finding's first `since`, so it is not a change;
`hold_new_paths` publishes a `path` finding only once it has lasted a few seconds.
docs/diagnosis.md describes the verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, replace

from meshhealth.diagnosis.findings import Finding, FindingKind, is_expected
from meshhealth.documents.maintenance import MAINTENANCE_REASON
from meshhealth.documents.matrix import Matrix, NodeRef, Row
from meshhealth.documents.reachability import (
    FAILING_CELL_STATES,
    OBSERVED_CELL_STATES,
    node_consensus,
)
from meshhealth.wire.event import Identity, identity
from meshhealth.wire.summary import (
    MAX_EVIDENCE_CHARS,
    ClusterSummary,
    DiscountedObserver,
    MaintenanceNote,
    NodeCounts,
    SummaryFinding,
    node_label,
)


def _fresh(row: Row) -> bool:
    return row.probe_time is not None and not row.stale


# Why an observer's own row explains its failures: the findings that say so, strongest
# first, then its own report's word that it is degraded (DEGRADED).
DISCOUNTING_KINDS: tuple[FindingKind, ...] = (
    FindingKind.NODE_ISOLATED,
    FindingKind.EGRESS_BLOCKED,
    FindingKind.PARTITION,  # its culprits: the side cut off from the main group
    FindingKind.OBSERVER_DEGRADED,
    FindingKind.NODE_DOWN,  # a dead observer's last report
    FindingKind.AGENT_DOWN,
)
DEGRADED = "degraded"


def column_cells(matrix: Matrix) -> dict[NodeRef, list[tuple[str, str]]]:
    """target -> (observer, state) of the fresh cells that say something of it (its own
    row left out)."""
    cells: dict[NodeRef, list[tuple[str, str]]] = {ref: [] for ref in matrix.columns}
    for row in matrix.rows:
        if not _fresh(row):
            continue
        source = node_label(*row.source)
        for cell in row.listed_cells:  # the others say nothing (unknown, unassigned)
            if cell.target != row.source and cell.state in OBSERVED_CELL_STATES:
                cells[cell.target].append((source, cell.state))
    return cells


def discount_reasons(matrix: Matrix, findings: Iterable[Finding]) -> dict[str, str]:
    """observer ("cluster/node") -> why its failures do not count (see DISCOUNTING_KINDS)."""
    rank = {kind: i for i, kind in enumerate(DISCOUNTING_KINDS)}
    reasons: dict[str, FindingKind] = {}
    for finding in findings:
        if finding.kind not in rank:
            continue
        for node in finding.nodes:
            name = str(node)
            if name not in reasons or rank[finding.kind] < rank[reasons[name]]:
                reasons[name] = finding.kind
    out: dict[str, str] = {name: kind.value for name, kind in reasons.items()}
    for row in matrix.rows:
        if _fresh(row) and row.degraded_since is not None:
            out.setdefault(node_label(*row.source), DEGRADED)
    for name in matrix.maintenance:  # expected: it says so rather than a finding's kind
        out[name] = MAINTENANCE_REASON
    return out


def _discounted(
    matrix: Matrix, reasons: Mapping[str, str], columns: Mapping[NodeRef, list[tuple[str, str]]]
) -> dict[str, DiscountedObserver]:
    """Each discounted observer that has a fresh row, with its own figures."""
    out = {}
    for row in matrix.rows:
        name = node_label(*row.source)
        if name not in reasons or not _fresh(row):
            continue
        own = [c.state for c in row.listed_cells if c.target != row.source]
        seen = [state for state in own if state in OBSERVED_CELL_STATES]
        observers = [state for _, state in columns.get(row.source, ())]
        out[name] = DiscountedObserver(
            reason=reasons[name],
            fails=sum(1 for state in seen if state in FAILING_CELL_STATES),
            targets=len(seen),
            reached_by=sum(1 for state in observers if state == "reachable"),
            observers=len(observers),
        )
    return out


def summary_finding(finding: Finding, in_maintenance: Container[str] = ()) -> SummaryFinding:
    evidence = finding.evidence
    if len(evidence) > MAX_EVIDENCE_CHARS:
        evidence = evidence[: MAX_EVIDENCE_CHARS - 3] + "..."
    groups: tuple[tuple[str, ...], ...] = ()
    if finding.kind is FindingKind.PARTITION:
        groups = tuple(tuple(str(n) for n in group) for group in finding.groups)
    nodes = tuple(str(n) for n in finding.nodes)
    return SummaryFinding(
        kind=finding.kind.value,
        nodes=nodes,
        confidence=round(min(1.0, max(0.0, finding.confidence)), 2),
        since=finding.since,
        evidence=evidence,
        groups=groups,
        expected=is_expected(finding.kind, nodes, in_maintenance),
    )


def build_summary(
    matrix: Matrix, findings: Iterable[Finding], *, cluster: str, aggregator: str
) -> ClusterSummary:
    """The summary `aggregator` publishes for `cluster` (see the module docstring)."""
    findings = tuple(findings)
    columns = column_cells(matrix)
    reasons = discount_reasons(matrix, findings)
    counts = {"reachable": 0, "unreachable": 0, "suspect": 0, "unknown": 0, "maintenance": 0}
    node_states: dict[str, str] = {}
    maintenance: dict[str, MaintenanceNote] = {}
    observers: list[int] = []
    failing: dict[str, int] = {}
    for ref, cells in columns.items():
        verdict = node_consensus(cells, reasons)
        failed = sum(
            1 for source, state in cells if state in FAILING_CELL_STATES and source not in reasons
        )
        if failed:
            failing[node_label(*ref)] = failed
        if ref[0] != cluster:
            continue
        window = matrix.maintenance.get(node_label(*ref))
        if window is not None:
            counts["maintenance"] += 1
            maintenance[node_label(*ref)] = MaintenanceNote(
                verdict.state, window.end, window.reason, window.by
            )
            continue
        counts[verdict.state] += 1
        observers.append(len(cells))
        if verdict.state != "reachable":
            node_states[node_label(*ref)] = verdict.state
    return ClusterSummary(
        cluster=cluster,
        aggregator=aggregator,
        generated_at=matrix.generated_at,
        nodes=NodeCounts(**counts),
        observers_min=min(observers, default=0),
        observers_median=float(statistics.median(observers)) if observers else 0.0,
        failing_observers=dict(sorted(failing.items())),
        findings=tuple(summary_finding(f, matrix.maintenance) for f in findings),
        node_states=dict(sorted(node_states.items())),
        discounted=dict(sorted(_discounted(matrix, reasons, columns).items())),
        maintenance=maintenance,
    )


def summaries_of(matrix: Matrix, findings: Iterable[Finding]) -> dict[str, ClusterSummary]:
    """The summary of every cluster whose reports `matrix` read, as a reader that is no
    aggregator builds them (`watch --etcd`): `aggregator` is empty."""
    findings = tuple(findings)
    clusters = dict.fromkeys(row.source[0] for row in matrix.rows)
    return {
        cluster: build_summary(matrix, findings, cluster=cluster, aggregator="")
        for cluster in clusters
    }


def keep_since(summary: ClusterSummary, previous: ClusterSummary | None) -> ClusterSummary:
    """`summary` with the `since` of each finding already in `previous` (same kind and
    nodes) kept when it is earlier: since when the finding holds, not since the newest
    report that shows it."""
    if previous is None:
        return summary
    earlier = {identity(f): f.since for f in previous.findings}
    findings = tuple(
        replace(f, since=min(f.since, earlier.get(identity(f), f.since))) for f in summary.findings
    )
    return replace(summary, findings=findings)


@dataclass(frozen=True, slots=True)
class HeldPaths:
    """The findings to publish, and the `path` findings held back."""

    findings: tuple[SummaryFinding, ...]
    first_seen: dict[Identity, float]  # every path finding given: since when
    settles_at: float | None  # when the next held one is published (None: none waits)


def hold_new_paths(
    findings: Iterable[SummaryFinding],
    first_seen: Mapping[Identity, float],
    *,
    shown: Container[Identity],
    now: float,
    settle_s: float,
) -> HeldPaths:
    """`findings` without the `path` findings diagnosis has given for less than
    `settle_s` (`first_seen`, as returned last time). A node-level fault starts and
    clears one observer at a time: for a moment the matrix holds one failing path per
    observer that already sees it, then the node's own finding. Held back, those
    moments never reach the live views. A finding in `shown` (published already, or
    with an open event after a takeover) stays at once; so does every other kind."""
    out: list[SummaryFinding] = []
    seen: dict[Identity, float] = {}
    settles: list[float] = []
    for finding in findings:
        ident = identity(finding)
        if finding.kind != FindingKind.PATH.value:
            out.append(finding)
            continue
        first = seen[ident] = min(first_seen.get(ident, now), now)
        if ident in shown or now - first >= settle_s:
            out.append(finding)
        else:
            settles.append(first + settle_s)
    return HeldPaths(tuple(out), seen, min(settles, default=None))
