"""The status document's cluster verdicts and findings, from the followed summaries (pure).

    cluster_health_document(["lab1", "lab2"], summaries, local_counts, now=now)
    findings_document(["lab1", "lab2"], summaries)

One `cluster_health` entry per cluster the agent follows (its own first, then each
admitted clustermesh remote). With a summary (meshhealth.summary_codec, published by
the cluster's aggregator) the counts are the cluster's verdict over every observer's
results (`source: "summary"`); without one yet (no aggregator, or it just changed) they
are this node's own probes of that cluster's nodes (`source: "local"`), and say so.
A summary of a cluster of one node that nobody observes has `alone: true` (its counts,
0/1, are no verdict; the texts say ALONE_TEXT).
`findings` are every summary's findings, cluster by cluster, in diagnosis's order, in
the shape of `meshhealth diagnose -o json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshhealth.documents.status_schema import (
    ClusterHealthDocument,
    FindingDocument,
    SummaryDocument,
)
from meshhealth.summary_codec import ClusterSummary, SummaryFinding
from meshhealth.timefmt import iso_time

SOURCE_SUMMARY = "summary"
SOURCE_LOCAL = "local"
# A cluster of one node nobody observes: "0/1 reachable (0 observers)" would be no verdict.
ALONE_TEXT = "1 node, no other node to probe or to observe it (a cluster of one)"


def is_alone(verdict: ClusterHealthDocument) -> bool:
    return bool(verdict.get("alone"))


def _from_summary(summary: ClusterSummary, now: float) -> ClusterHealthDocument:
    counts = summary.nodes
    doc: ClusterHealthDocument = {
        "cluster": summary.cluster,
        "source": SOURCE_SUMMARY,
        "aggregator": f"{summary.cluster}/{summary.aggregator}",
        "updated_at": iso_time(summary.generated_at),
        "age_s": round(max(0.0, now - summary.generated_at), 3),
        "reachable": counts.reachable,
        "unreachable": counts.unreachable,
        "suspect": counts.suspect,
        "unknown": counts.unknown,
        "total": counts.total,
        "observers_min": summary.observers_min,
        "observers_median": summary.observers_median,
    }
    if counts.total == 1 and summary.observers_min == 0:
        doc["alone"] = True
    return doc


def _from_local(cluster: str, counts: SummaryDocument | None) -> ClusterHealthDocument:
    return {
        "cluster": cluster,
        "source": SOURCE_LOCAL,
        "aggregator": None,
        "updated_at": None,
        "age_s": None,
        "reachable": counts["reachable"] if counts else 0,
        "unreachable": counts["unreachable"] if counts else 0,
        "suspect": counts["suspect"] if counts else 0,
        "unknown": counts["unknown"] if counts else 0,
        "total": counts["total"] if counts else 0,
        "observers_min": None,
        "observers_median": None,
    }


def cluster_health_document(
    clusters: Sequence[str],
    summaries: Mapping[str, ClusterSummary],
    local_counts: Mapping[str, SummaryDocument],
    *,
    now: float,
) -> list[ClusterHealthDocument]:
    """One entry per cluster of `clusters` (in that order): its summary's verdict, else
    this node's own counts of it (`local_counts`: cluster -> counts)."""
    out = []
    for cluster in dict.fromkeys(clusters):
        summary = summaries.get(cluster)
        if summary is not None:
            out.append(_from_summary(summary, now))
        else:
            out.append(_from_local(cluster, local_counts.get(cluster)))
    return out


def finding_document(finding: SummaryFinding) -> FindingDocument:
    doc: FindingDocument = {
        "kind": finding.kind,
        "nodes": list(finding.nodes),
        "confidence": finding.confidence,
        "since": iso_time(finding.since),
        "evidence": finding.evidence,
    }
    if finding.groups:
        doc["groups"] = [list(group) for group in finding.groups]
    return doc


def findings_document(
    clusters: Sequence[str], summaries: Mapping[str, ClusterSummary]
) -> list[FindingDocument]:
    """Every followed summary's findings, cluster by cluster (in `clusters` order)."""
    return [
        finding_document(finding)
        for cluster in dict.fromkeys(clusters)
        if (summary := summaries.get(cluster)) is not None
        for finding in summary.findings
    ]
