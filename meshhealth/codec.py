"""msgpack <-> model for the etcd values, with validation. Pure, no I/O.

Every value is a msgpack map with `v` = SCHEMA_VERSION and the field names of
docs/kvstore.md (a public contract: other tools read and write it with etcdctl).
Decoding treats its input as untrusted: whatever the bytes, the decode functions return
a model object or raise DecodeError, whose message says what is wrong and where.
Unknown extra fields are ignored (forward compatible); unknown `v` values are refused.
Encoding validates too and emits canonical forms, so what we write we can read back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import msgpack

from meshhealth import defaults, keys
from meshhealth import wire_fields as wf
from meshhealth.model import (
    PATH_VERDICTS,
    REACHABILITY_PROTOCOLS,
    ClusterConfig,
    HealthReport,
    IPEntry,
    Node,
    PathHealth,
    PlanInfo,
    ProbeStatus,
    Protocol,
    RetainedNode,
    TargetHealth,
    TargetType,
    ip_family,
    path_name,
)
from meshhealth.wire_fields import DecodeError as DecodeError  # noqa: PLC0414 (re-export)

SCHEMA_VERSION = 1

# Caps on repeated fields: far above any real use, low enough to bound memory.
MAX_TARGETS = 10_000
MAX_CIDRS = 64
MAX_LABELS = 64
MAX_CAPABILITIES = 64
MIN_CLUSTER_ID = 1  # like Cilium's cluster-id; 0 is invalid
MAX_CLUSTER_ID = 255
MIN_IDENTITY = 1
MAX_IDENTITY = 2**32 - 1
MIN_PORT = 1
MAX_PORT = 65535
MAX_HEALTH_SCORE = defaults.LOCAL_HEALTH_MAX_MULTIPLIER - 1
MAX_DEGRADED_REASONS = 16
_REASON_CODE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
# The probe plan's settings (HealthReport.plan): caps far above any real use.
MAX_PLAN_EPOCH = 2**53
MAX_PLAN_K = MAX_TARGETS
MAX_PLAN_ROTATION_ROUNDS = 1_000_000
MAX_PLAN_NODES = 1_000_000

# "node/icmp", "node/http", "endpoint/icmp", "endpoint/http": every reader knows them.
CORE_PATH_NAMES: tuple[str, ...] = tuple(
    path_name(t, p) for t in TargetType for p in REACHABILITY_PROTOCOLS
)
# Paths added since ("node/icmp-df"): written in the optional `extra_paths` map, because
# readers older than them refuse a report whose `paths` holds a name they do not know.
EXTRA_PATH_NAMES: tuple[str, ...] = (path_name(TargetType.NODE, Protocol.ICMP_DF),)
PATH_NAMES: tuple[str, ...] = CORE_PATH_NAMES + EXTRA_PATH_NAMES

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
    return _encode("health report", _health_to_wire(r), _health_from_wire)


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
        return _health_to_wire(obj)
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


def _health_to_wire(r: HealthReport) -> dict[str, object]:
    return {
        "v": SCHEMA_VERSION,
        "node": r.node,
        "cluster": r.cluster,
        "probe_time": r.probe_time,
        "interval_s": r.interval_s,
        "targets": [_target_to_wire(t) for t in r.targets],
        **({} if r.plan is None else {"plan": _plan_to_wire(r.plan)}),
        # Optional (local health awareness): only from an agent that is not well.
        **({} if r.health_score == 0 else {"health_score": r.health_score}),
        **({} if r.degraded_since is None else {"degraded_since": r.degraded_since}),
        **({} if not r.degraded_reasons else {"degraded_reasons": list(r.degraded_reasons)}),
    }


def _plan_to_wire(p: PlanInfo) -> dict[str, object]:
    return {
        "epoch": p.epoch,
        "k": p.k,
        "rotation_rounds": p.rotation_rounds,
        "full_mesh": p.full_mesh,
        "full_mesh_max_nodes": p.full_mesh_max_nodes,
        "nodes": p.nodes,
    }


def _path_to_wire(p: PathHealth) -> dict[str, object]:
    wire: dict[str, object] = {"status": str(p.status), "rtt_s": p.rtt_s, "loss": p.loss}
    # Optional (suspicion): older readers ignore them and read the status.
    if p.state is not None:
        wire["state"] = p.state
    if p.state_since is not None:
        wire["state_since"] = p.state_since
    return wire


def _paths_to_wire(paths: Mapping[str, PathHealth]) -> dict[str, object]:
    return {name: _path_to_wire(p) for name, p in sorted(paths.items())}


def _target_to_wire(t: TargetHealth) -> dict[str, object]:
    core = {name: p for name, p in t.paths.items() if name not in EXTRA_PATH_NAMES}
    wire: dict[str, object] = {
        "cluster": t.cluster,
        "node": t.node,
        "paths": _paths_to_wire(core),
    }
    if len(core) != len(t.paths):  # optional: older readers ignore the field
        extra = {name: p for name, p in t.paths.items() if name in EXTRA_PATH_NAMES}
        wire["extra_paths"] = _paths_to_wire(extra)
    # Optional (dual stack), only when the target has secondary addresses: older
    # readers ignore the field and keep reading `paths`.
    if t.secondary_paths:
        wire["secondary_paths"] = _paths_to_wire(t.secondary_paths)
    return wire


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
    return _health_from_wire(_unpack_map(data))


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


def _health_from_wire(m: Mapping[str, object]) -> HealthReport:
    node = wf.node_name(m, "node")
    cluster = wf.cluster_name(m, "cluster")
    probe_time = wf.seconds(wf.field(m, "probe_time"), "probe_time")
    interval_s = wf.seconds(wf.field(m, "interval_s"), "interval_s")
    if interval_s <= 0:
        raise DecodeError(f"field 'interval_s': must be > 0, got {interval_s}")
    targets: list[TargetHealth] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(wf.list_of(m, "targets", dict, MAX_TARGETS)):
        target = _target_health(raw, f"targets[{i}]")
        if (target.cluster, target.node) in seen:
            raise DecodeError(
                f"field 'targets[{i}]': duplicate target {target.cluster}/{target.node}"
            )
        seen.add((target.cluster, target.node))
        targets.append(target)
    raw_plan = m.get("plan")  # optional: agents older than the probe plan wrote none
    health_score = 0  # optional: written only by an agent that is not well
    if m.get("health_score") is not None:
        health_score = wf.integer(m, "health_score", 0, MAX_HEALTH_SCORE)
    degraded = m.get("degraded_since")
    reasons: tuple[str, ...] = ()  # optional: agents older than the reason codes wrote none
    if m.get("degraded_reasons") is not None:
        reasons = _reason_codes(m)
    return HealthReport(
        node=node,
        cluster=cluster,
        probe_time=probe_time,
        interval_s=interval_s,
        targets=tuple(targets),
        plan=None if raw_plan is None else _plan_from_wire(raw_plan),
        health_score=health_score,
        degraded_since=None if degraded is None else wf.seconds(degraded, "degraded_since"),
        degraded_reasons=reasons,
    )


def _reason_codes(m: Mapping[str, object]) -> tuple[str, ...]:
    """`degraded_reasons`: short codes; an unknown one (a newer agent's) is kept."""
    codes = wf.list_of(m, "degraded_reasons", str, MAX_DEGRADED_REASONS)
    for i, code in enumerate(codes):
        if not _REASON_CODE.fullmatch(code):
            raise DecodeError(
                f"field 'degraded_reasons[{i}]': not a reason code (a-z, 0-9, '-'), "
                f"got {wf.short(code)}"
            )
    return tuple(codes)


def _plan_from_wire(raw: object) -> PlanInfo:
    if not isinstance(raw, dict):
        raise DecodeError(f"field 'plan': must be a map, got {wf.type_name(raw)}")
    return PlanInfo(
        epoch=wf.integer(raw, "epoch", 0, MAX_PLAN_EPOCH, "plan"),
        k=wf.integer(raw, "k", 1, MAX_PLAN_K, "plan"),
        rotation_rounds=wf.integer(raw, "rotation_rounds", 1, MAX_PLAN_ROTATION_ROUNDS, "plan"),
        full_mesh=wf.boolean(raw, "full_mesh", "plan"),
        full_mesh_max_nodes=wf.integer(raw, "full_mesh_max_nodes", 0, MAX_PLAN_NODES, "plan"),
        nodes=wf.integer(raw, "nodes", 1, MAX_PLAN_NODES, "plan"),
    )


def _target_health(m: Mapping[str, object], where: str) -> TargetHealth:
    cluster = wf.cluster_name(m, "cluster", where)
    node = wf.node_name(m, "node", where)
    paths = _paths(wf.field(m, "paths", where), f"{where}.paths")
    raw_extra = m.get("extra_paths")  # optional; names this reader does not know: skipped
    if raw_extra is not None:
        paths.update(_paths(raw_extra, f"{where}.extra_paths", skip_unknown=True))
    raw_secondary = m.get("secondary_paths")
    secondary = {} if raw_secondary is None else _paths(raw_secondary, f"{where}.secondary_paths")
    return TargetHealth(cluster=cluster, node=node, paths=paths, secondary_paths=secondary)


def _paths(raw_paths: object, where: str, *, skip_unknown: bool = False) -> dict[str, PathHealth]:
    if not isinstance(raw_paths, dict):
        raise DecodeError(f"field '{where}': must be a map, got {wf.type_name(raw_paths)}")
    paths: dict[str, PathHealth] = {}
    for name, raw in raw_paths.items():
        if skip_unknown and name not in PATH_NAMES:
            continue
        if name not in PATH_NAMES:
            raise DecodeError(
                f"field '{where}': unknown path {wf.short(name)}, expected one of "
                + ", ".join(PATH_NAMES)
            )
        paths[name] = _path_health(raw, f'{where}["{name}"]')
    return paths


def _path_health(raw: object, where: str) -> PathHealth:
    if not isinstance(raw, dict):
        raise DecodeError(f"field '{where}': must be a map, got {wf.type_name(raw)}")
    status_text = wf.string(raw, "status", where)
    try:
        status = ProbeStatus(status_text)
    except ValueError:
        raise DecodeError(
            f"field '{where}.status': unknown status {wf.short(status_text)}, expected one of "
            + ", ".join(s.value for s in ProbeStatus)
        ) from None
    rtt = wf.field(raw, "rtt_s", where)
    rtt_s = None if rtt is None else wf.seconds(rtt, f"{where}.rtt_s")
    loss = wf.number(wf.field(raw, "loss", where), f"{where}.loss")
    if not 0.0 <= loss <= 1.0:
        raise DecodeError(f"field '{where}.loss': must be 0..1, got {loss}")
    # Optional (suspicion). A verdict this version does not know is ignored (the status
    # decides), so a newer agent's report is still read.
    state = raw.get("state")
    if state is not None and not isinstance(state, str):
        raise DecodeError(f"field '{where}.state': must be a string, got {wf.type_name(state)}")
    since = raw.get("state_since")
    return PathHealth(
        status=status,
        rtt_s=rtt_s,
        loss=loss,
        state=state if state in PATH_VERDICTS else None,
        state_since=None if since is None else wf.seconds(since, f"{where}.state_since"),
    )
