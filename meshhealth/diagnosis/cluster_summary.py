"""One cluster's summary from the matrix of its reports and diagnosis's findings (pure).

    matrix = build_matrix(reports, now=now)
    summary = build_summary(matrix, diagnose(matrix_view(matrix)),
                            cluster="lab1", aggregator="node2")
    summary_codec.encode_summary(summary)         # what the aggregator publishes

- the verdict counts the nodes of `cluster` (the matrix's columns of that cluster) by
  `observed_reachability` (meshhealth.documents.reachability) over the cells of the
  fresh rows (a stale row says nothing), a node's own row left out;
- a node's observers are the fresh rows that probed it; `observers_min` and
  `observers_median` are over the nodes of `cluster` (0 when it has none);
- `failing_observers` names every target (of any cluster: the cluster's agents probe
  meshed remotes too) that at least one fresh observer fails to reach (a cell
  `unreachable` or `suspect`), with how many do;
- the findings are diagnosis's, in its order, as `SummaryFinding`s; `keep_since` gives
  a finding that was in the previous summary (same kind and nodes) its earlier `since`,
  so a finding that goes on is not a change (reports carry only their own probe time).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import replace

from meshhealth.diagnosis.findings import Finding, FindingKind
from meshhealth.documents.matrix import Matrix, NodeRef, Row
from meshhealth.documents.reachability import (
    FAILING_CELL_STATES,
    OBSERVED_CELL_STATES,
    observed_reachability,
)
from meshhealth.summary_codec import (
    MAX_EVIDENCE_CHARS,
    ClusterSummary,
    NodeCounts,
    SummaryFinding,
    node_label,
)


def _fresh(row: Row) -> bool:
    return row.probe_time is not None and not row.stale


def column_states(matrix: Matrix) -> dict[NodeRef, list[str]]:
    """target -> the states of the fresh cells that probed it (its own row left out)."""
    states: dict[NodeRef, list[str]] = {ref: [] for ref in matrix.columns}
    for row in matrix.rows:
        if not _fresh(row):
            continue
        for cell in row.listed_cells:
            if cell.target != row.source and cell.state in OBSERVED_CELL_STATES:
                states[cell.target].append(cell.state)
    return states


def summary_finding(finding: Finding) -> SummaryFinding:
    evidence = finding.evidence
    if len(evidence) > MAX_EVIDENCE_CHARS:
        evidence = evidence[: MAX_EVIDENCE_CHARS - 3] + "..."
    groups: tuple[tuple[str, ...], ...] = ()
    if finding.kind is FindingKind.PARTITION:
        groups = tuple(tuple(str(n) for n in group) for group in finding.groups)
    return SummaryFinding(
        kind=finding.kind.value,
        nodes=tuple(str(n) for n in finding.nodes),
        confidence=round(min(1.0, max(0.0, finding.confidence)), 2),
        since=finding.since,
        evidence=evidence,
        groups=groups,
    )


def build_summary(
    matrix: Matrix, findings: Iterable[Finding], *, cluster: str, aggregator: str
) -> ClusterSummary:
    """The summary `aggregator` publishes for `cluster` (see the module docstring)."""
    states = column_states(matrix)
    counts = {"reachable": 0, "unreachable": 0, "suspect": 0, "unknown": 0}
    observers: list[int] = []
    for ref, seen in states.items():
        if ref[0] != cluster:
            continue
        counts[observed_reachability(seen)] += 1
        observers.append(len(seen))
    failing = {
        node_label(*ref): n
        for ref, seen in states.items()
        if (n := sum(1 for state in seen if state in FAILING_CELL_STATES))
    }
    return ClusterSummary(
        cluster=cluster,
        aggregator=aggregator,
        generated_at=matrix.generated_at,
        nodes=NodeCounts(**counts),
        observers_min=min(observers, default=0),
        observers_median=float(statistics.median(observers)) if observers else 0.0,
        failing_observers=dict(sorted(failing.items())),
        findings=tuple(summary_finding(f) for f in findings),
    )


def keep_since(summary: ClusterSummary, previous: ClusterSummary | None) -> ClusterSummary:
    """`summary` with the `since` of each finding already in `previous` (same kind and
    nodes) kept when it is earlier: since when the finding holds, not since the newest
    report that shows it."""
    if previous is None:
        return summary
    earlier = {(f.kind, f.nodes): f.since for f in previous.findings}
    findings = tuple(
        replace(f, since=min(f.since, earlier.get((f.kind, f.nodes), f.since)))
        for f in summary.findings
    )
    return replace(summary, findings=findings)
