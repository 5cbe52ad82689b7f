"""The etcd key layout: build, parse, validate (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.wire import keys
from meshhealth.wire.keys import InvalidKey, KeyKind, ParsedKey
from tests.kv_strategies import cluster_names, ips, node_names

FAST = settings(max_examples=200, deadline=None)


@pytest.mark.parametrize(
    ("built", "expected_key", "parsed"),
    [
        (
            keys.node_key("default", "node-1"),
            "meshhealth/state/nodes/v1/default/node-1",
            ParsedKey(KeyKind.NODE, "default", "node-1"),
        ),
        (
            keys.node_key("c1", "worker.example.com"),
            "meshhealth/state/nodes/v1/c1/worker.example.com",
            ParsedKey(KeyKind.NODE, "c1", "worker.example.com"),
        ),
        (
            keys.ip_key("default", "10.0.0.1"),
            "meshhealth/state/ip/v1/default/10.0.0.1",
            ParsedKey(KeyKind.IP, "default", "10.0.0.1"),
        ),
        (
            keys.ip_key("default", "FD00:0:0:0::0001"),
            "meshhealth/state/ip/v1/default/fd00::1",
            ParsedKey(KeyKind.IP, "default", "fd00::1"),
        ),
        (
            keys.health_key("a-b", "n1"),
            "meshhealth/state/health/v1/a-b/n1",
            ParsedKey(KeyKind.HEALTH, "a-b", "n1"),
        ),
        (
            keys.cluster_config_key("mesh2"),
            "meshhealth/cluster-config/mesh2",
            ParsedKey(KeyKind.CLUSTER_CONFIG, "mesh2", None),
        ),
    ],
)
def test_build_and_parse(built: str, expected_key: str, parsed: ParsedKey) -> None:
    assert built == expected_key
    assert keys.parse_key(built) == parsed
    assert keys.parse_key(built.encode()) == parsed


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (keys.nodes_prefix(), "meshhealth/state/nodes/v1/"),
        (keys.nodes_prefix("c1"), "meshhealth/state/nodes/v1/c1/"),
        (keys.ip_prefix(), "meshhealth/state/ip/v1/"),
        (keys.ip_prefix("c1"), "meshhealth/state/ip/v1/c1/"),
        (keys.health_prefix(), "meshhealth/state/health/v1/"),
        (keys.health_prefix("c1"), "meshhealth/state/health/v1/c1/"),
        (keys.cluster_config_prefix(), "meshhealth/cluster-config/"),
    ],
)
def test_prefixes(prefix: str, expected: str) -> None:
    assert prefix == expected


def test_keys_are_under_their_prefixes() -> None:
    assert keys.node_key("c", "n").startswith(keys.nodes_prefix("c"))
    assert keys.ip_key("c", "::1").startswith(keys.ip_prefix("c"))
    assert keys.health_key("c", "n").startswith(keys.health_prefix("c"))
    assert keys.cluster_config_key("c").startswith(keys.cluster_config_prefix())
    # A cluster's prefix does not match a cluster whose name merely starts the same.
    assert not keys.node_key("c10", "n").startswith(keys.nodes_prefix("c1"))


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "does not start with"),
        ("other/state/nodes/v1/c/n", "does not start with"),
        ("meshhealth/", "expected 'state/' or 'cluster-config/'"),
        ("meshhealth/state", "unknown entry kind"),
        ("meshhealth/state/pods/v1/c/n", "unknown entry kind"),
        ("meshhealth/state/nodes", "unsupported key version"),
        ("meshhealth/state/nodes/v2/c/n", "unsupported key version"),
        ("meshhealth/state/nodes/v1/c", "expected meshhealth/state/nodes/v1/<cluster>/<name>"),
        ("meshhealth/state/nodes/v1/c/", "invalid node name"),
        ("meshhealth/state/nodes/v1/c/n/extra", "expected meshhealth/state/nodes/v1"),
        ("meshhealth/state/nodes/v1/C/n", "invalid cluster name"),
        ("meshhealth/state/nodes/v1/c/Node", "invalid node name"),
        ("meshhealth/state/health/v1/c/-n", "invalid node name"),
        ("meshhealth/state/ip/v1/c/10.0.0.256", "invalid IP address"),
        ("meshhealth/state/ip/v1/c/node-1", "invalid IP address"),
        ("meshhealth/state/ip/v1/c/FD00::1", "not in canonical form, expected 'fd00::1'"),
        ("meshhealth/state/ip/v1/c/fd00:0::1", "not in canonical form"),
        ("meshhealth/state/ip/v1/c/fe80::1%eth0", "scoped"),
        ("meshhealth/state/ip/v1/c/::ffff:10.0.0.1", "IPv4-mapped, use 10.0.0.1"),
        ("meshhealth/cluster-config/", "invalid cluster name"),
        ("meshhealth/cluster-config/c/x", "expected meshhealth/cluster-config/<cluster>"),
        ("meshhealth/cluster-config/" + "a" * 33, "invalid cluster name"),
    ],
)
def test_parse_rejects(key: str, reason: str) -> None:
    with pytest.raises(InvalidKey) as caught:
        keys.parse_key(key)
    assert reason in str(caught.value)
    assert repr(key) in str(caught.value)  # names the key


def test_parse_rejects_non_utf8_bytes() -> None:
    with pytest.raises(InvalidKey, match="not UTF-8"):
        keys.parse_key(b"meshhealth/cluster-config/\xff")


def test_parse_quotes_long_keys_briefly() -> None:
    with pytest.raises(InvalidKey) as caught:
        keys.parse_key("x" * 10_000)
    assert len(str(caught.value)) < 400


def test_invalid_key_is_a_value_error() -> None:
    assert issubclass(InvalidKey, ValueError)


@pytest.mark.parametrize("name", ["a", "0", "default", "c-1", "a" * 32, "1-2-3", "mesh-east-01"])
def test_valid_cluster_names(name: str) -> None:
    assert keys.validate_cluster_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "A", "a" * 33, "-a", "a-", "a_b", "a.b", "a b", "a\n", "ä", "a/b"],
)
def test_invalid_cluster_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid cluster name"):
        keys.validate_cluster_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "n",
        "node-1",
        "worker.example.com",
        "a" * 63,
        ".".join(["a" * 63] * 3) + "." + "b" * 61,  # 253 characters
    ],
)
def test_valid_node_names(name: str) -> None:
    assert keys.validate_node_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "lowercase DNS labels"),
        ("Node", "lowercase DNS labels"),
        ("a" * 64, "lowercase DNS labels"),
        ("a..b", "lowercase DNS labels"),
        (".a", "lowercase DNS labels"),
        ("a.", "lowercase DNS labels"),
        ("a.-b", "lowercase DNS labels"),
        ("a/b", "lowercase DNS labels"),
        ("a_b", "lowercase DNS labels"),
        ("a\n", "lowercase DNS labels"),
        (".".join(["a" * 63] * 4), "longer than 253"),
    ],
)
def test_invalid_node_names(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match="invalid node name") as caught:
        keys.validate_node_name(name)
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    ("build", "args"),
    [
        (keys.node_key, ("Bad", "n")),
        (keys.node_key, ("c", "bad/name")),
        (keys.ip_key, ("c", "10.0.0.999")),
        (keys.ip_key, ("c", "")),
        (keys.health_key, ("c", "")),
        (keys.cluster_config_key, ("",)),
        (keys.nodes_prefix, ("a/b",)),
    ],
)
def test_builders_validate(build: object, args: tuple[str, ...]) -> None:
    assert callable(build)
    with pytest.raises(ValueError):
        build(*args)


@pytest.mark.parametrize(
    ("ip", "canonical"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
        ("::1", "::1"),
        ("fd00:0:0:0:1:0:0:0", "fd00::1:0:0:0"),
    ],
)
def test_canonical_ip(ip: str, canonical: str) -> None:
    assert keys.canonical_ip(ip) == canonical


@FAST
@given(cluster=cluster_names, node=node_names)
def test_node_and_health_keys_round_trip(cluster: str, node: str) -> None:
    assert keys.parse_key(keys.node_key(cluster, node)) == ParsedKey(KeyKind.NODE, cluster, node)
    parsed = keys.parse_key(keys.health_key(cluster, node).encode())
    assert parsed == ParsedKey(KeyKind.HEALTH, cluster, node)


@FAST
@given(cluster=cluster_names, ip=ips)
def test_ip_keys_round_trip(cluster: str, ip: str) -> None:
    assert keys.parse_key(keys.ip_key(cluster, ip)) == ParsedKey(KeyKind.IP, cluster, ip)


@FAST
@given(cluster=cluster_names)
def test_cluster_config_keys_round_trip(cluster: str) -> None:
    parsed = keys.parse_key(keys.cluster_config_key(cluster))
    assert parsed == ParsedKey(KeyKind.CLUSTER_CONFIG, cluster, None)


@FAST
@given(key=st.one_of(st.text(max_size=120), st.binary(max_size=120)))
def test_parse_never_raises_anything_but_invalid_key(key: str | bytes) -> None:
    try:
        parsed = keys.parse_key(key)
    except InvalidKey:
        return
    assert isinstance(parsed, ParsedKey)


@FAST
@given(suffix=st.text(max_size=80))
def test_parse_random_suffixes_under_prefix(suffix: str) -> None:
    for prefix in (keys.nodes_prefix(), keys.ip_prefix("c"), keys.cluster_config_prefix()):
        try:
            parsed = keys.parse_key(prefix + suffix)
        except InvalidKey:
            continue
        # Whatever parses rebuilds to the very same key.
        if parsed.kind is KeyKind.NODE:
            assert parsed.name is not None
            assert keys.node_key(parsed.cluster, parsed.name) == prefix + suffix
        elif parsed.kind is KeyKind.IP:
            assert parsed.name is not None
            assert keys.ip_key(parsed.cluster, parsed.name) == prefix + suffix
        else:
            assert keys.cluster_config_key(parsed.cluster) == prefix + suffix
