"""The status document: what `GET /v1/status` answers and `meshhealth status` prints.

A pure builder from the agent's state (no I/O, no clock: `now` is an input). Field names
are stable and documented in docs/status.md; they follow Cilium's HealthStatusResponse
(local node, per node `host` / `health_endpoint` with a `primary_address`, `icmp` and
`http` per address) with snake_case names and seconds as the unit.

The agent supplies plain values:

    build_status_document(StatusInputs(
        local=LocalNode(cluster, name, node_ip, health_ip),
        targets=probe_set,                      # model.Target, the local node included
        summaries=stats_book.summaries(),       # dict[PathKey, PathSummary]
        probe_time=last_round.started_at,       # None before the first round
        probe_interval_s=config.interval_s,
        etcd=EtcdState(up=..., since=...),
        round=RoundState(running=..., ...),
        now=time.time(),
    ))

Per request only the head (generated_at, etcd, round) and `clusters` change; `nodes` and
`summary` change with a round. The agent keeps them in a `NodesCache` (built once per
round, with their JSON) and answers the socket with `encode_status_document`, which
splices the cached JSON: 300 nodes cost ~10 ms to build and encode, the rest ~0.1 ms.

Reachability of paths and nodes follows meshhealth.documents.reachability (the rule of
`Cluster health: X/Y reachable`): a path's state is its suspicion verdict (`verdicts`,
meshhealth.agent.path_verdicts; without one, its newest status); a node is reachable
when it has at least one probed path and every probed path is reachable, suspect when
one is suspect and none unreachable; paths not probed yet do not count against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meshhealth.documents.cluster_health import cluster_health_document, findings_document
from meshhealth.documents.plan import probe_plan_document
from meshhealth.documents.status_inputs import (
    NO_VERDICTS,
    ClusterState,
    EtcdState,
    LocalNode,
    PathVerdictLike,
    RoundState,
    StatusInputs,
    Verdicts,
)
from meshhealth.documents.status_nodes import (
    IndirectNotes,
    NodesCache,
    NodesPart,
    build_nodes_part,
    combined_state,
    encode_json,
    node_document,
    path_document,
    path_state,
)
from meshhealth.documents.status_schema import (
    ClusterDocument,
    ClusterHealthDocument,
    EtcdDocument,
    FindingDocument,
    HealthzDocument,
    LocalDocument,
    StatusDocument,
    StatusHeadDocument,
    StatusTailDocument,
    SummaryDocument,
)
from meshhealth.model import REACHABILITY_PROTOCOLS, PathKey, Protocol, TargetType
from meshhealth.timefmt import iso_time

# The status document's builders and inputs, wherever they are written: importers use
# this module.
__all__ = [
    "NO_VERDICTS",
    "SCHEMA_VERSION",
    "ClusterState",
    "EtcdState",
    "IndirectNotes",
    "LocalNode",
    "NodesCache",
    "NodesPart",
    "PathVerdictLike",
    "RoundState",
    "StatusInputs",
    "Verdicts",
    "build_healthz_document",
    "build_nodes_part",
    "build_status_document",
    "clusters_document",
    "combined_state",
    "encode_json",
    "encode_status_document",
    "etcd_document",
    "node_document",
    "path_document",
    "path_state",
]

SCHEMA_VERSION = 1


def _head_document(inputs: StatusInputs) -> StatusHeadDocument:
    """The fields before `nodes`: the request's time, the agent's state."""
    local = inputs.local
    local_doc: LocalDocument = {
        "cluster": local.cluster,
        "name": local.name,
        "node_ip": local.node_ip,
        "health_ip": local.health_ip,
    }
    if local.node_ip_secondary is not None:
        local_doc["node_ip_secondary"] = local.node_ip_secondary
    if local.health_ip_secondary is not None:
        local_doc["health_ip_secondary"] = local.health_ip_secondary
    return {
        "v": SCHEMA_VERSION,
        "generated_at": iso_time(inputs.now),
        "probe_time": iso_time(inputs.probe_time),
        "probe_interval_s": inputs.probe_interval_s,
        "local": local_doc,
        "etcd": etcd_document(inputs.etcd),
        "round": {
            "running": inputs.round.running,
            "last_started_at": iso_time(inputs.round.last_started_at),
            "last_duration_s": inputs.round.last_duration_s,
            "completed": inputs.round.completed,
        },
        "probe_plan": probe_plan_document(inputs.plan),
        "local_health": inputs.local_health,
    }


def _nodes_part(inputs: StatusInputs, nodes: NodesPart | None) -> NodesPart:
    if nodes is None:
        return build_nodes_part(
            inputs.local, inputs.targets, inputs.summaries, verdicts=inputs.verdicts
        )
    return nodes


def build_status_document(inputs: StatusInputs, nodes: NodesPart | None = None) -> StatusDocument:
    """The whole status document (see docs/status.md for the schema). `nodes`: the
    part built before from `inputs.targets` and `inputs.summaries` (NodesCache), else it
    is built here. The document shares `nodes` lists with the part: read-only."""
    part = _nodes_part(inputs, nodes)
    head = _head_document(inputs)
    return {
        "v": head["v"],
        "generated_at": head["generated_at"],
        "probe_time": head["probe_time"],
        "probe_interval_s": head["probe_interval_s"],
        "local": head["local"],
        "etcd": head["etcd"],
        "round": head["round"],
        "probe_plan": head["probe_plan"],
        "local_health": head["local_health"],
        "nodes": part.nodes,
        "clusters": clusters_document(inputs, part.node_counts),
        "summary": SummaryDocument(**part.summary),
        "cluster_health": _cluster_health(inputs, part),
        "findings": _findings(inputs),
    }


def encode_status_document(inputs: StatusInputs, nodes: NodesPart | None = None) -> bytes:
    """`encode_json(build_status_document(inputs, nodes))`, byte for byte, without
    encoding the nodes again: the cached `nodes_json` is spliced between the fresh
    head (time, etcd, round) and tail (clusters, summary)."""
    part = _nodes_part(inputs, nodes)
    head = encode_json(_head_document(inputs))
    tail_doc: StatusTailDocument = {
        "clusters": clusters_document(inputs, part.node_counts),
        "summary": part.summary,
        "cluster_health": _cluster_health(inputs, part),
        "findings": _findings(inputs),
    }
    tail = encode_json(tail_doc)
    return b"".join((head[:-1], b',"nodes":', part.nodes_json, b",", tail[1:]))


def _verdict_clusters(inputs: StatusInputs) -> Sequence[str]:
    return inputs.verdict_clusters or [inputs.local.cluster]


def _cluster_health(inputs: StatusInputs, part: NodesPart) -> list[ClusterHealthDocument]:
    return cluster_health_document(
        _verdict_clusters(inputs),
        inputs.cluster_summaries,
        part.cluster_counts,
        now=inputs.now,
        local_node=f"{inputs.local.cluster}/{inputs.local.name}",
    )


# The paths of this node's own probes that a finding of each kind rests on (for `path`:
# when this node is its observer). Probes of these, all OK and newer than the summary
# that carries the finding, contradict it.
_FINDING_PATHS: dict[str, tuple[tuple[TargetType, Protocol], ...]] = {
    "mtu-blackhole": ((TargetType.NODE, Protocol.ICMP_DF),),
    "udp-blocked": ((TargetType.NODE, Protocol.UDP),),
    "agent-down": ((TargetType.NODE, Protocol.HTTP),),
    "endpoint-down": ((TargetType.ENDPOINT, Protocol.ICMP), (TargetType.ENDPOINT, Protocol.HTTP)),
    "node-down": ((TargetType.NODE, Protocol.ICMP), (TargetType.NODE, Protocol.HTTP)),
    "ingress-blocked": ((TargetType.NODE, Protocol.ICMP), (TargetType.NODE, Protocol.HTTP)),
    "path": tuple((t, p) for t in TargetType for p in REACHABILITY_PROTOCOLS),
}


def _contradicted_by(inputs: StatusInputs, finding: FindingDocument, since: float) -> str | None:
    """`lab1/node2` when this node's own probes of it on the finding's paths all passed
    after `since` (the summary's time); None when they do not contradict it."""
    paths = _FINDING_PATHS.get(finding["kind"])
    if paths is None or not finding["nodes"]:
        return None
    target = finding["nodes"][-1]
    me = f"{inputs.local.cluster}/{inputs.local.name}"
    if target == me or (finding["kind"] == "path" and finding["nodes"][0] != me):
        return None  # its own probes of itself do not cross the network
    cluster, _, node = target.partition("/")
    seen = [
        inputs.summaries.get(PathKey(cluster, node, target_type, protocol))
        for target_type, protocol in paths
    ]
    probed = [s for s in seen if s is not None and s.last is not None]
    newer = all(s.last is not None and s.last.ok and s.last.started_at > since for s in probed)
    return target if probed and newer else None


def _findings(inputs: StatusInputs) -> list[FindingDocument]:
    """The followed summaries' findings; one that this node's newer probes contradict
    (`lab fault clear`, then `status --probe`) is marked `stale` and says why."""
    docs = findings_document(_verdict_clusters(inputs), inputs.cluster_summaries)
    for doc in docs:
        cluster = doc["nodes"][0].partition("/")[0] if doc["nodes"] else ""
        summary = inputs.cluster_summaries.get(cluster)
        if summary is None:
            continue
        target = _contradicted_by(inputs, doc, summary.generated_at)
        if target is not None:
            doc["stale"] = True
            doc["evidence"] += f" (stale: this node's newer probes of {target} pass)"
    return docs


def clusters_document(
    inputs: StatusInputs, node_counts: Mapping[str, int]
) -> list[ClusterDocument]:
    """The `clusters` list: the local cluster, then each remote one, with etcd state;
    `node_counts`: cluster name -> nodes listed in `nodes`."""
    clusters = list(inputs.clusters) or [
        ClusterState(
            name=inputs.local.cluster,
            id=None,
            local=True,
            state="ok" if inputs.etcd.up else "etcd_down",
            etcd=inputs.etcd,
        )
    ]
    return [
        {
            "name": cluster.name,
            "id": cluster.id,
            "local": cluster.local,
            "state": cluster.state,
            "error": cluster.error,
            "etcd": etcd_document(cluster.etcd),
            "node_count": node_counts.get(cluster.name, 0),
        }
        for cluster in clusters
    ]


def etcd_document(etcd: EtcdState) -> EtcdDocument:
    doc: EtcdDocument = {
        "up": etcd.up,
        "since": iso_time(etcd.since),
        "last_error": etcd.last_error,
    }
    if etcd.endpoint is not None:
        doc["endpoint"] = etcd.endpoint
    return doc


def build_healthz_document(*, started_at: float, now: float, etcd: EtcdState) -> HealthzDocument:
    """What `GET /v1/healthz` answers: the agent is up (it answered), and etcd's state."""
    return {
        "status": "ok",
        "started_at": iso_time(started_at),
        "uptime_s": round(max(0.0, now - started_at), 3),
        "etcd": etcd_document(etcd),
    }
