"""The status document: what `GET /v1/status` answers and `meshhealth status` prints.

A pure builder from the agent's state (no I/O, no clock: `now` is an input). Field
names are documented in docs/status.md and follow Cilium's HealthStatusResponse, with
snake_case names and seconds. The module holds what the document is built from
(`StatusInputs` and its parts), the per-node part built once per round (`NodesCache`,
`build_nodes_part`: only the head changes per request, and `encode_status_document`
splices the cached JSON) and the whole document. Reachability follows
meshhealth.documents.reachability; the JSON types are in documents/status_schema.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol as TypingProtocol

from meshhealth.documents.cluster_health import cluster_health_document, findings_document
from meshhealth.documents.plan import probe_plan_document
from meshhealth.documents.reachability import (
    combined_reachability,
    status_reachability,
)
from meshhealth.documents.status_schema import (
    AddressDocument,
    ClusterDocument,
    ClusterHealthDocument,
    EtcdDocument,
    FindingDocument,
    HealthzDocument,
    IndirectDocument,
    LocalDocument,
    LocalHealthDocument,
    NodeDocument,
    PathDocument,
    PrimaryAddressDocument,
    StatusDocument,
    StatusHeadDocument,
    StatusTailDocument,
    SummaryDocument,
    TcpPathDocument,
)
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    STATUS_TEXT,
    PathKey,
    PathSummary,
    PlanInfo,
    ProbeStatus,
    Protocol,
    Reachability,
    Target,
    TargetType,
    status_text,
    tcp_ports_of,
)
from meshhealth.naming import node_order
from meshhealth.timefmt import iso_time
from meshhealth.wire.summary import ClusterSummary


class PathVerdictLike(TypingProtocol):
    """A path's suspicion verdict (meshhealth.diagnosis.suspicion.PathSuspicion)."""

    @property
    def verdict(self) -> str: ...  # ok | suspect | unreachable

    @property
    def since(self) -> float | None: ...  # unix seconds the verdict was entered


Verdicts = Mapping[PathKey, PathVerdictLike]
NO_VERDICTS: Verdicts = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class LocalNode:
    """The node this agent runs on."""

    cluster: str
    name: str
    node_ip: str
    health_ip: str | None
    node_ip_secondary: str | None = None  # dual stack: the other family's addresses
    health_ip_secondary: str | None = None


@dataclass(frozen=True, slots=True)
class EtcdState:
    """The agent's view of its etcd connection."""

    up: bool
    since: float | None = None  # unix seconds of the last change of `up`
    last_error: str | None = None  # one line, when down
    endpoint: str | None = None  # the etcd member requests go to now


@dataclass(frozen=True, slots=True)
class RoundState:
    """The prober loop's progress."""

    running: bool
    last_started_at: float | None = None  # unix seconds of the newest finished round
    last_duration_s: float | None = None
    completed: int = 0  # rounds finished since the agent started


@dataclass(frozen=True, slots=True)
class ClusterState:
    """One cluster of the mesh (the local one, or a remote one) for the `clusters` list."""

    name: str
    id: int | None  # None while not known (a remote whose cluster-config was not read)
    local: bool
    state: str  # ok | etcd_down | waiting | refused (meshhealth.agent.membership.clustermesh)
    etcd: EtcdState
    error: str | None = None  # why a remote is refused or waiting


@dataclass(frozen=True, slots=True)
class StatusInputs:
    local: LocalNode
    targets: Sequence[Target]
    summaries: Mapping[PathKey, PathSummary]
    probe_time: float | None  # unix seconds of the round the results come from
    probe_interval_s: float
    etcd: EtcdState
    round: RoundState
    now: float  # unix seconds; the document's `generated_at`
    clusters: Sequence[ClusterState] = ()  # local first; empty: the local one is derived
    local_health: LocalHealthDocument | None = None  # the agent's own health
    # each path's suspicion verdict (none: by status alone)
    verdicts: Verdicts = field(default_factory=lambda: NO_VERDICTS)
    # The followed clusters' summaries (cluster -> summary) and the clusters to give a
    # verdict for (empty: the local one).
    cluster_summaries: Mapping[str, ClusterSummary] = field(default_factory=dict)
    verdict_clusters: Sequence[str] = ()
    plan: PlanInfo | None = None  # the probe plan of the round `targets` come from


def path_state(summary: PathSummary | None, verdict: PathVerdictLike | None = None) -> Reachability:
    """reachable / suspect / unreachable / unknown, from a path's newest result and its
    suspicion verdict (None: the result alone decides)."""
    return status_reachability(
        None if summary is None or summary.last is None else summary.last.status,
        None if verdict is None else verdict.verdict,
    )


def combined_state(states: Iterable[Reachability]) -> Reachability:
    """Several paths as one (meshhealth.documents.reachability.combined_reachability)."""
    return combined_reachability(states)


# Indirect-probe findings per path (IndirectDocument), for paths that fail now.
IndirectNotes = Mapping[PathKey, IndirectDocument]
_NO_NOTES: IndirectNotes = {}


def path_document(
    summary: PathSummary | None,
    indirect: IndirectDocument | None = None,
    verdict: PathVerdictLike | None = None,
) -> PathDocument:
    """The PATH object of the schema (status, text, latency, loss, percentiles, times,
    the verdict's state); `indirect` is added while the path fails."""
    if summary is None or summary.last is None:
        status = ProbeStatus.UNKNOWN
        text = STATUS_TEXT[status]
        detail = ""
    else:
        status = summary.last.status
        text = status_text(summary.last)
        detail = summary.last.detail
    state = path_state(summary, verdict)
    doc: PathDocument = {
        "status": status.value,
        "text": text,
        "detail": detail,
        "latency_s": None if summary is None else summary.rtt_last_s,
        "loss": 0.0 if summary is None else summary.loss,
        "rtt_p50_s": None if summary is None else summary.rtt_p50_s,
        "rtt_p95_s": None if summary is None else summary.rtt_p95_s,
        "rtt_max_s": None if summary is None else summary.rtt_max_s,
        "samples": 0 if summary is None else summary.samples,
        "last_probed": None if summary is None else iso_time(summary.last_probed),
        "last_success": None if summary is None else iso_time(summary.last_success),
        "consecutive_failures": 0 if summary is None else summary.consecutive_failures,
        "state": state,
        "state_since": None if state == "unknown" or verdict is None else iso_time(verdict.since),
    }
    if summary is not None and summary.last is not None and summary.last.hops is not None:
        doc["hops"] = summary.last.hops
    if indirect is not None and status not in (ProbeStatus.OK, ProbeStatus.UNKNOWN):
        doc["indirect"] = indirect
    return doc


def _one_address(
    target: Target,
    target_type: TargetType,
    ip: str,
    summaries: Mapping[PathKey, PathSummary],
    indirect: IndirectNotes,
    *,
    secondary: bool,
    verdicts: Verdicts,
    tcp_ports: Sequence[int] = (),
) -> tuple[AddressDocument, list[Reachability]]:
    icmp_key = PathKey(target.cluster, target.node, target_type, Protocol.ICMP, secondary)
    http_key = PathKey(target.cluster, target.node, target_type, Protocol.HTTP, secondary)
    icmp, http = (
        path_document(summaries.get(key), indirect.get(key), verdicts.get(key))
        for key in (icmp_key, http_key)
    )
    doc: AddressDocument = {"ip": ip, "icmp": icmp, "http": http}
    if target_type is TargetType.NODE and not secondary:  # the MTU and L4 paths, if run
        df_key = PathKey(target.cluster, target.node, target_type, Protocol.ICMP_DF)
        df = summaries.get(df_key)
        if df is not None:
            size = 0 if df.last is None else df.last.size_bytes
            doc["icmp_df"] = {**path_document(df, None, verdicts.get(df_key)), "size_bytes": size}
        udp_key = PathKey(target.cluster, target.node, target_type, Protocol.UDP)
        udp = summaries.get(udp_key)
        if udp is not None:
            doc["udp"] = path_document(udp, None, verdicts.get(udp_key))
        tcp: list[TcpPathDocument] = []
        for port in tcp_ports:
            key = PathKey(target.cluster, target.node, target_type, Protocol.TCP, port=port)
            found = summaries.get(key)
            if found is not None:
                tcp.append({**path_document(found, None, verdicts.get(key)), "port": port})
        if tcp:
            doc["tcp"] = tcp
    return doc, [icmp["state"], http["state"]]


def _address_document(
    target: Target,
    target_type: TargetType,
    summaries: Mapping[PathKey, PathSummary],
    indirect: IndirectNotes = _NO_NOTES,
    *,
    verdicts: Verdicts = NO_VERDICTS,
    tcp_ports: Sequence[int] = (),
) -> tuple[PrimaryAddressDocument | None, list[Reachability]]:
    """The `host` or `health_endpoint` object and the states of all its paths (both
    families of a dual-stack node: one rule for the node, as for any other paths)."""
    ip = target.address(target_type)
    if ip is None:
        return None, []
    primary, states = _one_address(
        target,
        target_type,
        ip,
        summaries,
        indirect,
        secondary=False,
        verdicts=verdicts,
        tcp_ports=tcp_ports,
    )
    doc: PrimaryAddressDocument = {"primary_address": primary}
    secondary_ip = target.address(target_type, secondary=True)
    if secondary_ip is not None:
        secondary, secondary_states = _one_address(
            target,
            target_type,
            secondary_ip,
            summaries,
            indirect,
            secondary=True,
            verdicts=verdicts,
        )
        doc["secondary_addresses"] = [secondary]
        states += secondary_states
    return doc, states


def node_document(
    target: Target,
    summaries: Mapping[PathKey, PathSummary],
    *,
    is_local: bool,
    indirect: IndirectNotes = _NO_NOTES,
    verdicts: Verdicts = NO_VERDICTS,
    tcp_ports: Sequence[int] = (),
) -> NodeDocument:
    """One entry of `nodes`; `tcp_ports`: the ports of its TCP connect paths, if any."""
    host, host_states = _address_document(
        target, TargetType.NODE, summaries, indirect, verdicts=verdicts, tcp_ports=tcp_ports
    )
    assert host is not None  # every target has a NodeIP
    endpoint, endpoint_states = _address_document(
        target, TargetType.ENDPOINT, summaries, indirect, verdicts=verdicts
    )
    host_state = combined_state(host_states)
    endpoint_state = combined_state(endpoint_states)
    node_state = combined_state(host_states + endpoint_states)
    doc: NodeDocument = {
        "cluster": target.cluster,
        "name": target.node,
        "is_local": is_local,
        "host": host,
        "health_endpoint": endpoint,
        "reachable": node_state == "reachable",
        "state": node_state,
        # Cilium's `cilium status --verbose` table: the Node and Endpoints columns.
        "host_state": host_state,
        "health_endpoint_state": endpoint_state if endpoint is not None else None,
    }
    down_since = iso_time(target.agent_down_since)
    if down_since is not None:
        doc["agent_down_since"] = down_since
    return doc


def _ordered_targets(local: LocalNode, targets: Sequence[Target]) -> list[Target]:
    """Local node first, then by cluster/name; the local node is listed even before
    discovery has seen its own entries."""
    local_key = (local.cluster, local.name)
    by_key = {(t.cluster, t.node): t for t in targets}
    local_target = by_key.pop(
        local_key,
        Target(
            local.cluster,
            local.name,
            local.node_ip,
            local.health_ip,
            local.node_ip_secondary,
            local.health_ip_secondary,
        ),
    )
    return [local_target] + [by_key[key] for key in sorted(by_key, key=node_order)]


@dataclass(frozen=True, slots=True)
class NodesPart:
    """The part of the document that only changes with a round: `nodes` (also encoded,
    compact JSON) and `summary`. Treat it as read-only: it is shared between answers."""

    nodes: list[NodeDocument]
    nodes_json: bytes  # `nodes` as compact UTF-8 JSON
    summary: SummaryDocument
    node_counts: dict[str, int]  # cluster name -> nodes listed
    # cluster name -> `summary` of its nodes only (this node's view of each cluster)
    cluster_counts: dict[str, SummaryDocument] = field(default_factory=dict)


def build_nodes_part(
    local: LocalNode,
    targets: Sequence[Target],
    summaries: Mapping[PathKey, PathSummary],
    indirect: IndirectNotes = _NO_NOTES,
    verdicts: Verdicts = NO_VERDICTS,
) -> NodesPart:
    """`nodes` and `summary` of the document, from the probe set and the summaries (and
    the indirect-probe findings of failing paths, and the paths' verdicts)."""
    tcp_ports = tcp_ports_of(summaries)
    nodes = [
        node_document(
            target,
            summaries,
            is_local=(target.cluster, target.node) == (local.cluster, local.name),
            indirect=indirect,
            verdicts=verdicts,
            tcp_ports=tcp_ports,
        )
        for target in _ordered_targets(local, targets)
    ]
    node_counts: dict[str, int] = {}
    by_cluster: dict[str, list[Reachability]] = {}
    for node in nodes:
        node_counts[node["cluster"]] = node_counts.get(node["cluster"], 0) + 1
        by_cluster.setdefault(node["cluster"], []).append(node["state"])
    return NodesPart(
        nodes=nodes,
        nodes_json=encode_json(nodes),
        summary=_counts([node["state"] for node in nodes]),
        node_counts=node_counts,
        cluster_counts={cluster: _counts(states) for cluster, states in by_cluster.items()},
    )


def _counts(states: Sequence[Reachability]) -> SummaryDocument:
    """Nodes by state, and how many."""
    counts = Counter(states)
    return {
        "reachable": counts[Reachability.REACHABLE],
        "unreachable": counts[Reachability.UNREACHABLE],
        "suspect": counts[Reachability.SUSPECT],
        "unknown": counts[Reachability.UNKNOWN],
        "total": len(states),
    }


class NodesCache:
    """Keeps the last NodesPart; builds a new one only when the probe set or the
    summaries change. Building and encoding 300 nodes costs ~10 ms: once per round,
    not once per `GET /v1/status` (bench/admin_latency.py).

    `summaries`, `indirect` and `verdicts` are compared by identity: pass a new mapping
    when they change (the agent takes a fresh `StatsBook.summaries()` after each round,
    and `PathVerdicts.snapshot()` is a new one after a change), never mutate one."""

    def __init__(self, local: LocalNode) -> None:
        self.local = local
        self.builds = 0
        self._targets: tuple[Target, ...] = ()
        self._summaries: Mapping[PathKey, PathSummary] | None = None
        self._indirect: IndirectNotes = _NO_NOTES
        self._verdicts: Verdicts = NO_VERDICTS
        self._part: NodesPart | None = None

    def get(
        self,
        targets: Sequence[Target],
        summaries: Mapping[PathKey, PathSummary],
        indirect: IndirectNotes = _NO_NOTES,
        verdicts: Verdicts = NO_VERDICTS,
    ) -> NodesPart:
        key = tuple(targets)
        if (
            self._part is None
            or summaries is not self._summaries
            or indirect is not self._indirect
            or verdicts is not self._verdicts
            or key != self._targets
        ):
            self._part = build_nodes_part(self.local, key, summaries, indirect, verdicts)
            self._targets, self._summaries = key, summaries
            self._indirect, self._verdicts = indirect, verdicts
            self.builds += 1
        return self._part


def encode_json(value: object) -> bytes:
    """Compact UTF-8 JSON, as the admin API sends documents."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


# The status document's builders and inputs, wherever they are written: importers use
# this module.

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
