"""The route policy: which peer CIDRs a forged node entry may not get routed (pure)."""

from __future__ import annotations

import ipaddress
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.agent.health_endpoint.route_policy import (
    BAD_NEXT_HOP,
    OUTSIDE_ALLOWED,
    OVERLAPS_ETCD,
    OVERLAPS_NODE_IP,
    OVERLAPS_OWN_ADDRESS,
    TOO_BROAD,
    ProtectedAddresses,
    parse_networks,
    route_refusal,
)
from meshhealth.agent.health_endpoint.routes import RouteProgrammer, desired_routes
from meshhealth.metrics import Registry
from meshhealth.model import Node
from meshhealth.node_address_policy import NodeAddressPolicy

PROTECTED = ProtectedAddresses.of(
    node_ips=[("10.0.0.2", "c1/n2"), ("fd77::2", "c1/n2")],
    own=["10.0.0.1", "10.1.1.2"],
    etcd=["192.0.2.10", "etcd.example"],  # a host name is left out
)


@pytest.mark.parametrize(
    ("cidr", "within", "code"),
    [
        pytest.param("10.1.2.0/24", (), None, id="a pod /24"),
        pytest.param("10.7.0.0/16", (), None, id="a /16 is still fine"),
        pytest.param("10.0.0.0/15", (), TOO_BROAD, id="broader than /16"),
        pytest.param("0.0.0.0/0", (), TOO_BROAD, id="default route"),
        pytest.param("0.0.0.0/1", (), TOO_BROAD, id="half the internet"),
        pytest.param("fd00:1::/64", (), None, id="a pod /64"),
        pytest.param("fd00::/47", (), TOO_BROAD, id="broader than /48"),
        pytest.param("::/0", (), TOO_BROAD, id="v6 default route"),
        pytest.param("10.0.0.2/31", (), OVERLAPS_NODE_IP, id="covers a peer's NodeIP"),
        pytest.param("fd77::/64", (), OVERLAPS_NODE_IP, id="covers a v6 NodeIP"),
        pytest.param("10.0.0.1/32", (), OVERLAPS_OWN_ADDRESS, id="this node's NodeIP"),
        pytest.param("10.1.1.0/24", (), OVERLAPS_OWN_ADDRESS, id="this node's HealthIP"),
        pytest.param("192.0.2.0/24", (), OVERLAPS_ETCD, id="etcd's address"),
        pytest.param("10.0.0.2/32", ("10.0.0.0/8",), OVERLAPS_NODE_IP, id="allowed, still covers"),
        pytest.param("10.9.0.0/16", ("10.8.0.0/14",), None, id="inside the allow-list"),
        pytest.param("10.0.0.0/12", ("10.8.0.0/14",), OUTSIDE_ALLOWED, id="wider than it"),
        pytest.param("172.16.0.0/24", ("10.0.0.0/8",), OUTSIDE_ALLOWED, id="outside it"),
        pytest.param("fd00:1::/64", ("10.0.0.0/8",), OUTSIDE_ALLOWED, id="other family"),
        pytest.param("fd00:1::/64", ("10.0.0.0/8", "fd00::/16"), None, id="second network"),
        pytest.param("32.0.0.0/6", ("32.0.0.0/5",), None, id="allow-list lifts the /16 rule"),
    ],
)
def test_route_refusal(cidr: str, within: tuple[str, ...], code: str | None) -> None:
    refusal = route_refusal(
        ipaddress.ip_network(cidr), within=parse_networks(within), protected=PROTECTED
    )
    assert (refusal and refusal.code) == code
    if refusal is not None:
        assert cidr in refusal.why


@given(
    address=st.ip_addresses(v=4),
    prefix=st.integers(0, 32),
    allowed_prefix=st.integers(8, 32),
)
def test_a_routed_cidr_never_covers_a_protected_address_and_stays_inside(
    address: ipaddress.IPv4Address, prefix: int, allowed_prefix: int
) -> None:
    net = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    within = (ipaddress.ip_network(f"{address}/{allowed_prefix}", strict=False),)
    for allow in ((), within):
        refusal = route_refusal(net, within=allow, protected=PROTECTED)
        if refusal is None:
            assert not any(ip in net for ip in PROTECTED.addresses if ip.version == 4)
            if allow:
                assert net.subnet_of(within[0])
            else:
                assert net.prefixlen >= 16


def node(name: str, node_ip: str, *cidrs: str) -> Node:
    return Node(name, "c1", node_ip, None, tuple(cidrs), 4240, "test", 0.0)


def test_desired_routes_refuses_forged_cidrs_and_keeps_the_rest() -> None:
    nodes = [
        node("n1", "10.0.0.1", "10.1.1.0/24"),
        node("n2", "10.0.0.2", "10.1.2.0/24"),
        node("evil", "10.0.0.66", "0.0.0.0/1", "10.0.0.64/26", "192.0.2.10/32"),
    ]
    desired = desired_routes(
        nodes, cluster="c1", node="n1", own_addresses=["10.0.0.1"], etcd_addresses=["192.0.2.10"]
    )
    assert desired.routes == {"10.1.2.0/24": "10.0.0.2"}
    assert desired.skipped == ()
    assert [(r.node, r.cidr, r.refusal.code) for r in desired.refused] == [
        ("c1/evil", "0.0.0.0/1", TOO_BROAD),
        ("c1/evil", "10.0.0.64/26", OVERLAPS_NODE_IP),
        ("c1/evil", "192.0.2.10/32", OVERLAPS_ETCD),
    ]


def test_no_route_via_a_next_hop_the_node_address_policy_refuses() -> None:
    policy = NodeAddressPolicy()  # this node's NodeIP is not loopback
    nodes = [
        node("n2", "10.0.0.2", "10.1.2.0/24"),
        node("lo", "127.0.0.1", "10.1.3.0/24"),
        node("ll", "169.254.0.7", "10.1.4.0/24"),
    ]
    desired = desired_routes(nodes, cluster="c1", node="n1", next_hop_refusal=policy.refusal)
    assert desired.routes == {"10.1.2.0/24": "10.0.0.2"}
    assert [(r.node, r.cidr, r.refusal.code) for r in desired.refused] == [
        ("c1/ll", "10.1.4.0/24", BAD_NEXT_HOP),
        ("c1/lo", "10.1.3.0/24", BAD_NEXT_HOP),
    ]
    assert "169.254.0.7 is a link-local address" in desired.refused[0].refusal.why
    # a mesh on one host (its own NodeIP loopback) routes via loopback peers
    loopback_mesh = NodeAddressPolicy(allow_loopback=True)
    desired = desired_routes(nodes, cluster="c1", node="n1", next_hop_refusal=loopback_mesh.refusal)
    assert desired.routes == {"10.1.2.0/24": "10.0.0.2", "10.1.3.0/24": "127.0.0.1"}


async def test_the_programmer_logs_and_counts_each_refusal_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    refused = registry.counter("refused_total", "test", ("reason",))
    programmer = RouteProgrammer(cluster="c1", node="n1", refused_metric=refused)
    peers = [node("evil", "10.0.0.66", "0.0.0.0/0", "10.0.0.0/16")]
    caplog.set_level(logging.WARNING)
    for _ in range(3):  # three syncs of the same peers
        programmer._note_refused(desired_routes(peers, cluster="c1", node="n1").refused)
    lines = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
    assert lines == [
        "routes: refusing 0.0.0.0/0 of c1/evil: 0.0.0.0/0 is broader than /16 (allow it "
        "with --route-cidrs-within)",
        "routes: refusing 10.0.0.0/16 of c1/evil: 10.0.0.0/16 contains 10.0.0.66, "
        "the NodeIP of c1/evil",
    ]
    assert refused.labels(reason=TOO_BROAD).value == 1
    assert refused.labels(reason=OVERLAPS_NODE_IP).value == 1
    assert len(programmer.state.refused) == 2
