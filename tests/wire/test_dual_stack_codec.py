"""Dual stack in etcd: a node's secondary addresses in the node, ip and health entries,
and both directions of compatibility with entries written before dual stack (pure)."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from meshhealth.agent.membership.registrar import node_ip_entries
from meshhealth.model import (
    IDENTITY_HEALTH,
    IDENTITY_REMOTE_NODE,
    HealthReport,
    Node,
    PathHealth,
    ProbeStatus,
    Target,
    TargetHealth,
)
from meshhealth.probe_set import build_probe_set
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.health import decode_health_report, encode_health_report
from meshhealth.wire.ip_entry import decode_ip_entry, encode_ip_entry
from meshhealth.wire.node import decode_node, encode_node
from meshhealth.wire.values import to_jsonable

# The path names a reader that predates dual stack accepts inside `paths`.
V1_PATH_NAMES = {"node/icmp", "node/http", "endpoint/icmp", "endpoint/http"}

SINGLE = Node(
    name="node-1",
    cluster="default",
    node_ip="10.0.0.1",
    health_ip="10.1.0.5",
    cidrs=("10.1.0.0/24",),
    health_port=4240,
    version="0.1.0",
    started_at=1_700_000_000.5,
)
DUAL = dataclasses.replace(
    SINGLE,
    cidrs=("10.1.0.0/24", "fd00:1::/64"),
    node_ip_secondary="fd77::1",
    health_ip_secondary="fd00:1::2",
)
OK = PathHealth(ProbeStatus.OK, 0.0004, 0.0)


def pack(wire: dict[str, object]) -> bytes:
    return bytes(msgpack.packb(wire, use_bin_type=True))


def test_dual_stack_node_round_trips() -> None:
    assert decode_node(encode_node(DUAL)) == DUAL
    wire = to_jsonable(DUAL)
    assert wire["node_ip_secondary"] == "fd77::1"
    assert wire["health_ip_secondary"] == "fd00:1::2"


def test_single_stack_node_is_written_as_before() -> None:
    assert "node_ip_secondary" not in to_jsonable(SINGLE)
    assert "health_ip_secondary" not in to_jsonable(SINGLE)


def test_entry_of_an_older_writer_decodes_without_secondaries() -> None:
    old = {k: v for k, v in to_jsonable(DUAL).items() if "secondary" not in k}
    node = decode_node(pack(old))
    assert (node.node_ip_secondary, node.health_ip_secondary) == (None, None)


def test_nil_secondary_is_none() -> None:
    wire = to_jsonable(SINGLE) | {"node_ip_secondary": None}
    assert decode_node(pack(wire)).node_ip_secondary is None


def test_a_reader_ignores_fields_it_does_not_know() -> None:
    wire = to_jsonable(DUAL) | {"node_ip_tertiary": "192.0.2.1"}
    assert decode_node(pack(wire)) == DUAL


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"node_ip_secondary": "10.0.0.2"}, "'node_ip_secondary': must be of the other family"),
        ({"node_ip_secondary": "not-an-ip"}, "'node_ip_secondary': invalid IP"),
        ({"node_ip_secondary": 7}, "'node_ip_secondary': must be a string"),
        ({"health_ip_secondary": "fd00::2"}, "set without 'node_ip_secondary'"),
        (
            {"node_ip_secondary": "fd77::1", "health_ip_secondary": "10.1.0.6"},
            "'health_ip_secondary': must be of node_ip_secondary's family",
        ),
        (
            {"node_ip_secondary": "fd77::1", "health_ip": "fd00::5"},
            "'health_ip': a dual-stack node's HealthIP is of node_ip's family",
        ),
    ],
)
def test_bad_secondaries_are_refused(fields: dict[str, object], error: str) -> None:
    with pytest.raises(DecodeError, match=error):
        decode_node(pack(to_jsonable(SINGLE) | fields))
    with pytest.raises(ValueError, match="cannot encode node"):
        encode_node(dataclasses.replace(SINGLE, **fields))  # type: ignore[arg-type]


def test_ipv6_primary_with_ipv4_secondary() -> None:
    node = dataclasses.replace(
        DUAL,
        node_ip="fd77::1",
        health_ip="fd00:1::2",
        node_ip_secondary="10.0.0.1",
        health_ip_secondary="10.1.0.5",
    )
    assert decode_node(encode_node(node)) == node


def test_registrar_entries_all_carry_the_primary_node_ip() -> None:
    entries = node_ip_entries(DUAL)
    assert [(e.ip, e.host_ip, e.identity) for e in entries] == [
        ("10.0.0.1", "10.0.0.1", IDENTITY_REMOTE_NODE),
        ("10.1.0.5", "10.0.0.1", IDENTITY_HEALTH),
        ("fd77::1", "10.0.0.1", IDENTITY_REMOTE_NODE),
        ("fd00:1::2", "10.0.0.1", IDENTITY_HEALTH),
    ]
    for entry in entries:
        assert decode_ip_entry(encode_ip_entry(entry)) == entry


@pytest.mark.parametrize(
    "node",
    [
        DUAL,
        dataclasses.replace(
            DUAL,
            node_ip="fd77::1",
            health_ip="fd00:1::2",
            node_ip_secondary="10.0.0.1",
            health_ip_secondary="10.1.0.5",
        ),
        dataclasses.replace(DUAL, health_ip=None, health_ip_secondary=None),
        dataclasses.replace(DUAL, health_ip_secondary=None),
    ],
    ids=["ipv4-primary", "ipv6-primary", "no-endpoint", "endpoint-single-stack"],
)
def test_discovery_reads_back_what_the_registrar_writes(node: Node) -> None:
    entries = [("default", e) for e in reversed(node_ip_entries(node))]
    assert build_probe_set(entries) == {
        ("default", "node-1"): Target(
            "default",
            "node-1",
            node.node_ip,
            node.health_ip,
            node.node_ip_secondary,
            node.health_ip_secondary,
        )
    }


def test_single_stack_node_with_a_health_ip_of_the_other_family_keeps_it_primary() -> None:
    node = dataclasses.replace(SINGLE, node_ip="fd77::1")  # written before dual stack
    targets = build_probe_set(("default", e) for e in node_ip_entries(node))
    assert targets[("default", "node-1")] == Target("default", "node-1", "fd77::1", "10.1.0.5")


def report(target: TargetHealth) -> HealthReport:
    return HealthReport("node-1", "default", 1_700_000_010.0, 10.0, (target,))


def test_secondary_paths_round_trip_outside_paths() -> None:
    target = TargetHealth(
        "default",
        "node-2",
        paths={"node/icmp": OK, "endpoint/http": OK},
        secondary_paths={
            "node/icmp": OK,
            "endpoint/http": PathHealth(ProbeStatus.TIMEOUT, None, 1),
        },
    )
    encoded = encode_health_report(report(target))
    assert decode_health_report(encoded) == report(target)
    wire_target = msgpack.unpackb(encoded)["targets"][0]
    # An older reader checks `paths` against the names it knows and ignores the rest.
    assert set(wire_target["paths"]) <= V1_PATH_NAMES
    assert set(wire_target["secondary_paths"]) == {"node/icmp", "endpoint/http"}


def test_single_stack_target_has_no_secondary_paths_field() -> None:
    encoded = encode_health_report(report(TargetHealth("default", "n2", {"node/icmp": OK})))
    assert "secondary_paths" not in msgpack.unpackb(encoded)["targets"][0]


def test_unknown_secondary_path_is_refused() -> None:
    wire = to_jsonable(report(TargetHealth("default", "n2", {"node/icmp": OK})))
    wire["targets"][0]["secondary_paths"] = {"node/quic": {"status": "ok", "rtt_s": 0.0, "loss": 0}}  # type: ignore[index]
    with pytest.raises(DecodeError, match=r"targets\[0\].secondary_paths': unknown path"):
        decode_health_report(pack(wire))


def _family_report(*families: str | None) -> HealthReport:
    return HealthReport(
        "node-1",
        "default",
        1_700_000_010.0,
        10.0,
        tuple(
            TargetHealth(f"c{i}", f"n{i}", {"node/icmp": OK}, {"node/icmp": OK}, family)
            for i, family in enumerate(families)
        ),
    )


@pytest.mark.parametrize(
    ("families", "shared", "own"),
    [
        # the usual report: one family for every dual-stack target, said once
        (("ipv6", "ipv6", "ipv6"), "ipv6", [None, None, None]),
        # a meshed cluster of the other primary family: that target says its own
        (("ipv6", "ipv4", "ipv6"), "ipv6", [None, "ipv4", None]),
        (("ipv4", "ipv6"), "ipv4", [None, "ipv6"]),  # a tie: the first of ipv4, ipv6
        ((None, None), None, [None, None]),  # written by an agent that did not say
    ],
)
def test_secondary_family_is_said_once_per_report(
    families: tuple[str | None, ...], shared: str | None, own: list[str | None]
) -> None:
    report = _family_report(*families)
    encoded = encode_health_report(report)
    assert decode_health_report(encoded) == report
    wire = msgpack.unpackb(encoded)
    assert wire.get("secondary_family") == shared
    assert [t.get("secondary_family") for t in wire["targets"]] == own


def test_secondary_family_of_older_writers_and_bad_values() -> None:
    wire = to_jsonable(_family_report("ipv6", "ipv6"))
    del wire["secondary_family"]  # written before the field: None, the rest as before
    assert [t.secondary_family for t in decode_health_report(pack(wire)).targets] == [
        None,
        None,
    ]
    wire["secondary_family"] = "ipx"
    with pytest.raises(DecodeError, match=r"'secondary_family': must be one of ipv4, ipv6, got"):
        decode_health_report(pack(wire))
    wire["secondary_family"] = "ipv6"
    wire["targets"][0]["secondary_family"] = 6  # type: ignore[index]
    with pytest.raises(DecodeError, match=r"targets\[0\].secondary_family': must be one of"):
        decode_health_report(pack(wire))


def test_single_stack_targets_say_no_family() -> None:
    encoded = encode_health_report(report(TargetHealth("default", "n2", {"node/icmp": OK})))
    assert "secondary_family" not in msgpack.unpackb(encoded)
    assert "secondary_family" not in msgpack.unpackb(encoded)["targets"][0]
