"""The findings document: what `meshhealth diagnose -o json` prints (pure types).

    {"findings": [{"kind": "node-down", "nodes": ["lab1/node3"], "confidence": 0.88,
                   "since": "2026-11-23T10:00:00Z", "evidence": "..."}],
     "generated_at": "2026-11-23T10:00:12Z", "source": "summary"}

Built by meshhealth.diagnosis.findings (`findings_json`: recomputed from the reports),
meshhealth.documents.cluster_health (`published_findings_document`: the aggregators'
summaries) and meshhealth.diagnosis.timeline (`findings_at`: `diagnose --at`).
"""

from __future__ import annotations

from typing import Final, Literal, NotRequired, TypedDict

# Where `meshhealth diagnose` took its findings from: the clusters' published summaries
# (what `status`, `watch` and the web page show), or diagnosis run over the reports now.
FindingsSource = Literal["summary", "recomputed"]
FROM_SUMMARY: Final = "summary"
RECOMPUTED: Final = "recomputed"


class FindingJSON(TypedDict):
    kind: str
    nodes: list[str]  # cluster/node, the culprits
    confidence: float
    since: str | None
    evidence: str
    groups: NotRequired[list[list[str]]]  # partition only
    expected: NotRequired[bool]  # only when true: every culprit is in planned maintenance


class FindingsJSON(TypedDict):
    findings: list[FindingJSON]
    generated_at: str | None
    # `meshhealth diagnose` (not `--at`) says where its findings come from; optional:
    # older readers and the other builders go without it
    source: NotRequired[FindingsSource]
