"""The `nodes` part of the status document: one entry per target, its paths and their
states, built once per round and kept with its JSON (`NodesCache`). Pure.

Reachability of paths and nodes follows meshhealth.documents.reachability: a path's
state is its suspicion verdict (without one, its newest status); a node is reachable
when it has at least one probed path and every probed path is reachable.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from meshhealth.documents.reachability import (
    combined_reachability,
    status_reachability,
)
from meshhealth.documents.status_inputs import (
    NO_VERDICTS,
    LocalNode,
    PathVerdictLike,
    Verdicts,
)
from meshhealth.documents.status_schema import (
    AddressDocument,
    IndirectDocument,
    NodeDocument,
    PathDocument,
    PrimaryAddressDocument,
    SummaryDocument,
    TcpPathDocument,
)
from meshhealth.model import (
    STATUS_TEXT,
    PathKey,
    PathSummary,
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
