"""msgpack codec of the etcd values: round trips, validation, untrusted input (pure)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth import defaults
from meshhealth.model import (
    ClusterConfig,
    HealthReport,
    IPEntry,
    Node,
    PathHealth,
    ProbeStatus,
    RetainedNode,
    TargetHealth,
)
from meshhealth.wire import keys
from meshhealth.wire.cluster_config import decode_cluster_config, encode_cluster_config
from meshhealth.wire.envelope import SCHEMA_VERSION
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.health import (
    MAX_TARGETS,
    PATH_NAMES,
    decode_health_report,
    encode_health_report,
)
from meshhealth.wire.ip_entry import decode_ip_entry, encode_ip_entry
from meshhealth.wire.node import decode_node, encode_node
from meshhealth.wire.retained import decode_retained, encode_retained
from meshhealth.wire.values import decode_value, to_jsonable
from tests.kv_strategies import (
    cluster_configs,
    entries,
    health_reports,
    ip_entries,
    nodes,
)
from tests.repo_paths import REPO_ROOT

FAST = settings(max_examples=200, deadline=None)

NODE = Node(
    name="node-1",
    cluster="default",
    node_ip="10.0.0.1",
    health_ip="10.1.0.5",
    cidrs=("10.1.0.0/24", "fd00:1::/64"),
    health_port=4240,
    version="0.1.0",
    started_at=1_700_000_000.5,
)
IP_ENTRY = IPEntry(
    ip="10.1.0.5",
    host_ip="10.0.0.1",
    node="node-1",
    identity=4,
    labels=("reserved:health",),
)
CLUSTER_CONFIG = ClusterConfig(name="default", id=1, capabilities=("health-v1",))
HEALTH = HealthReport(
    node="node-1",
    cluster="default",
    probe_time=1_700_000_010.0,
    interval_s=10.0,
    targets=(
        TargetHealth(
            cluster="default",
            node="node-2",
            paths={
                "node/icmp": PathHealth(ProbeStatus.OK, 0.0004, 0.0),
                "node/http": PathHealth(ProbeStatus.OK, 0.0011, 0.0),
                "endpoint/icmp": PathHealth(ProbeStatus.TIMEOUT, None, 1.0),
                "endpoint/http": PathHealth(ProbeStatus.REFUSED, None, 0.5),
            },
        ),
    ),
)

Decode = Callable[[bytes], object]
DECODERS: dict[str, Decode] = {
    "node": decode_node,
    "ip": decode_ip_entry,
    "cluster-config": decode_cluster_config,
    "health": decode_health_report,
}
ALL_DECODERS = [*DECODERS.values(), lambda data: decode_value(KEY_OF["node"], data)]
WIRE: dict[str, dict[str, Any]] = {
    "node": to_jsonable(NODE),
    "ip": to_jsonable(IP_ENTRY),
    "cluster-config": to_jsonable(CLUSTER_CONFIG),
    "health": to_jsonable(HEALTH),
}
KEY_OF = {
    "node": keys.node_key("default", "node-1"),
    "ip": keys.ip_key("default", "10.1.0.5"),
    "cluster-config": keys.cluster_config_key("default"),
    "health": keys.health_key("default", "node-1"),
}
DELETE = object()


def _mutated(kind: str, path: tuple[str | int, ...], value: object) -> bytes:
    wire = copy.deepcopy(WIRE[kind])
    parent: Any = wire
    for step in path[:-1]:
        parent = parent[step]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return bytes(msgpack.packb(wire, use_bin_type=True))


def test_wire_field_names_are_the_public_contract() -> None:
    assert WIRE["node"] == {
        "v": 1,
        "name": "node-1",
        "cluster": "default",
        "node_ip": "10.0.0.1",
        "health_ip": "10.1.0.5",
        "cidrs": ["10.1.0.0/24", "fd00:1::/64"],
        "health_port": 4240,
        "version": "0.1.0",
        "started_at": 1_700_000_000.5,
    }
    assert WIRE["ip"] == {
        "v": 1,
        "ip": "10.1.0.5",
        "host_ip": "10.0.0.1",
        "node": "node-1",
        "identity": 4,
        "labels": ["reserved:health"],
    }
    assert WIRE["cluster-config"] == {
        "v": 1,
        "name": "default",
        "id": 1,
        "capabilities": ["health-v1"],
    }
    target = WIRE["health"]["targets"][0]
    assert set(WIRE["health"]) == {"v", "node", "cluster", "probe_time", "interval_s", "targets"}
    assert set(target) == {"cluster", "node", "paths"}
    assert target["paths"]["endpoint/http"] == {"status": "refused", "rtt_s": None, "loss": 0.5}


def test_values_are_json_serialisable() -> None:
    for wire in WIRE.values():
        assert json.loads(json.dumps(wire)) == wire


@pytest.mark.parametrize("kind", sorted(DECODERS))
def test_decode_value_dispatches_on_the_key(kind: str) -> None:
    data = msgpack.packb(WIRE[kind])
    value = decode_value(KEY_OF[kind], data)
    assert value == DECODERS[kind](data)
    assert decode_value(KEY_OF[kind].encode(), data) == value


def test_encoding_emits_canonical_forms() -> None:
    node = Node("n", "c", "FD00:0::1", "10.0.0.2", ("FD00:1:0::/64",), 1, "", 5)
    decoded = decode_node(encode_node(node))
    assert decoded.node_ip == "fd00::1"
    assert decoded.cidrs == ("fd00:1::/64",)
    assert decoded.started_at == 5.0
    assert isinstance(decoded.started_at, float)


def test_unknown_extra_fields_are_ignored() -> None:
    wire = {**WIRE["node"], "zone": "eu-1", "future": {"nested": [1, 2]}}
    assert decode_node(msgpack.packb(wire)) == NODE
    health = copy.deepcopy(WIRE["health"])
    health["targets"][0]["extra"] = 1
    health["targets"][0]["paths"]["node/icmp"]["p95_s"] = 0.1
    assert decode_health_report(msgpack.packb(health)) == HEALTH


def test_integer_times_from_other_writers_are_accepted() -> None:
    data = _mutated("node", ("started_at",), 1_700_000_000)
    assert decode_node(data).started_at == 1_700_000_000.0


@pytest.mark.parametrize(
    ("kind", "path", "value", "message"),
    [
        # envelope
        ("node", ("v",), DELETE, "missing field 'v'"),
        ("node", ("v",), 2, "unsupported schema version 2"),
        ("node", ("v",), "1", "field 'v': must be an integer"),
        ("node", ("v",), True, "field 'v': must be an integer, got a boolean"),
        ("health", ("v",), 0, "unsupported schema version 0"),
        # node
        ("node", ("name",), DELETE, "missing field 'name'"),
        ("node", ("name",), "Node_1", "field 'name': invalid node name"),
        ("node", ("name",), 7, "field 'name': must be a string, got an integer"),
        ("node", ("cluster",), "a" * 33, "field 'cluster': invalid cluster name"),
        ("node", ("node_ip",), "10.0.0.256", "field 'node_ip': invalid IP address"),
        ("node", ("node_ip",), None, "field 'node_ip': must be a string, got nil"),
        ("node", ("node_ip",), b"\n\x00\x00\x01", "field 'node_ip': must be a string, got binary"),
        ("node", ("health_ip",), "fe80::1%eth0", "field 'health_ip': invalid IP"),
        ("node", ("health_ip",), DELETE, "missing field 'health_ip'"),
        ("node", ("cidrs",), "10.1.0.0/24", "field 'cidrs': must be a list"),
        ("node", ("cidrs",), ["10.1.0.1/24"], "field 'cidrs[0]': invalid CIDR"),
        ("node", ("cidrs",), ["10.1.0.0/33"], "field 'cidrs[0]': invalid CIDR"),
        ("node", ("cidrs",), ["10.1.0.0/24", 5], "field 'cidrs[1]': must be a string"),
        ("node", ("cidrs",), ["10.0.0.0/8"] * 65, "field 'cidrs': 65 items, at most 64"),
        ("node", ("health_port",), 0, "field 'health_port': must be 1..65535, got 0"),
        ("node", ("health_port",), 65536, "field 'health_port': must be 1..65535"),
        ("node", ("health_port",), True, "field 'health_port': must be an integer"),
        ("node", ("health_port",), 4240.0, "field 'health_port': must be an integer, got a float"),
        ("node", ("version",), "x" * 257, "field 'version': longer than 256"),
        ("node", ("started_at",), -1.0, "field 'started_at': must not be negative"),
        ("node", ("started_at",), math.nan, "field 'started_at': must be finite"),
        ("node", ("started_at",), math.inf, "field 'started_at': must be finite"),
        ("node", ("started_at",), "2024-01-01", "field 'started_at': must be a number"),
        ("node", ("started_at",), False, "field 'started_at': must be a number, got a boolean"),
        # ip entry
        ("ip", ("ip",), "10.1.0", "field 'ip': invalid IP address"),
        ("ip", ("host_ip",), "::ffff:10.0.0.1", "field 'host_ip': invalid IP address"),
        ("ip", ("node",), "", "field 'node': invalid node name"),
        ("ip", ("identity",), DELETE, "missing field 'identity'"),
        ("ip", ("identity",), 0, "field 'identity': must be 1..4294967295, got 0"),
        ("ip", ("identity",), 2**32, "field 'identity': must be 1..4294967295"),
        ("ip", ("identity",), True, "field 'identity': must be an integer"),
        ("ip", ("identity",), "6", "field 'identity': must be an integer, got a string"),
        ("ip", ("labels",), None, "field 'labels': must be a list, got nil"),
        ("ip", ("labels",), [""], "field 'labels[0]': must not be empty"),
        ("ip", ("labels",), ["x"] * 65, "field 'labels': 65 items, at most 64"),
        # cluster-config
        ("cluster-config", ("name",), "Default", "field 'name': invalid cluster name"),
        ("cluster-config", ("id",), 0, "field 'id': must be 1..255, got 0"),
        ("cluster-config", ("id",), 256, "field 'id': must be 1..255, got 256"),
        ("cluster-config", ("id",), -1, "field 'id': must be 1..255"),
        ("cluster-config", ("capabilities",), [1], "field 'capabilities[0]': must be a string"),
        # health
        ("health", ("node",), "n/1", "field 'node': invalid node name"),
        ("health", ("probe_time",), -0.5, "field 'probe_time': must not be negative"),
        ("health", ("interval_s",), 0, "field 'interval_s': must be > 0"),
        ("health", ("interval_s",), math.inf, "field 'interval_s': must be finite"),
        ("health", ("targets",), {}, "field 'targets': must be a list, got a map"),
        ("health", ("targets",), [1], "field 'targets[0]': must be a map"),
        ("health", ("targets",), [{}] * 10_001, "field 'targets': 10001 items, at most 10000"),
        ("health", ("targets", 0, "cluster"), DELETE, "missing field 'targets[0].cluster'"),
        ("health", ("targets", 0, "node"), "N", "field 'targets[0].node': invalid node name"),
        ("health", ("targets", 0, "paths"), [], "field 'targets[0].paths': must be a map"),
        (
            "health",
            ("targets", 0, "paths"),
            {b"": None},
            "field 'targets[0].paths': a key is binary, not text: b''",
        ),
        (
            "health",
            ("targets", 0, "paths", "node/sctp"),
            {"status": "ok", "rtt_s": None, "loss": 0.0},
            "field 'targets[0].paths': unknown path 'node/sctp'",
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp"),
            "ok",
            "field \"targets[0].paths['node/icmp']\": must be a map",
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp", "status"),
            "fine",
            "field \"targets[0].paths['node/icmp'].status\": unknown status 'fine'",
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp", "loss"),
            1.5,
            "field \"targets[0].paths['node/icmp'].loss\": must be 0..1, got 1.5",
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp", "loss"),
            -0.1,
            "must be 0..1, got -0.1",
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp", "loss"),
            math.nan,
            '.loss": must be finite',
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp", "rtt_s"),
            -0.001,
            '.rtt_s": must not be negative',
        ),
        (
            "health",
            ("targets", 0, "paths", "node/icmp", "rtt_s"),
            DELETE,
            "missing field \"targets[0].paths['node/icmp'].rtt_s\"",
        ),
    ],
)
def test_decode_rejects(
    kind: str, path: tuple[str | int, ...], value: object, message: str
) -> None:
    data = _mutated(kind, path, value)
    with pytest.raises(DecodeError) as caught:
        DECODERS[kind](data)
    # Messages quote the field as 'targets[0].paths["node/icmp"]'; compare quote-blind.
    assert message.replace('"', "'") in str(caught.value).replace('"', "'")
    with pytest.raises(DecodeError):
        decode_value(KEY_OF[kind], data)


@pytest.mark.parametrize(
    ("kind", "path", "value", "message"),
    [
        ("node", ("name",), 7, "field 'name': must be a string, got an integer"),
        ("node", ("cluster",), None, "field 'cluster': must be a string, got nil"),
        ("node", ("node_ip",), [], "field 'node_ip': must be a string, got a list"),
        ("node", ("cidrs",), [5], "field 'cidrs[0]': must be a string, got an integer"),
        ("ip", ("host_ip",), 1.5, "field 'host_ip': must be a string, got a float"),
        (
            "health",
            ("targets", 0, "node"),
            True,
            "field 'targets[0].node': must be a string, got a boolean",
        ),
    ],
)
def test_a_message_names_its_field_once(
    kind: str, path: tuple[str | int, ...], value: object, message: str
) -> None:
    with pytest.raises(DecodeError) as caught:
        DECODERS[kind](_mutated(kind, path, value))
    assert str(caught.value) == message


def test_duplicate_health_targets_are_rejected() -> None:
    wire = copy.deepcopy(WIRE["health"])
    wire["targets"].append(copy.deepcopy(wire["targets"][0]))
    with pytest.raises(DecodeError, match=r"targets\[1\]': duplicate target default/node-2"):
        decode_health_report(msgpack.packb(wire))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not valid msgpack"),
        (b"\xc1", "not valid msgpack"),
        (b"\x81", "not valid msgpack"),  # truncated map
        (msgpack.packb([1, 2]), "must be a msgpack map, got a list"),
        (msgpack.packb("v"), "must be a msgpack map, got a string"),
        (msgpack.packb(None), "must be a msgpack map, got nil"),
        (msgpack.packb({1: 2}), "not valid msgpack"),  # non-string map key
        (msgpack.packb({"v": 1}) + b"\x00", "not valid msgpack"),  # extra data
        (b"\xa2\xff\xfe", "not valid msgpack"),  # invalid UTF-8
        (b"\x91" * 5000 + b"\x00", "not valid msgpack"),  # nesting too deep
        (b"\x81\xa1v\x01" + b"\x00", "not valid msgpack"),
        (msgpack.packb(msgpack.ExtType(5, b"x")), "must be a msgpack map, got ExtType"),
    ],
)
def test_decode_rejects_bytes(data: bytes, message: str) -> None:
    for decode in DECODERS.values():
        with pytest.raises(DecodeError, match=message):
            decode(data)


@pytest.mark.parametrize("decode", list(DECODERS.values()))
def test_decode_rejects_oversized_values(decode: Decode) -> None:
    data = b"\x00" * (defaults.MAX_VALUE_BYTES + 1)
    with pytest.raises(DecodeError, match=f"more than {defaults.MAX_VALUE_BYTES}"):
        decode(data)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(DecodeError, match="must be bytes, got str"):
        decode_node("not bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "data", "message"),
    [
        ("meshhealth/state/nodes/v1/default/node-2", WIRE["node"], "'name': value has 'node-1'"),
        ("meshhealth/state/nodes/v1/other/node-1", WIRE["node"], "'cluster': value has"),
        ("meshhealth/state/ip/v1/default/10.1.0.6", WIRE["ip"], "'ip': value has '10.1.0.5'"),
        ("meshhealth/state/health/v1/default/node-2", WIRE["health"], "'node': value has"),
        ("meshhealth/state/health/v1/x/node-1", WIRE["health"], "'cluster': value has"),
        ("meshhealth/cluster-config/other", WIRE["cluster-config"], "'name': value has"),
        ("meshhealth/state/nodes/v1/default/node-1", WIRE["ip"], "missing field 'name'"),
        ("meshhealth/nodes/node-1", WIRE["node"], "invalid key 'meshhealth/nodes/node-1'"),
        (b"meshhealth/\xff", WIRE["node"], "not UTF-8"),
    ],
)
def test_decode_value_checks_key_against_value(
    key: str | bytes, data: dict[str, Any], message: str
) -> None:
    with pytest.raises(DecodeError, match=message):
        decode_value(key, msgpack.packb(data))


OK_PATH = PathHealth(ProbeStatus.OK, 0.001, 0.0)


@pytest.mark.parametrize(
    ("encode", "value", "message"),
    [
        (encode_node, Node("n", "c", "1.2.3", None, (), 1, "", 0.0), "node_ip"),
        (encode_node, Node("N", "c", "1.2.3.4", None, (), 1, "", 0.0), "name"),
        (encode_node, Node("n", "c", "1.2.3.4", None, (), 0, "", 0.0), "health_port"),
        (encode_ip_entry, IPEntry("10.0.0.1", "10.0.0.1", "n", 0), "identity"),
        (encode_cluster_config, ClusterConfig("c", 256), "id"),
        (
            encode_health_report,
            HealthReport("n", "c", 0.0, 10.0, (TargetHealth("c", "m", {"x": OK_PATH}),)),
            "unknown path",
        ),
    ],
)
def test_encode_refuses_invalid_values(
    encode: Callable[[Any], bytes], value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=f"cannot encode .*{message}"):
        encode(value)


def test_encode_refuses_oversized_values() -> None:
    many = tuple(
        TargetHealth("c", f"node-{i}", {name: OK_PATH for name in PATH_NAMES})
        for i in range(MAX_TARGETS)
    )
    with pytest.raises(ValueError, match=r"cannot encode health report: .* bytes, more than"):
        encode_health_report(HealthReport("n", "c", 0.0, 10.0, many))


# --- properties ------------------------------------------------------------------------


@FAST
@given(node=nodes)
def test_node_round_trip(node: Node) -> None:
    assert decode_node(encode_node(node)) == node
    assert decode_value(keys.node_key(node.cluster, node.name), encode_node(node))


@FAST
@given(entry=ip_entries, cluster=st.sampled_from(["default", "c2"]))
def test_ip_entry_round_trip(entry: IPEntry, cluster: str) -> None:
    data = encode_ip_entry(entry)
    assert decode_ip_entry(data) == entry
    assert decode_value(keys.ip_key(cluster, entry.ip), data) == entry


@FAST
@given(config=cluster_configs)
def test_cluster_config_round_trip(config: ClusterConfig) -> None:
    data = encode_cluster_config(config)
    assert decode_cluster_config(data) == config
    assert decode_value(keys.cluster_config_key(config.name), data) == config


@FAST
@given(report=health_reports)
def test_health_report_round_trip(report: HealthReport) -> None:
    data = encode_health_report(report)
    assert decode_health_report(data) == report
    assert decode_value(keys.health_key(report.cluster, report.node), data) == report


@FAST
@given(entry=entries)
def test_to_jsonable_is_the_wire_map(entry: Any) -> None:
    wire = to_jsonable(entry)
    assert wire["v"] == SCHEMA_VERSION
    assert json.loads(json.dumps(wire, allow_nan=False)) == wire
    decode = {
        Node: decode_node,
        IPEntry: decode_ip_entry,
        ClusterConfig: decode_cluster_config,
        HealthReport: decode_health_report,
    }[type(entry)]
    assert decode(msgpack.packb(wire)) == entry


def _never_raises_but_decode_error(data: bytes) -> None:
    for decode in ALL_DECODERS:
        try:
            value = decode(data)
        except DecodeError as error:
            assert str(error)  # says what is wrong
        else:
            assert isinstance(value, Node | IPEntry | ClusterConfig | HealthReport)


@FAST
@given(data=st.binary(max_size=512))
def test_random_bytes_only_raise_decode_error(data: bytes) -> None:
    _never_raises_but_decode_error(data)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
_objects = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=10) | st.binary(max_size=5), children, max_size=5)
    ),
    max_leaves=20,
)


@FAST
@given(obj=_objects)
def test_random_msgpack_objects_only_raise_decode_error(obj: object) -> None:
    _never_raises_but_decode_error(msgpack.packb(obj, use_bin_type=True))


@FAST
@given(
    kind=st.sampled_from(sorted(WIRE)),
    field=st.sampled_from(
        sorted({name for wire in WIRE.values() for name in wire} | {"paths", "status", "loss"})
    ),
    value=_objects,
)
def test_one_bad_field_only_raises_decode_error(kind: str, field: str, value: object) -> None:
    wire = copy.deepcopy(WIRE[kind])
    wire[field] = value
    if kind == "health":  # also inside a target and a path
        target = wire.setdefault("targets", [{}])
        if isinstance(target, list) and target and isinstance(target[0], dict):
            target[0][field] = copy.deepcopy(value)
            paths = target[0].get("paths")
            if isinstance(paths, dict) and isinstance(paths.get("node/icmp"), dict):
                paths["node/icmp"][field] = copy.deepcopy(value)
    _never_raises_but_decode_error(msgpack.packb(wire, use_bin_type=True))


# --- docs/kvstore.md stays in step with the code ----------------------------------------

DOCS = REPO_ROOT / "docs" / "kvstore.md"


def test_docs_list_every_wire_field() -> None:
    text = DOCS.read_text()
    names = {name for wire in WIRE.values() for name in wire}
    names |= set(WIRE["health"]["targets"][0]) | {"status", "rtt_s", "loss"}
    missing = sorted(name for name in names if f"| `{name}` |" not in text)
    assert not missing, f"fields missing from {DOCS.name}: {missing}"
    for path in PATH_NAMES:
        assert f"`{path}`" in text


def test_docs_examples_decode() -> None:
    lines = [
        line
        for line in DOCS.read_text().splitlines()
        if line.startswith('{"key": "meshhealth/') and '"value"' in line
    ]
    assert len(lines) >= 3
    for line in lines:
        shown = json.loads(line)
        value = decode_value(shown["key"], msgpack.packb(shown["value"]))
        assert to_jsonable(value) == shown["value"]


@FAST
@given(node=nodes, down_since=st.none() | st.floats(0, 4e9))
def test_retained_node_round_trip(node: Node, down_since: float | None) -> None:
    retained = RetainedNode(node, down_since)
    data = encode_retained(retained)
    assert decode_retained(data) == retained
    assert decode_value(keys.retained_key(node.cluster, node.name), data) == retained
    # an older reader of the node's fields still reads it (down_since is one more field)
    assert decode_node(data) == node


def test_retained_node_must_agree_with_its_key_and_have_a_valid_stamp() -> None:
    node = Node("n3", "c1", "10.0.0.3", None, (), 4240, "", 5.0)
    data = encode_retained(RetainedNode(node))
    with pytest.raises(DecodeError, match="key says 'n4'"):
        decode_value(keys.retained_key("c1", "n4"), data)
    wire = {**to_jsonable(RetainedNode(node)), "down_since": -1}
    with pytest.raises(DecodeError, match="down_since"):
        decode_retained(msgpack.packb(wire))
    assert keys.parse_key(keys.retained_key("c1", "n3")) == keys.ParsedKey(
        keys.KeyKind.RETAINED, "c1", "n3"
    )
