"""msgpack <-> model for the two per-cluster etcd values: the aggregator's claim and the
cluster summary it publishes. Pure, no I/O (docs/kvstore.md "Cluster summary").

    meshhealth/state/aggregator/v1/<cluster>   AggregatorClaim   (the holder's lease)
    meshhealth/state/summary/v1/<cluster>      ClusterSummary    (the holder's lease)

One agent per cluster holds the claim and is the only one that reads every health
report of its cluster; it publishes the verdict (how many nodes are reachable,
unreachable, suspect, unknown, by how many observers), how many observers fail to reach
each target with failures (others read these as confirmations of their own suspicion:
`failing_observers`) and diagnosis's findings. Every other agent reads this one key.

As in meshhealth.codec, decoding treats its input as untrusted (DecodeError naming the
field), unknown extra fields are ignored, encoding validates through the decoder, and
`v` is the codec's SCHEMA_VERSION.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import msgpack

from meshhealth import codec, defaults, health_wire, keys
from meshhealth import wire_fields as wf
from meshhealth.wire_fields import DecodeError as DecodeError  # noqa: PLC0414 (re-export)

# Caps on repeated fields: far above any real use, low enough to bound memory.
MAX_FINDINGS = 1_000
MAX_FINDING_NODES = 10_000
MAX_GROUPS = 64
MAX_FAILING_TARGETS = health_wire.MAX_TARGETS
MAX_COUNT = 10_000_000
MAX_EVIDENCE_CHARS = 1_000
MAX_KIND_CHARS = 64
# The node states a summary names (every node that is not reachable) and the observers
# it discounts: one per node at most, bounded like the targets of a report.
MAX_NODE_STATES = health_wire.MAX_TARGETS
MAX_DISCOUNTED = health_wire.MAX_TARGETS
NODE_STATES = ("unreachable", "suspect", "unknown")
# A discounted observer's reason: a finding kind or `degraded`, printed as it is.
_REASON = re.compile(rf"[a-z][a-z0-9-]{{0,{MAX_KIND_CHARS - 1}}}")


@dataclass(frozen=True, slots=True)
class AggregatorClaim:
    """Who aggregates `cluster`: the holder's node name, and since when (unix s)."""

    cluster: str
    node: str
    since: float


@dataclass(frozen=True, slots=True)
class NodeCounts:
    """The cluster's nodes by verdict (documents.reachability `node_consensus`)."""

    reachable: int = 0
    unreachable: int = 0
    suspect: int = 0
    unknown: int = 0

    @property
    def total(self) -> int:
        return self.reachable + self.unreachable + self.suspect + self.unknown


@dataclass(frozen=True, slots=True)
class SummaryFinding:
    """One finding as published: the JSON of `meshhealth diagnose`, with unix times."""

    kind: str  # a diagnosis FindingKind value (an unknown kind is kept: newer writers)
    nodes: tuple[str, ...]  # "cluster/node", the culprits
    confidence: float  # 0 .. 1
    since: float  # unix seconds
    evidence: str
    groups: tuple[tuple[str, ...], ...] = ()  # partition only


@dataclass(frozen=True, slots=True)
class DiscountedObserver:
    """An observer whose own row explains its failures, so they do not count against the
    nodes it fails to reach: why (a finding's kind, or `degraded` from its own report),
    how many of the targets it observed it fails, and how many of its own observers
    reach it."""

    reason: str
    fails: int = 0
    targets: int = 0
    reached_by: int = 0
    observers: int = 0


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    cluster: str
    aggregator: str  # the node name of the agent that wrote it
    generated_at: float  # unix seconds of the matrix it was built from
    nodes: NodeCounts
    observers_min: int  # fewest fresh observers of any node of the cluster
    observers_median: float
    # "cluster/node" -> fresh observers that fail to reach it (only targets with failures)
    failing_observers: Mapping[str, int] = field(default_factory=dict)
    findings: tuple[SummaryFinding, ...] = ()
    # "cluster/node" -> its state, for every node of the cluster that is not reachable
    node_states: Mapping[str, str] = field(default_factory=dict)
    # "cluster/node" -> the observers the verdict left out, and why
    discounted: Mapping[str, DiscountedObserver] = field(default_factory=dict)

    def same_content(self, other: ClusterSummary | None) -> bool:
        """Equal but for `generated_at`: nothing a reader would act on changed."""
        return other is not None and replace(other, generated_at=self.generated_at) == self


def node_label(cluster: str, node: str) -> str:
    return f"{cluster}/{node}"


# --- encoding ------------------------------------------------------------------------


def encode_claim(claim: AggregatorClaim) -> bytes:
    return _encode("aggregator claim", claim_to_wire(claim), lambda m: claim_to_wire(_claim(m)))


def encode_summary(summary: ClusterSummary) -> bytes:
    wire = summary_to_wire(summary)
    return _encode("cluster summary", wire, lambda m: summary_to_wire(_summary(m)))


def _encode(
    what: str,
    wire: dict[str, object],
    canonical: Callable[[Mapping[str, object]], dict[str, object]],
) -> bytes:
    try:
        checked = canonical(wire)
    except DecodeError as error:
        raise ValueError(f"cannot encode {what}: {error}") from None
    data: bytes = msgpack.packb(checked, use_bin_type=True)
    if len(data) > defaults.MAX_VALUE_BYTES:
        raise ValueError(
            f"cannot encode {what}: {len(data)} bytes, more than {defaults.MAX_VALUE_BYTES}"
        )
    return data


def claim_to_wire(claim: AggregatorClaim) -> dict[str, object]:
    return {
        "v": codec.SCHEMA_VERSION,
        "cluster": claim.cluster,
        "node": claim.node,
        "since": claim.since,
    }


def summary_to_wire(s: ClusterSummary) -> dict[str, object]:
    return {
        "v": codec.SCHEMA_VERSION,
        "cluster": s.cluster,
        "aggregator": s.aggregator,
        "generated_at": s.generated_at,
        "nodes": {
            "reachable": s.nodes.reachable,
            "unreachable": s.nodes.unreachable,
            "suspect": s.nodes.suspect,
            "unknown": s.nodes.unknown,
        },
        "observers": {"min": s.observers_min, "median": s.observers_median},
        "failing_observers": dict(sorted(s.failing_observers.items())),
        "findings": [_finding_to_wire(f) for f in s.findings],
        "node_states": dict(sorted(s.node_states.items())),
        "discounted": {
            name: {
                "reason": d.reason,
                "fails": d.fails,
                "targets": d.targets,
                "reached_by": d.reached_by,
                "observers": d.observers,
            }
            for name, d in sorted(s.discounted.items())
        },
    }


def _finding_to_wire(f: SummaryFinding) -> dict[str, object]:
    wire: dict[str, object] = {
        "kind": f.kind,
        "nodes": list(f.nodes),
        "confidence": f.confidence,
        "since": f.since,
        "evidence": f.evidence,
    }
    if f.groups:
        wire["groups"] = [list(group) for group in f.groups]
    return wire


def to_jsonable(value: AggregatorClaim | ClusterSummary) -> dict[str, object]:
    """The wire map (field names as on the wire, `v` included), JSON-ready."""
    if isinstance(value, AggregatorClaim):
        return claim_to_wire(value)
    return summary_to_wire(value)


# --- decoding ------------------------------------------------------------------------


def decode_claim(data: bytes) -> AggregatorClaim:
    return _claim(codec.unpack_map(data))


def decode_summary(data: bytes) -> ClusterSummary:
    return _summary(codec.unpack_map(data))


def decode_cluster_value(key: str | bytes, data: bytes) -> AggregatorClaim | ClusterSummary:
    """Decode the value under an aggregator or summary key; it must agree with the key."""
    try:
        parsed = keys.parse_key(key)
    except keys.InvalidKey as error:
        raise DecodeError(str(error)) from None
    value: AggregatorClaim | ClusterSummary
    if parsed.kind is keys.KeyKind.AGGREGATOR:
        value = decode_claim(data)
    elif parsed.kind is keys.KeyKind.SUMMARY:
        value = decode_summary(data)
    else:
        raise DecodeError(f"not an aggregator or summary key: {parsed.kind.value}")
    if value.cluster != parsed.cluster:
        raise DecodeError(
            f"field 'cluster': value has {value.cluster!r} but the key says {parsed.cluster!r}"
        )
    return value


def _claim(m: Mapping[str, object]) -> AggregatorClaim:
    cluster = wf.cluster_name(m, "cluster")
    node = wf.node_name(m, "node")
    since = wf.seconds(wf.field(m, "since"), "since")
    return AggregatorClaim(cluster, node, since)


def _summary(m: Mapping[str, object]) -> ClusterSummary:
    cluster = wf.cluster_name(m, "cluster")
    aggregator = wf.node_name(m, "aggregator")
    generated_at = wf.seconds(wf.field(m, "generated_at"), "generated_at")
    nodes = _map(m, "nodes")
    counts = NodeCounts(**{name: _count(nodes, name, "nodes") for name in _COUNT_NAMES})
    observers = _map(m, "observers")
    observers_min = _count(observers, "min", "observers")
    observers_median = wf.seconds(wf.field(observers, "median", "observers"), "observers.median")
    failing = _map(m, "failing_observers")
    if len(failing) > MAX_FAILING_TARGETS:
        raise DecodeError(
            f"field 'failing_observers': {len(failing)} items, at most {MAX_FAILING_TARGETS}"
        )
    failing_observers = {
        _node_ref(name, "failing_observers"): _count(failing, name, "failing_observers")
        for name in failing
    }
    raw_findings = wf.list_of(m, "findings", dict, MAX_FINDINGS)
    findings = tuple(_finding(raw, f"findings[{i}]") for i, raw in enumerate(raw_findings))
    node_states = _node_states(m)
    discounted = _discounted(m)
    return ClusterSummary(
        cluster=cluster,
        aggregator=aggregator,
        generated_at=generated_at,
        nodes=counts,
        observers_min=observers_min,
        observers_median=observers_median,
        failing_observers=dict(sorted(failing_observers.items())),
        findings=findings,
        node_states=node_states,
        discounted=discounted,
    )


def _optional_map(m: Mapping[str, object], name: str, limit: int) -> Mapping[str, object]:
    """A map field that older writers do not send (absent: empty), at most `limit` items."""
    if m.get(name) is None:
        return {}
    value = _map(m, name)
    if len(value) > limit:
        raise DecodeError(f"field '{name}': {len(value)} items, at most {limit}")
    return value


def _node_states(m: Mapping[str, object]) -> dict[str, str]:
    states = _optional_map(m, "node_states", MAX_NODE_STATES)
    out = {}
    for name, state in states.items():
        ref = _node_ref(name, "node_states")
        if state not in NODE_STATES:
            raise DecodeError(
                f"field 'node_states.{ref}': must be one of {', '.join(NODE_STATES)}, "
                f"got {wf.short(state)}"
            )
        out[ref] = str(state)
    return dict(sorted(out.items()))


_DISCOUNTED_COUNTS = ("fails", "targets", "reached_by", "observers")


def _discounted(m: Mapping[str, object]) -> dict[str, DiscountedObserver]:
    entries = _optional_map(m, "discounted", MAX_DISCOUNTED)
    out = {}
    for name, entry in entries.items():
        ref = _node_ref(name, "discounted")
        where = f"discounted.{ref}"
        if not isinstance(entry, dict):
            raise DecodeError(f"field '{where}': must be a map, got {wf.type_name(entry)}")
        reason = wf.string(entry, "reason", where)
        if not _REASON.fullmatch(reason):
            raise DecodeError(
                f"field '{where}.reason': must be a code like 'egress-blocked' "
                f"(a-z, 0-9, '-', at most {MAX_KIND_CHARS}), got {wf.short(reason)}"
            )
        out[ref] = DiscountedObserver(
            reason,
            *(
                _count(entry, name, where)
                for name in ("fails", "targets", "reached_by", "observers")
            ),
        )
    return dict(sorted(out.items()))


_COUNT_NAMES = ("reachable", "unreachable", "suspect", "unknown")


def _map(m: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = wf.field(m, name)
    if not isinstance(value, dict):
        raise DecodeError(f"field '{name}': must be a map, got {wf.type_name(value)}")
    return value


def _count(m: Mapping[str, object], name: str, where: str) -> int:
    value = wf.field(m, name, where)
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise DecodeError(
            f"field '{wf.join(where, name)}': must be an integer 0..{MAX_COUNT}, "
            f"got {wf.short(value)}"
        )
    return value


def _node_ref(value: object, where: str) -> str:
    """`cluster/node`, both parts valid."""
    text = wf.as_string(value, where)
    cluster, _, node = text.partition("/")
    try:
        keys.validate_cluster_name(cluster)
        keys.validate_node_name(node)
    except ValueError as error:
        raise DecodeError(
            f"field '{where}': {wf.short(text)} is not cluster/node: {error}"
        ) from None
    return text


def _finding(m: Mapping[str, object], where: str) -> SummaryFinding:
    kind = wf.text(wf.string(m, "kind", where), wf.join(where, "kind"))
    if len(kind) > MAX_KIND_CHARS:
        raise DecodeError(f"field '{where}.kind': longer than {MAX_KIND_CHARS} characters")
    nodes = _node_list(wf.field(m, "nodes", where), wf.join(where, "nodes"))
    confidence = wf.number(wf.field(m, "confidence", where), wf.join(where, "confidence"))
    if not 0.0 <= confidence <= 1.0:
        raise DecodeError(f"field '{where}.confidence': must be 0..1, got {confidence}")
    since = wf.seconds(wf.field(m, "since", where), wf.join(where, "since"))
    evidence = wf.string(m, "evidence", where)
    if len(evidence) > MAX_EVIDENCE_CHARS:
        raise DecodeError(f"field '{where}.evidence': longer than {MAX_EVIDENCE_CHARS} characters")
    groups: tuple[tuple[str, ...], ...] = ()
    raw_groups = m.get("groups")
    if raw_groups is not None:
        if not isinstance(raw_groups, list) or len(raw_groups) > MAX_GROUPS:
            raise DecodeError(f"field '{where}.groups': must be a list of at most {MAX_GROUPS}")
        groups = tuple(
            _node_list(group, f"{where}.groups[{i}]") for i, group in enumerate(raw_groups)
        )
    return SummaryFinding(kind, nodes, confidence, since, evidence, groups)


def _node_list(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise DecodeError(f"field '{where}': must be a list, got {wf.type_name(value)}")
    if len(value) > MAX_FINDING_NODES:
        raise DecodeError(f"field '{where}': {len(value)} items, at most {MAX_FINDING_NODES}")
    return tuple(_node_ref(item, f"{where}[{i}]") for i, item in enumerate(value))
