"""Dual stack on one node: the health endpoint's namespace and veth with both families
(and IPv6 only), the responder listening on both addresses, the round probing both
(real namespaces, real sockets)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator

import pytest
import trio

from meshhealth.agent.health_endpoint import namespace as endpoint_netns
from meshhealth.agent.health_endpoint.supervisor import HealthEndpoint, RestartBackoff
from meshhealth.model import PathKey, ProbeStatus, Protocol, Target, TargetType
from meshhealth.netns import call_in_netns, socket_in_netns
from meshhealth.probe.icmp import open_pinger
from meshhealth.probe.responder import serve_responder
from meshhealth.probe.scheduler import enumerate_paths, run_round
from tests.plugins.netns import NetnsFactory

FAST_BACKOFF = RestartBackoff(min_s=0.05, max_s=0.2, stable_s=5.0)
NODE_IP4, NODE_IP6 = "10.211.0.1", "fd11::1"
_counter = 0


def endpoint_ns_name(factory: NetnsFactory) -> str:
    global _counter  # noqa: PLW0603 - unique per test in this process
    _counter += 1
    name = f"mh{os.getpid()}d{_counter}"
    factory.namespaces.append(name)  # deleted on teardown if still there
    return name


@pytest.fixture
def node_ns(netns_factory: NetnsFactory) -> Iterator[str]:
    """A node namespace with a NodeIP of each family on lo."""
    ns = netns_factory.create()
    netns_factory.ip(ns, "addr", "add", f"{NODE_IP4}/32", "dev", "lo")
    netns_factory.ip(ns, "-6", "addr", "add", f"{NODE_IP6}/128", "dev", "lo", "nodad")
    yield ns


async def http_status(netns: str, ip: str, port: int, timeout_s: float = 2.0) -> int | None:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    sock = trio.socket.from_stdlib_socket(socket_in_netns(netns, family, socket.SOCK_STREAM))
    with sock, trio.move_on_after(timeout_s):
        try:
            await sock.connect((ip, port))
            await sock.send(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := await sock.recv(4096):
                data += chunk
        except OSError:
            return None
        first = data.split(b"\r\n", 1)[0].split()
        return int(first[1]) if len(first) >= 2 and first[1].isdigit() else None
    return None


async def wait_answering(netns: str, ip: str, port: int, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while True:
            if await http_status(netns, ip, port) == 200:
                return
            await trio.sleep(0.1)


async def wait_pinging(factory: NetnsFactory, netns: str, ip: str, timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while True:
            done: subprocess.CompletedProcess[str] = await trio.to_thread.run_sync(
                lambda: factory.run(netns, "fping", "-t", "500", "-r", "0", ip, check=False)
            )
            if done.returncode == 0:
                return
            await trio.sleep(0.1)


@pytest.mark.netns
@pytest.mark.parametrize(
    ("health_ip", "health_ip_secondary"),
    [("10.213.1.2", "fd13:1::2"), ("fd13:1::2", "10.213.1.2"), ("fd13:1::2", None)],
    ids=["ipv4-primary", "ipv6-primary", "ipv6-only"],
)
async def test_netns_endpoint_with_both_families(
    netns_factory: NetnsFactory, node_ns: str, health_ip: str, health_ip_secondary: str | None
) -> None:
    ep_ns = endpoint_ns_name(netns_factory)
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip=health_ip,
        health_ip_secondary=health_ip_secondary,
        port=4240,
        node_name="n1",
        netns=ep_ns,
        node_netns=node_ns,
        backoff=FAST_BACKOFF,
    )
    addresses = [ip for ip in (health_ip, health_ip_secondary) if ip is not None]
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        assert endpoint.state.running, endpoint.state
        assert endpoint.state.health_ip_secondary == health_ip_secondary
        shown = netns_factory.ip(ep_ns, "-br", "addr", "show", "dev", "eth0").stdout
        for ip in addresses:
            assert f"{ip}/{128 if ':' in ip else 32}" in shown
            await wait_pinging(netns_factory, node_ns, ip)
            await wait_answering(node_ns, ip, 4240)
        nursery.cancel_scope.cancel()
    assert endpoint_netns.netns_inode(ep_ns) is None


@pytest.mark.netns
async def test_round_probes_both_families_of_a_target(
    netns_factory: NetnsFactory, node_ns: str
) -> None:
    """The scheduler plans the secondary addresses as paths of their own; ICMPv6 and
    HTTP over IPv6 come back OK, and a dead secondary address fails on its own."""
    ep_ns = endpoint_ns_name(netns_factory)
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip="10.213.2.2",
        health_ip_secondary="fd13:2::2",
        port=4240,
        node_name="n1",
        netns=ep_ns,
        node_netns=node_ns,
        backoff=FAST_BACKOFF,
    )
    alive = Target("c1", "n1", NODE_IP4, "10.213.2.2", NODE_IP6, "fd13:2::2")
    # fd11::99 is in no namespace but this one's routes (none): a dead secondary.
    dead = Target("c1", "n2", NODE_IP4, None, "fd11::99", None)
    paths = enumerate_paths([alive])
    assert [(p.target_type.value, p.secondary, ip) for p, ip in paths[::2]] == [
        ("node", False, NODE_IP4),
        ("node", True, NODE_IP6),
        ("endpoint", False, "10.213.2.2"),
        ("endpoint", True, "fd13:2::2"),
    ]

    async def serve_both(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as inner:
            for ip in (NODE_IP4, NODE_IP6):
                await inner.start(serve_responder, ip, 4240)
            task_status.started()

    def in_node_ns() -> None:
        trio.run(scenario)

    async def scenario() -> None:
        async with open_pinger() as pinger, trio.open_nursery() as nursery:
            await nursery.start(serve_both)
            await nursery.start(endpoint.run)
            await wait_answering(node_ns, "fd13:2::2", 4240)
            with trio.fail_after(60):
                while True:
                    report = await run_round(
                        [alive, dead], pinger=pinger, http_port=4240, timeout_s=1.0
                    )
                    statuses = {r.path: r.result.status for r in report.paths}
                    if all(statuses[p] is ProbeStatus.OK for p, _ in paths):
                        break
                    await trio.sleep(0.2)
            assert statuses[PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP)] is ProbeStatus.OK
            dead_icmp6 = PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP, secondary=True)
            assert statuses[dead_icmp6] is not ProbeStatus.OK
            nursery.cancel_scope.cancel()

    # The whole round runs inside the node namespace (its own thread).
    await trio.to_thread.run_sync(lambda: call_in_netns(node_ns, in_node_ns))
