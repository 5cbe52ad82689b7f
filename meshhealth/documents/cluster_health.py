"""The status document's cluster verdicts and findings, from the followed summaries (pure).

    cluster_health_document(["lab1", "lab2"], summaries, local_counts, now=now)
    findings_document(["lab1", "lab2"], summaries)

One `cluster_health` entry per cluster the agent follows (its own first, then each
admitted clustermesh remote). With a summary (meshhealth.wire.summary, published by
the cluster's aggregator) the counts are the cluster's verdict over every observer's
results (`source: "summary"`); without one yet (no aggregator, or it just changed) they
are this node's own probes of that cluster's nodes (`source: "local"`), and say so.
A summary of a cluster of one node that nobody observes has `alone: true` (its counts,
0/1, are no verdict; the texts say ALONE_TEXT). The observers the verdict discounted
(their own row explains their failures) are listed, and said in the findings' words
once here (`discounted_text`, `this_node`), for every view to print as they are.
`findings` are every summary's findings, cluster by cluster, in diagnosis's order, in
the shape of `meshhealth diagnose -o json`, which prints the same findings
(`published_findings_document`) when every cluster it reads has a summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshhealth.documents.findings import FROM_SUMMARY, FindingJSON, FindingsJSON
from meshhealth.documents.maintenance import MAINTENANCE_REASON, note_document
from meshhealth.documents.status_schema import (
    ClusterHealthDocument,
    DiscountedObserverDocument,
    FindingDocument,
    SummaryDocument,
)
from meshhealth.naming import NaturalKey, natural_key
from meshhealth.timefmt import iso_time
from meshhealth.wire.summary import ClusterSummary, DiscountedObserver, SummaryFinding

SOURCE_SUMMARY = "summary"
SOURCE_LOCAL = "local"
# Built by a reader (`watch --etcd`, `matrix`) from every node's report in etcd, by the
# aggregator's own rule: no aggregator wrote it.
SOURCE_REPORTS = "reports"
# A cluster of one node nobody observes: "0/1 reachable (0 observers)" would be no verdict.
ALONE_TEXT = "1 node, no other node to probe or to observe it (a cluster of one)"


# Why an observer does not count against the nodes it fails to reach, in words: one node
# and several, then what to look at when it is the node the status runs on.
_DISCOUNT_WORDS: dict[str, tuple[str, str, str]] = {
    "node-isolated": (
        "is cut off",
        "are cut off",
        "nobody reaches it either: look at this node's link, firewall and routes",
    ),
    "egress-blocked": (
        "cannot reach out",
        "cannot reach out",
        "look at this node's egress (output firewall rules, routes, its NIC)",
    ),
    "partition": (
        "is cut off from the main group",
        "are cut off from the main group",
        "look at the links between the groups of the partition",
    ),
    "observer-degraded": (
        "is unwell",
        "are unwell",
        "its own probes are not trusted while it is unwell",
    ),
    "degraded": (
        "is degraded",
        "are degraded",
        "its own probes are not trusted while it is degraded",
    ),
    "node-down": ("is down", "are down", "its last report is not trusted"),
    "maintenance": (
        "is in maintenance",
        "are in maintenance",
        "it is in planned maintenance: `meshhealth maintenance list` says until when",
    ),
    "agent-down": (
        "has its agent down",
        "have their agents down",
        "its last report is not trusted",
    ),
}
_UNKNOWN_REASON = ("is discounted", "are discounted", "its own probes are not trusted")
# The headline names at most this many discounted observers (then "and N more").
_NAMED_IN_HEADLINE = 3


def _by_node(item: tuple[str, object]) -> NaturalKey:
    return natural_key(item[0])  # "cluster/node": node2 before node10


def is_alone(verdict: ClusterHealthDocument) -> bool:
    return bool(verdict.get("alone"))


def discounted_text(discounted: Mapping[str, DiscountedObserver]) -> str | None:
    """`lab1/node3 cannot reach out (egress-blocked)`: the discounted observers grouped by
    why, in the findings' words (None: none). Nodes in maintenance are left out: the
    headline counts them on its own (`, 1 in maintenance`)."""
    by_reason: dict[str, list[str]] = {}
    for name, observer in sorted(discounted.items(), key=_by_node):
        if observer.reason != MAINTENANCE_REASON:
            by_reason.setdefault(observer.reason, []).append(name)
    return "; ".join(_reason_text(reason, names) for reason, names in by_reason.items()) or None


def _reason_text(reason: str, names: list[str]) -> str:
    one, many, _ = _DISCOUNT_WORDS.get(reason, _UNKNOWN_REASON)
    shown = ", ".join(names[:_NAMED_IN_HEADLINE])
    if len(names) > _NAMED_IN_HEADLINE:
        shown += f" and {len(names) - _NAMED_IN_HEADLINE} more"
    return f"{shown} {one if len(names) == 1 else many} ({reason})"


def this_node_text(observer: DiscountedObserver) -> str:
    """What is wrong with the node the status runs on, when the verdict discounts it."""
    _, _, advice = _DISCOUNT_WORDS.get(observer.reason, _UNKNOWN_REASON)
    return (
        f"This node ({observer.reason}): its own probes fail to {observer.fails} of "
        f"{observer.targets} targets while {observer.reached_by} of {observer.observers} "
        f"observers reach it: {advice}"
    )


def _discounted_document(
    discounted: Mapping[str, DiscountedObserver],
) -> list[DiscountedObserverDocument]:
    return [
        {
            "node": name,
            "reason": observer.reason,
            "text": _reason_text(observer.reason, [name]),
            "fails": observer.fails,
            "targets": observer.targets,
            "reached_by": observer.reached_by,
            "observers": observer.observers,
        }
        for name, observer in sorted(discounted.items(), key=_by_node)
    ]


def summary_verdict_document(
    summary: ClusterSummary,
    now: float,
    local_node: str | None = None,
    *,
    source: str = SOURCE_SUMMARY,
) -> ClusterHealthDocument:
    """The verdict of `summary`: an aggregator's (SOURCE_SUMMARY), or one a reader built
    from the reports itself (SOURCE_REPORTS: no aggregator)."""
    counts = summary.nodes
    doc: ClusterHealthDocument = {
        "cluster": summary.cluster,
        "source": source,
        "aggregator": (
            f"{summary.cluster}/{summary.aggregator}" if source == SOURCE_SUMMARY else None
        ),
        "updated_at": iso_time(summary.generated_at),
        "age_s": round(max(0.0, now - summary.generated_at), 3),
        "reachable": counts.reachable,
        "unreachable": counts.unreachable,
        "suspect": counts.suspect,
        "unknown": counts.unknown,
        "total": counts.total,
        "maintenance": counts.maintenance,
        "observers_min": summary.observers_min,
        "observers_median": summary.observers_median,
        "node_states": dict(summary.node_states),
        "discounted_observers": _discounted_document(summary.discounted),
        "discounted_text": discounted_text(summary.discounted),
        "this_node": None,
        "maintenance_nodes": [
            note_document(name, note, now)
            for name, note in sorted(summary.maintenance.items(), key=_by_node)
        ],
    }
    own = summary.discounted.get(local_node) if local_node is not None else None
    if own is not None:
        doc["this_node"] = this_node_text(own)
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
        "maintenance": 0,
        "observers_min": None,
        "observers_median": None,
        "node_states": {},
        "discounted_observers": [],
        "discounted_text": None,
        "this_node": None,
        "maintenance_nodes": [],
    }


def cluster_health_document(
    clusters: Sequence[str],
    summaries: Mapping[str, ClusterSummary],
    local_counts: Mapping[str, SummaryDocument],
    *,
    now: float,
    local_node: str | None = None,
) -> list[ClusterHealthDocument]:
    """One entry per cluster of `clusters` (in that order): its summary's verdict, else
    this node's own counts of it (`local_counts`: cluster -> counts). `local_node`
    ("cluster/node"): the node the document is for, told what is wrong with it when the
    verdict discounts it."""
    out = []
    for cluster in dict.fromkeys(clusters):
        summary = summaries.get(cluster)
        if summary is not None:
            out.append(summary_verdict_document(summary, now, local_node))
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
    if finding.expected:
        doc["expected"] = True
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


def published_findings_document(summaries: Sequence[ClusterSummary], now: float) -> FindingsJSON:
    """The findings of `summaries` (cluster by cluster, in diagnosis's order) as the
    document of `meshhealth diagnose -o json`, read at `now` (`source: "summary"`): what
    `status`, `watch` and the web page show."""
    findings: list[FindingJSON] = [
        finding_document(finding) for summary in summaries for finding in summary.findings
    ]
    return {"findings": findings, "generated_at": iso_time(now), "source": FROM_SUMMARY}
