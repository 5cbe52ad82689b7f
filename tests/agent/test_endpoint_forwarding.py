"""The health endpoint's forwarding: per interface where IPv4 allows it, IPv6's
`all.forwarding` with `accept_ra=2` where it was 1, everything put back on teardown.
The plan and the uplinks are pure (tables); the rest in namespaces made here, whose
/proc/sys/net is their own."""

from __future__ import annotations

import subprocess

import pytest
import trio

from meshhealth.agent.health_endpoint.forwarding import forwarding_plan, uplinks_from_addresses
from meshhealth.agent.health_endpoint.supervisor import HealthEndpoint
from tests.agent.test_endpoint import answers, endpoint_netns_for_test, pings
from tests.plugins.netns import NetnsFactory


@pytest.mark.parametrize(
    ("kwargs", "plan"),
    [
        pytest.param(
            {"ipv4": True, "ipv6": False, "uplinks": ("eth0",)},
            [("net.ipv4.conf.lxc_health.forwarding", "1"), ("net.ipv4.conf.eth0.forwarding", "1")],
            id="ipv4 per interface",
        ),
        pytest.param(
            {"ipv4": True, "ipv6": False, "uplinks": None},
            [("net.ipv4.ip_forward", "1")],
            id="ipv4 host-wide",
        ),
        pytest.param(
            {
                "ipv4": False,
                "ipv6": True,
                "uplinks": None,
                "accept_ra": {
                    "all": "1",
                    "default": "1",
                    "eth0": "1",
                    "eth1": "0",
                    "eth2": "2",
                    "lxc_health": "1",
                },
            },
            [
                ("net.ipv6.conf.default.accept_ra", "2"),
                ("net.ipv6.conf.eth0.accept_ra", "2"),
                ("net.ipv6.conf.all.forwarding", "1"),
            ],
            id="ipv6: accept_ra 2 first where it was 1",
        ),
        pytest.param(
            {"ipv4": True, "ipv6": True, "uplinks": ("eth0", "eth0", "bond0")},
            [
                ("net.ipv4.conf.lxc_health.forwarding", "1"),
                ("net.ipv4.conf.eth0.forwarding", "1"),
                ("net.ipv4.conf.bond0.forwarding", "1"),
                ("net.ipv6.conf.all.forwarding", "1"),
            ],
            id="dual stack",
        ),
    ],
)
def test_forwarding_plan(kwargs: dict[str, object], plan: list[tuple[str, str]]) -> None:
    arguments: dict[str, object] = {"host_iface": "lxc_health", "accept_ra": {}, **kwargs}
    assert forwarding_plan(**arguments) == plan  # type: ignore[arg-type]


def _link(name: str, *addresses: str, **extra: object) -> dict[str, object]:
    return {"ifname": name, "addr_info": [{"local": a} for a in addresses], **extra}


@pytest.mark.parametrize(
    ("links", "node_ips", "uplinks"),
    [
        ([_link("eth0", "10.0.0.5"), _link("eth1", "10.1.0.5")], ("10.0.0.5",), ("eth0",)),
        ([_link("eth0", "10.0.0.5", "fd00::5")], ("10.0.0.5", "fd00::5"), ("eth0",)),
        ([_link("lo", "127.0.0.1", "10.0.0.5", link_type="loopback")], ("10.0.0.5",), None),
        ([_link("d0", "10.0.0.5", linkinfo={"info_kind": "dummy"})], ("10.0.0.5",), None),
        ([_link("eth0", "10.0.0.6")], ("10.0.0.5",), None),  # not found: host-wide
        ([_link("eth0", "fd00::5")], ("fd00::5",), None),  # IPv6 only: no IPv4 to forward
        ([_link("eth0", "10.0.0.5")], (), None),
    ],
)
def test_uplinks_from_addresses(
    links: list[dict[str, object]], node_ips: tuple[str, ...], uplinks: tuple[str, ...] | None
) -> None:
    assert uplinks_from_addresses(links, node_ips) == uplinks


def sysctl(netns: str, key: str) -> str:
    path = "/proc/sys/" + key.replace(".", "/")
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "cat", path], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def set_sysctl(netns: str, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    subprocess.run(["ip", "netns", "exec", netns, "sh", "-c", f"echo {value} > {path}"], check=True)


@pytest.mark.netns
async def test_forwarding_is_per_interface_and_put_back(netns_factory: NetnsFactory) -> None:
    """Node A (forwarding off everywhere, accept_ra=1 on its uplink and as default)
    runs a dual-stack endpoint; peer B reaches it over IPv4 through A's uplink with
    only the uplink's and the veth's forwarding on. Teardown puts every value back."""
    node, peer = netns_factory.create(), netns_factory.create()
    for ns in (node, peer):
        set_sysctl(ns, "net.ipv4.ip_forward", "0")
        set_sysctl(ns, "net.ipv6.conf.all.forwarding", "0")
        set_sysctl(ns, "net.ipv6.conf.default.accept_ra", "1")
    uplink, _ = netns_factory.veth(node, peer, addrs_a=["10.214.0.1/24"], addrs_b=["10.214.0.2/24"])
    assert sysctl(node, f"net.ipv6.conf.{uplink}.accept_ra") == "1"
    netns_factory.ip(peer, "route", "add", "10.215.1.2/32", "via", "10.214.0.1")
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip="10.215.1.2",
        health_ip_secondary="fd00:215::2",
        port=4240,
        netns=endpoint_netns_for_test(netns_factory),
        node_netns=node,
        node_ips=("10.214.0.1",),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        assert endpoint.state.running, endpoint.state
        assert sysctl(node, "net.ipv4.ip_forward") == "0"  # not host-wide
        assert sysctl(node, "net.ipv4.conf.all.forwarding") == "0"
        assert sysctl(node, f"net.ipv4.conf.{uplink}.forwarding") == "1"
        assert sysctl(node, "net.ipv4.conf.lxc_health.forwarding") == "1"
        assert sysctl(node, "net.ipv4.conf.lo.forwarding") == "0"
        assert sysctl(node, "net.ipv6.conf.all.forwarding") == "1"
        assert sysctl(node, f"net.ipv6.conf.{uplink}.accept_ra") == "2"
        assert sysctl(node, "net.ipv6.conf.default.accept_ra") == "2"
        # Forwarding through the uplink is enough: the peer reaches the endpoint.
        assert await pings(netns_factory, peer, "10.215.1.2")
        assert await answers(peer, "10.215.1.2", 4240)
        nursery.cancel_scope.cancel()
    assert sysctl(node, "net.ipv4.ip_forward") == "0"
    assert sysctl(node, f"net.ipv4.conf.{uplink}.forwarding") == "0"
    assert sysctl(node, "net.ipv6.conf.all.forwarding") == "0"
    assert sysctl(node, f"net.ipv6.conf.{uplink}.forwarding") == "0"
    assert sysctl(node, f"net.ipv6.conf.{uplink}.accept_ra") == "1"
    assert sysctl(node, "net.ipv6.conf.default.accept_ra") == "1"


@pytest.mark.netns
async def test_forwarding_someone_else_changed_is_left_alone(netns_factory: NetnsFactory) -> None:
    """A value someone else changed while the endpoint ran is not put back; one that
    was already on before is left on."""
    node = netns_factory.create()
    set_sysctl(node, "net.ipv4.ip_forward", "1")
    set_sysctl(node, "net.ipv6.conf.all.forwarding", "0")
    set_sysctl(node, "net.ipv6.conf.default.accept_ra", "1")
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip="10.215.1.2",
        health_ip_secondary="fd00:215::2",
        port=4240,
        netns=endpoint_netns_for_test(netns_factory),
        node_netns=node,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        assert sysctl(node, "net.ipv6.conf.default.accept_ra") == "2"
        set_sysctl(node, "net.ipv6.conf.default.accept_ra", "0")  # someone else
        nursery.cancel_scope.cancel()
    assert sysctl(node, "net.ipv4.ip_forward") == "1"  # on before: left on
    assert sysctl(node, "net.ipv6.conf.default.accept_ra") == "0"  # theirs: left
    assert sysctl(node, "net.ipv6.conf.all.forwarding") == "0"  # ours: put back
