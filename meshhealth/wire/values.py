"""Any etcd value by its key: decode the value stored under a key (it must agree with
the key), decode a listing of (key, value) pairs, and the JSON form of any value (its
wire map) for `meshhealth inspect` and the docs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from meshhealth.model import ClusterConfig, HealthReport, IPEntry, Node, RetainedNode
from meshhealth.wire import keys
from meshhealth.wire.claim import AggregatorClaim, claim_to_wire, decode_claim
from meshhealth.wire.cluster_config import cluster_config_to_wire, decode_cluster_config
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.health import decode_health_report, health_to_wire
from meshhealth.wire.ip_entry import decode_ip_entry, ip_entry_to_wire
from meshhealth.wire.node import decode_node, node_to_wire
from meshhealth.wire.retained import decode_retained, retained_to_wire
from meshhealth.wire.summary import ClusterSummary, decode_summary, summary_to_wire

Entry = Node | IPEntry | ClusterConfig | HealthReport | RetainedNode
E = TypeVar("E", Node, IPEntry, ClusterConfig, HealthReport, RetainedNode)


def to_jsonable(obj: Entry | AggregatorClaim | ClusterSummary) -> dict[str, object]:
    """The wire map of `obj` (field names as on the wire, `v` included), JSON-ready."""
    if isinstance(obj, Node):
        return node_to_wire(obj)
    if isinstance(obj, RetainedNode):
        return retained_to_wire(obj)
    if isinstance(obj, IPEntry):
        return ip_entry_to_wire(obj)
    if isinstance(obj, ClusterConfig):
        return cluster_config_to_wire(obj)
    if isinstance(obj, HealthReport):
        return health_to_wire(obj)
    if isinstance(obj, AggregatorClaim):
        return claim_to_wire(obj)
    if isinstance(obj, ClusterSummary):
        return summary_to_wire(obj)
    raise TypeError(f"not a meshhealth entry: {type(obj).__name__}")


def decode_value(key: str | bytes, data: bytes) -> Entry:
    """Decode the value stored under `key` and check that it agrees with the key."""
    parsed = _parse(key)
    value: Entry
    if parsed.kind is keys.KeyKind.NODE:
        value = decode_node(data)
        _agree("cluster", parsed.cluster, value.cluster)
        _agree("name", parsed.name, value.name)
    elif parsed.kind is keys.KeyKind.IP:
        value = decode_ip_entry(data)
        _agree("ip", parsed.name, value.ip)
    elif parsed.kind is keys.KeyKind.HEALTH:
        value = decode_health_report(data)
        _agree("cluster", parsed.cluster, value.cluster)
        _agree("node", parsed.name, value.node)
    elif parsed.kind is keys.KeyKind.RETAINED:
        value = decode_retained(data)
        _agree("cluster", parsed.cluster, value.node.cluster)
        _agree("name", parsed.name, value.node.name)
    elif parsed.kind is keys.KeyKind.CLUSTER_CONFIG:
        value = decode_cluster_config(data)
        _agree("name", parsed.cluster, value.name)
    else:  # one value per cluster: decode_cluster_value reads those
        raise DecodeError(f"a {parsed.kind.value} value: not a node's entry")
    return value


def decode_cluster_value(key: str | bytes, data: bytes) -> AggregatorClaim | ClusterSummary:
    """Decode the value under an aggregator or summary key; it must agree with the key."""
    parsed = _parse(key)
    value: AggregatorClaim | ClusterSummary
    if parsed.kind is keys.KeyKind.AGGREGATOR:
        value = decode_claim(data)
    elif parsed.kind is keys.KeyKind.SUMMARY:
        value = decode_summary(data)
    else:
        raise DecodeError(f"not an aggregator or summary key: {parsed.kind.value}")
    _agree("cluster", parsed.cluster, value.cluster)
    return value


def decode_entries(items: Iterable[tuple[str, bytes]], kind: type[E]) -> tuple[list[E], list[str]]:
    """(key, value) pairs -> the values that decode to a `kind`, and one line
    (`key: why`) per value that does not decode. Values of other kinds are left out."""
    found: list[E] = []
    errors: list[str] = []
    for key, value in items:
        try:
            entry = decode_value(key, value)
        except DecodeError as error:
            errors.append(f"{key}: {error}")
            continue
        if isinstance(entry, kind):
            found.append(entry)
    return found, errors


def _parse(key: str | bytes) -> keys.ParsedKey:
    try:
        return keys.parse_key(key)
    except keys.InvalidKey as error:
        raise DecodeError(str(error)) from None


def _agree(field: str, in_key: str | None, in_value: str) -> None:
    if in_key != in_value:
        raise DecodeError(f"field {field!r}: value has {in_value!r} but the key says {in_key!r}")
