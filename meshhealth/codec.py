"""msgpack <-> model for the etcd values, with validation. Pure, no I/O.

Every value is a msgpack map with `v` = SCHEMA_VERSION and the field names of
docs/kvstore.md (a public contract: other tools read and write it with etcdctl).
Decoding treats its input as untrusted: whatever the bytes, the decode functions return
a model object or raise DecodeError, whose message says what is wrong and where.
Unknown extra fields are ignored (forward compatible); unknown `v` values are refused.
Encoding validates too and emits canonical forms, so what we write we can read back.
The health report's fields are read and written in health_wire.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import msgpack

from meshhealth import defaults, keys
from meshhealth import wire_fields as wf
from meshhealth.health_wire import (
    health_from_wire,
    health_to_wire,
)
from meshhealth.model import (
    ClusterConfig,
    HealthReport,
    IPEntry,
    Node,
    RetainedNode,
    ip_family,
)
from meshhealth.wire_fields import DecodeError as DecodeError  # noqa: PLC0414 (re-export)

SCHEMA_VERSION = 1

# Caps on repeated fields: far above any real use, low enough to bound memory.
MAX_CIDRS = 64
MAX_LABELS = 64
MAX_CAPABILITIES = 64
MIN_CLUSTER_ID = 1  # like Cilium's cluster-id; 0 is invalid
MAX_CLUSTER_ID = 255
MIN_IDENTITY = 1
MAX_IDENTITY = 2**32 - 1
MIN_PORT = 1
MAX_PORT = 65535
Entry = Node | IPEntry | ClusterConfig | HealthReport | RetainedNode
E = TypeVar("E", Node, IPEntry, ClusterConfig, HealthReport, RetainedNode)


# --- encoding ------------------------------------------------------------------------


def encode_node(n: Node) -> bytes:
    return _encode("node", _node_to_wire(n), _node_from_wire)


def encode_ip_entry(e: IPEntry) -> bytes:
    return _encode("ip entry", _ip_entry_to_wire(e), _ip_entry_from_wire)


def encode_cluster_config(c: ClusterConfig) -> bytes:
    return _encode("cluster-config", _cluster_config_to_wire(c), _cluster_config_from_wire)


def encode_health_report(r: HealthReport) -> bytes:
    return _encode("health report", {"v": SCHEMA_VERSION, **health_to_wire(r)}, health_from_wire)


def encode_retained(r: RetainedNode) -> bytes:
    return _encode("retained node", _retained_to_wire(r), _retained_from_wire)


def to_jsonable(obj: Entry) -> dict[str, object]:
    """The wire map of `obj` (field names as on the wire, `v` included), JSON-ready."""
    if isinstance(obj, Node):
        return _node_to_wire(obj)
    if isinstance(obj, RetainedNode):
        return _retained_to_wire(obj)
    if isinstance(obj, IPEntry):
        return _ip_entry_to_wire(obj)
    if isinstance(obj, ClusterConfig):
        return _cluster_config_to_wire(obj)
    if isinstance(obj, HealthReport):
        return {"v": SCHEMA_VERSION, **health_to_wire(obj)}
    raise TypeError(f"not a meshhealth entry: {type(obj).__name__}")


def _encode(
    what: str, wire: dict[str, object], from_wire: Callable[[Mapping[str, object]], Entry]
) -> bytes:
    # Validate through the decoder and re-emit its canonical form.
    try:
        canonical = to_jsonable(from_wire(wire))
    except DecodeError as error:
        raise ValueError(f"cannot encode {what}: {error}") from None
    data: bytes = msgpack.packb(canonical, use_bin_type=True)
    if len(data) > defaults.MAX_VALUE_BYTES:
        raise ValueError(
            f"cannot encode {what}: {len(data)} bytes, more than {defaults.MAX_VALUE_BYTES}"
        )
    return data


def _node_to_wire(n: Node) -> dict[str, object]:
    wire: dict[str, object] = {
        "v": SCHEMA_VERSION,
        "name": n.name,
        "cluster": n.cluster,
        "node_ip": n.node_ip,
        "health_ip": n.health_ip,
        "cidrs": list(n.cidrs),
        "health_port": n.health_port,
        "version": n.version,
        "started_at": n.started_at,
    }
    # Optional (dual stack): written only when set, so a single-stack node's entry is
    # byte for byte what older writers wrote, and older readers ignore them.
    if n.node_ip_secondary is not None:
        wire["node_ip_secondary"] = n.node_ip_secondary
    if n.health_ip_secondary is not None:
        wire["health_ip_secondary"] = n.health_ip_secondary
    return wire


def _retained_to_wire(r: RetainedNode) -> dict[str, object]:
    """The Node's fields, then `down_since` (null while its agent is alive)."""
    return {**_node_to_wire(r.node), "down_since": r.down_since}


def _ip_entry_to_wire(e: IPEntry) -> dict[str, object]:
    return {
        "v": SCHEMA_VERSION,
        "ip": e.ip,
        "host_ip": e.host_ip,
        "node": e.node,
        "identity": e.identity,
        "labels": list(e.labels),
    }


def _cluster_config_to_wire(c: ClusterConfig) -> dict[str, object]:
    return {
        "v": SCHEMA_VERSION,
        "name": c.name,
        "id": c.id,
        "capabilities": list(c.capabilities),
    }


# --- decoding ------------------------------------------------------------------------


def decode_node(data: bytes) -> Node:
    return _node_from_wire(_unpack_map(data))


def decode_retained(data: bytes) -> RetainedNode:
    return _retained_from_wire(_unpack_map(data))


def decode_ip_entry(data: bytes) -> IPEntry:
    return _ip_entry_from_wire(_unpack_map(data))


def decode_cluster_config(data: bytes) -> ClusterConfig:
    return _cluster_config_from_wire(_unpack_map(data))


def decode_health_report(data: bytes) -> HealthReport:
    return health_from_wire(_unpack_map(data))


def decode_value(key: str | bytes, data: bytes) -> Entry:
    """Decode the value stored under `key` and check that it agrees with the key."""
    try:
        parsed = keys.parse_key(key)
    except keys.InvalidKey as error:
        raise DecodeError(str(error)) from None
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
    else:  # one value per cluster: meshhealth.summary_codec reads those
        raise DecodeError(f"a {parsed.kind.value} value: not a node's entry")
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


def unpack_map(data: bytes) -> Mapping[str, object]:
    """The msgpack map of a value, its size and schema version checked (DecodeError)."""
    return _unpack_map(data)


def _agree(field: str, in_key: str | None, in_value: str) -> None:
    if in_key != in_value:
        raise DecodeError(f"field {field!r}: value has {in_value!r} but the key says {in_key!r}")


def _unpack_map(data: bytes) -> Mapping[str, object]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"value must be bytes, got {type(data).__name__}")
    size = len(bytes(data)) if isinstance(data, memoryview) else len(data)
    if size > defaults.MAX_VALUE_BYTES:
        raise DecodeError(f"value is {size} bytes, more than {defaults.MAX_VALUE_BYTES}")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except (
        msgpack.UnpackException,
        ValueError,  # ExtraData, FormatError, StackError, UnicodeDecodeError, bad keys
        TypeError,
        OverflowError,
        RecursionError,
    ) as error:
        detail = str(error) or type(error).__name__
        raise DecodeError(f"not valid msgpack: {detail}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"value must be a msgpack map, got {wf.type_name(obj)}")
    if "v" not in obj:
        raise DecodeError("missing field 'v' (schema version)")
    version = obj["v"]
    if type(version) is not int:
        raise DecodeError(f"field 'v': must be an integer, got {wf.type_name(version)}")
    if version != SCHEMA_VERSION:
        raise DecodeError(
            f"field 'v': unsupported schema version {version} (this meshhealth reads "
            f"version {SCHEMA_VERSION})"
        )
    return obj


def _node_from_wire(m: Mapping[str, object]) -> Node:
    # Checked in the documented field order, so the first error reported is stable.
    name = wf.node_name(m, "name")
    cluster = wf.cluster_name(m, "cluster")
    node_ip = wf.ip(wf.string(m, "node_ip"), "node_ip")
    raw_health_ip = wf.field(m, "health_ip")
    health_ip = None
    if raw_health_ip is not None:
        health_ip = wf.ip(wf.as_string(raw_health_ip, "health_ip"), "health_ip")
    cidrs = tuple(
        wf.cidr(c, f"cidrs[{i}]") for i, c in enumerate(wf.list_of(m, "cidrs", str, MAX_CIDRS))
    )
    node_ip_secondary = _optional_ip(m, "node_ip_secondary")
    health_ip_secondary = _optional_ip(m, "health_ip_secondary")
    _check_dual_stack(node_ip, health_ip, node_ip_secondary, health_ip_secondary)
    return Node(
        name=name,
        cluster=cluster,
        node_ip=node_ip,
        health_ip=health_ip,
        cidrs=cidrs,
        health_port=wf.integer(m, "health_port", MIN_PORT, MAX_PORT),
        version=wf.text(wf.string(m, "version"), "version", allow_empty=True),
        started_at=wf.seconds(wf.field(m, "started_at"), "started_at"),
        node_ip_secondary=node_ip_secondary,
        health_ip_secondary=health_ip_secondary,
    )


def _optional_ip(m: Mapping[str, object], name: str) -> str | None:
    """An optional address field: absent or nil is None (entries of older writers)."""
    raw = m.get(name)
    if raw is None:
        return None
    return wf.ip(wf.as_string(raw, name), name)


def _check_dual_stack(
    node_ip: str,
    health_ip: str | None,
    node_ip_secondary: str | None,
    health_ip_secondary: str | None,
) -> None:
    """A secondary address is of the other family than its primary, and a node's
    health addresses pair with its node addresses family by family (so readers of the
    ip entries can tell primary from secondary by family alone)."""
    if node_ip_secondary is None:
        if health_ip_secondary is not None:
            raise DecodeError("field 'health_ip_secondary': set without 'node_ip_secondary'")
        return
    primary = ip_family(node_ip)
    if ip_family(node_ip_secondary) == primary:
        raise DecodeError(
            f"field 'node_ip_secondary': must be of the other family than node_ip "
            f"({primary}), got {node_ip_secondary}"
        )
    if health_ip is not None and ip_family(health_ip) != primary:
        raise DecodeError(
            f"field 'health_ip': a dual-stack node's HealthIP is of node_ip's family "
            f"({primary}), got {health_ip}"
        )
    if health_ip_secondary is not None and ip_family(health_ip_secondary) == primary:
        raise DecodeError(
            f"field 'health_ip_secondary': must be of node_ip_secondary's family, got "
            f"{health_ip_secondary}"
        )


def _retained_from_wire(m: Mapping[str, object]) -> RetainedNode:
    node = _node_from_wire(m)
    raw = wf.field(m, "down_since")
    return RetainedNode(node, None if raw is None else wf.seconds(raw, "down_since"))


def _ip_entry_from_wire(m: Mapping[str, object]) -> IPEntry:
    ip = wf.ip(wf.string(m, "ip"), "ip")
    host_ip = wf.ip(wf.string(m, "host_ip"), "host_ip")
    node = wf.node_name(m, "node")
    identity = wf.integer(m, "identity", MIN_IDENTITY, MAX_IDENTITY)
    labels = wf.list_of(m, "labels", str, MAX_LABELS)
    return IPEntry(
        ip=ip,
        host_ip=host_ip,
        node=node,
        identity=identity,
        labels=tuple(wf.text(x, f"labels[{i}]") for i, x in enumerate(labels)),
    )


def _cluster_config_from_wire(m: Mapping[str, object]) -> ClusterConfig:
    name = wf.cluster_name(m, "name")
    cluster_id = wf.integer(m, "id", MIN_CLUSTER_ID, MAX_CLUSTER_ID)
    capabilities = wf.list_of(m, "capabilities", str, MAX_CAPABILITIES)
    return ClusterConfig(
        name=name,
        id=cluster_id,
        capabilities=tuple(wf.text(x, f"capabilities[{i}]") for i, x in enumerate(capabilities)),
    )
