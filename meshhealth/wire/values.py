"""Any etcd value by its key: decode the value stored under a key (it must agree with
the key), decode a listing of (key, value) pairs, and the JSON form of any value (its
wire map) for `meshhealth inspect` and the docs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from meshhealth.model import ClusterConfig, HealthReport, IPEntry, Node, RetainedNode
from meshhealth.wire import keys
from meshhealth.wire.claim import CLAIM, AggregatorClaim
from meshhealth.wire.cluster_config import CLUSTER_CONFIG
from meshhealth.wire.envelope import Codec
from meshhealth.wire.event import EVENT, FindingEvent
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.health import HEALTH
from meshhealth.wire.ip_entry import IP_ENTRY
from meshhealth.wire.maintenance import MAINTENANCE, MaintenanceWindow
from meshhealth.wire.node import NODE
from meshhealth.wire.retained import RETAINED
from meshhealth.wire.rollup import ROLLUP, NodeRollups
from meshhealth.wire.summary import SUMMARY, ClusterSummary

Entry = (
    Node | IPEntry | ClusterConfig | HealthReport | RetainedNode | NodeRollups | MaintenanceWindow
)
E = TypeVar(
    "E", Node, IPEntry, ClusterConfig, HealthReport, RetainedNode, NodeRollups, MaintenanceWindow
)
K = keys.KeyKind
# Each kind's codec, and what its value says of the key's cluster and name parts:
# (field, the key's part, the value's).
_AGREE = Callable[[Any, keys.ParsedKey], Iterable[tuple[str, str | None, str]]]
_BY_KIND: dict[keys.KeyKind, tuple[Codec[Any], _AGREE]] = {
    K.NODE: (NODE, lambda v, k: [("cluster", k.cluster, v.cluster), ("name", k.name, v.name)]),
    K.IP: (IP_ENTRY, lambda v, k: [("ip", k.name, v.ip)]),
    K.HEALTH: (HEALTH, lambda v, k: [("cluster", k.cluster, v.cluster), ("node", k.name, v.node)]),
    K.RETAINED: (
        RETAINED,
        lambda v, k: [("cluster", k.cluster, v.node.cluster), ("name", k.name, v.node.name)],
    ),
    K.ROLLUP: (ROLLUP, lambda v, k: [("cluster", k.cluster, v.cluster), ("node", k.name, v.node)]),
    K.MAINTENANCE: (
        MAINTENANCE,
        lambda v, k: [("cluster", k.cluster, v.cluster), ("node", k.name, v.node)],
    ),
    K.CLUSTER_CONFIG: (CLUSTER_CONFIG, lambda v, k: [("name", k.cluster, v.name)]),
    K.AGGREGATOR: (CLAIM, lambda v, k: [("cluster", k.cluster, v.cluster)]),
    K.SUMMARY: (SUMMARY, lambda v, k: [("cluster", k.cluster, v.cluster)]),
    K.EVENT: (EVENT, lambda v, k: [("cluster", k.cluster, v.cluster), ("id", k.name, v.id)]),
}
_PER_CLUSTER = (K.AGGREGATOR, K.SUMMARY)
_NOT_NODE_ENTRIES = (*_PER_CLUSTER, K.EVENT)
_CODECS: dict[type, Codec[Any]] = {
    Node: NODE,
    RetainedNode: RETAINED,
    IPEntry: IP_ENTRY,
    ClusterConfig: CLUSTER_CONFIG,
    HealthReport: HEALTH,
    NodeRollups: ROLLUP,
    MaintenanceWindow: MAINTENANCE,
    AggregatorClaim: CLAIM,
    ClusterSummary: SUMMARY,
    FindingEvent: EVENT,
}


def to_jsonable(obj: Entry | AggregatorClaim | ClusterSummary | FindingEvent) -> dict[str, object]:
    """The wire map of `obj` (field names as on the wire, `v` included), JSON-ready."""
    if type(obj) not in _CODECS:
        raise TypeError(f"not a meshhealth entry: {type(obj).__name__}")
    return _CODECS[type(obj)].to_wire(obj)


def decode_value(key: str | bytes, data: bytes) -> Entry:
    """Decode the value stored under `key` and check that it agrees with the key."""
    parsed = _parse(key)
    if parsed.kind in _NOT_NODE_ENTRIES:  # decode_cluster_value, decode_event_value
        raise DecodeError(f"a {parsed.kind.value} value: not a node's entry")
    value: Entry = _decode(parsed, data)
    return value


def decode_cluster_value(key: str | bytes, data: bytes) -> AggregatorClaim | ClusterSummary:
    """Decode the value under an aggregator or summary key; it must agree with the key."""
    parsed = _parse(key)
    if parsed.kind not in _PER_CLUSTER:
        raise DecodeError(f"not an aggregator or summary key: {parsed.kind.value}")
    value: AggregatorClaim | ClusterSummary = _decode(parsed, data)
    return value


def decode_event_value(key: str | bytes, data: bytes) -> FindingEvent:
    """Decode the finding event under `key`; it must agree with the key."""
    parsed = _parse(key)
    if parsed.kind is not K.EVENT:
        raise DecodeError(f"not a finding event key: {parsed.kind.value}")
    value: FindingEvent = _decode(parsed, data)
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


def _decode(parsed: keys.ParsedKey, data: bytes) -> Any:
    codec, agree = _BY_KIND[parsed.kind]
    value = codec.decode(data)
    for field, in_key, in_value in agree(value, parsed):
        if in_key != in_value:
            raise DecodeError(
                f"field {field!r}: value has {in_value!r} but the key says {in_key!r}"
            )
    return value
