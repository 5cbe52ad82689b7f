"""Findings: what diagnosis concludes, and their JSON (pure; the document's shape is
meshhealth.documents.findings).

`nodes` are the culprits: one node for most kinds; for `path` (and a path's
`mtu-blackhole`, `udp-blocked`, `port-blocked`) the observer then the target; for
`partition` the nodes cut off from the main group, with `groups` listing every group.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.diagnosis.cells import NodeId
from meshhealth.diagnosis.layers import Pair
from meshhealth.documents.findings import FindingJSON, FindingsJSON, FindingsSource
from meshhealth.naming import node_order
from meshhealth.timefmt import iso_time


class FindingKind(enum.StrEnum):
    NODE_DOWN = "node-down"  # nothing of the node answers, its report is not fresh
    AGENT_DOWN = "agent-down"  # the kernel answers ICMP, its agent does not answer HTTP
    ENDPOINT_DOWN = "endpoint-down"  # host paths fine, the health endpoint fails
    NODE_ISOLATED = "node-isolated"  # reaches nobody and nobody reaches it
    EGRESS_BLOCKED = "egress-blocked"  # only its row fails
    INGRESS_BLOCKED = "ingress-blocked"  # only its column fails
    PATH = "path"  # one observer -> target pair
    PARTITION = "partition"  # groups that do not reach each other
    OBSERVER_DEGRADED = "observer-degraded"  # its own reports are not to be trusted
    MTU_BLACKHOLE = "mtu-blackhole"  # small probes pass, big don't-fragment ones are lost
    UDP_BLOCKED = "udp-blocked"  # ICMP and HTTP (TCP) pass, UDP echoes are lost
    PORT_BLOCKED = "port-blocked"  # ICMP passes, an operator's TCP port does not accept


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    nodes: tuple[NodeId, ...]
    confidence: float  # 0 .. 1
    since: float  # unix seconds: since when all of the evidence holds
    evidence: str  # one line, for people
    cells: tuple[Pair, ...] = ()  # the (observer, target) cells it rests on, sorted
    groups: tuple[tuple[NodeId, ...], ...] = ()  # partition only


def is_expected(kind: str, nodes: Iterable[object], in_maintenance: Container[str]) -> bool:
    """A finding is expected when it names culprits and every one is in planned
    maintenance (`in_maintenance`: "cluster/node"s), or, for a `path` (observer then
    target), when either end is: the path fails because that node does."""
    named = [str(node) for node in nodes]
    if kind == FindingKind.PATH:
        return any(node in in_maintenance for node in named)
    return bool(named) and all(node in in_maintenance for node in named)


def finding_json(finding: Finding, in_maintenance: Container[str] = ()) -> FindingJSON:
    out: FindingJSON = {
        "kind": finding.kind.value,
        "nodes": [str(n) for n in finding.nodes],
        "confidence": round(finding.confidence, 2),
        "since": iso_time(finding.since),
        "evidence": finding.evidence,
    }
    if finding.kind is FindingKind.PARTITION:
        out["groups"] = [[str(n) for n in group] for group in finding.groups]
    if is_expected(finding.kind, out["nodes"], in_maintenance):
        out["expected"] = True
    return out


def findings_json(
    findings: Iterable[Finding],
    generated_at: float,
    in_maintenance: Container[str] = (),
    *,
    source: FindingsSource | None = None,
) -> FindingsJSON:
    """The document of `meshhealth diagnose -o json` (`in_maintenance`: the nodes in
    planned maintenance, whose findings are marked expected; `source`: said only by
    `diagnose`)."""
    doc: FindingsJSON = {
        "findings": [finding_json(f, in_maintenance) for f in findings],
        "generated_at": iso_time(generated_at),
    }
    if source is not None:
        doc["source"] = source
    return doc


def names(nodes: Iterable[NodeId], limit: int = 5) -> str:
    """`lab1/node2, lab1/node10`: in natural order, as every other view lists nodes
    (meshhealth.naming), whatever order they come in; at most `limit`, then `and 3
    more`."""
    ordered = sorted(nodes, key=node_order)
    shown = ", ".join(str(n) for n in ordered[:limit])
    more = len(ordered) - limit
    return f"{shown} and {more} more" if more > 0 else shown


def confidence(
    failing: int,
    ok: int,
    *,
    extra: int = 0,
    doubt: float = defaults.DIAGNOSIS_DOUBT_PER_CELL,
) -> float:
    """share x (1 - doubt^(failing + extra)): the share of failing cells among the
    assessed ones, and how much independent evidence there is (`extra`: witnesses that
    are not cells, such as the node's own stale report)."""
    if failing <= 0:
        return 0.0
    return failing / (failing + ok) * (1.0 - doubt ** (failing + extra))
