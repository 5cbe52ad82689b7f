"""Which peer addresses may be probed and heard from: the pure policy (tables, hypothesis)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.model import Target
from meshhealth.node_address_policy import (
    INVALID,
    LINK_LOCAL,
    LOOPBACK,
    MULTICAST,
    OUTSIDE_ALLOWED,
    UNSPECIFIED,
    NodeAddressPolicy,
    RefusedAddress,
    screen_targets,
)

STRICT = NodeAddressPolicy()
LOOPBACK_MESH = NodeAddressPolicy.of(own_node_ip="127.5.1.1")
ALLOWED = NodeAddressPolicy.of(["10.77.0.0/16", "fd77::/64"], own_node_ip="10.77.0.1")


@pytest.mark.parametrize(
    ("policy", "ip", "code"),
    [
        pytest.param(STRICT, "10.0.0.2", None, id="private unicast"),
        pytest.param(STRICT, "192.0.2.7", None, id="documentation range is unicast"),
        pytest.param(STRICT, "fd00::2", None, id="ULA"),
        pytest.param(STRICT, "2001:db8::2", None, id="global v6"),
        pytest.param(STRICT, "127.0.0.1", LOOPBACK, id="loopback"),
        pytest.param(STRICT, "127.9.9.9", LOOPBACK, id="all of 127/8"),
        pytest.param(STRICT, "::1", LOOPBACK, id="v6 loopback"),
        pytest.param(STRICT, "169.254.169.254", LINK_LOCAL, id="cloud metadata"),
        pytest.param(STRICT, "fe80::1", LINK_LOCAL, id="v6 link-local"),
        pytest.param(STRICT, "224.0.0.1", MULTICAST, id="all hosts"),
        pytest.param(STRICT, "ff02::1", MULTICAST, id="v6 all nodes"),
        pytest.param(STRICT, "0.0.0.0", UNSPECIFIED, id="v4 any"),
        pytest.param(STRICT, "::", UNSPECIFIED, id="v6 any"),
        pytest.param(STRICT, "not-an-ip", INVALID, id="garbage"),
        pytest.param(LOOPBACK_MESH, "127.5.1.2", None, id="loopback mesh: loopback peer"),
        pytest.param(LOOPBACK_MESH, "169.254.1.1", LINK_LOCAL, id="loopback mesh: link-local"),
        pytest.param(LOOPBACK_MESH, "0.0.0.0", UNSPECIFIED, id="loopback mesh: any"),
        pytest.param(ALLOWED, "10.77.3.4", None, id="inside the allowed"),
        pytest.param(ALLOWED, "fd77::9", None, id="inside the allowed v6"),
        pytest.param(ALLOWED, "10.78.0.2", OUTSIDE_ALLOWED, id="outside"),
        pytest.param(ALLOWED, "fd78::2", OUTSIDE_ALLOWED, id="outside v6"),
        pytest.param(ALLOWED, "127.0.0.1", LOOPBACK, id="loopback is refused first"),
    ],
)
def test_refusal(policy: NodeAddressPolicy, ip: str, code: str | None) -> None:
    refusal = policy.refusal(ip)
    assert (refusal and refusal[0]) == code
    if refusal is not None:
        assert ip in refusal[1]


@given(st.ip_addresses())
def test_every_accepted_address_is_an_ordinary_unicast_one(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    if STRICT.refusal(str(address)) is None:
        assert not (
            address.is_loopback
            or address.is_link_local
            or address.is_multicast
            or address.is_unspecified
        )
    if ALLOWED.refusal(str(address)) is None:
        assert any(address in net for net in ALLOWED.allowed)


def test_screen_targets_drops_a_peer_with_any_refused_address() -> None:
    good = Target("c1", "n2", "10.0.0.2", "10.1.0.2")
    bad_node_ip = Target("c1", "evil", "127.0.0.1", None)
    bad_health_ip = Target("c1", "sly", "10.0.0.3", "169.254.169.254")
    bad_secondary = Target("c1", "dual", "10.0.0.4", None, "ff02::1", None)
    targets = {(t.cluster, t.node): t for t in (good, bad_node_ip, bad_health_ip, bad_secondary)}
    kept, refused = screen_targets(targets, STRICT)
    assert kept == {("c1", "n2"): good}
    assert [(r.node, r.address, r.code) for r in refused] == [
        ("dual", "ff02::1", MULTICAST),
        ("evil", "127.0.0.1", LOOPBACK),
        ("sly", "169.254.169.254", LINK_LOCAL),
    ]
    assert all(isinstance(r, RefusedAddress) for r in refused)
