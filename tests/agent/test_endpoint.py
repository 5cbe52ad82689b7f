"""The health endpoint supervisor: loopback mode (no root) and netns mode (real namespaces).

Every child process and namespace made here is removed even when a test fails: the
supervisor stops its child on cancellation, endpoint namespaces are registered with
`netns_factory` (which deletes them on teardown).
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import trio

from meshhealth.agent.config.agent_config import resolve_config
from meshhealth.agent.health_endpoint import namespace as endpoint_netns
from meshhealth.agent.health_endpoint.child import responder_argv
from meshhealth.agent.health_endpoint.routes import RouteProgrammer
from meshhealth.agent.health_endpoint.supervisor import (
    REASON_EXITED,
    REASON_NETNS_MISSING,
    REASON_SETUP_FAILED,
    REASON_START_FAILED,
    REASON_VETH_MISSING,
    HealthEndpoint,
    RestartBackoff,
    endpoint_from_config,
)
from meshhealth.model import Node
from meshhealth.netns import socket_in_netns
from meshhealth.privileges import read_privileges
from meshhealth.probe.http import http_probe
from tests.plugins.netns import NetnsFactory

FAST_BACKOFF = RestartBackoff(min_s=0.05, max_s=0.2, stable_s=5.0)
_counter = 0


# --- helpers -----------------------------------------------------------------------------


def loopback_ip() -> str:
    """A 127.x address of our own: pytest runs in parallel never share one."""
    global _counter  # noqa: PLW0603 - unique per test in this process
    _counter += 1
    return f"127.{80 + os.getpid() % 100}.{os.getpid() // 100 % 250 + 1}.{_counter}"


def free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        port: int = sock.getsockname()[1]
        return port


def endpoint_netns_for_test(factory: NetnsFactory) -> str:
    """A fresh endpoint namespace name; `factory` deletes it on teardown if still there."""
    global _counter  # noqa: PLW0603
    _counter += 1
    name = f"mh{os.getpid()}h{_counter}"
    factory.namespaces.append(name)
    return name


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll `predicate` until true; fails the test after `timeout_s`."""
    with trio.fail_after(timeout_s):
        while True:
            if predicate():
                return
            await trio.sleep(0.05)


async def http_status(netns: str | None, ip: str, port: int, timeout_s: float = 2.0) -> int | None:
    """`GET /hello` from inside `netns` (None: here); the status code, None on failure."""
    sock = trio.socket.from_stdlib_socket(
        socket_in_netns(netns, socket.AF_INET, socket.SOCK_STREAM)
    )
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


async def answers(netns: str | None, ip: str, port: int) -> bool:
    return await http_status(netns, ip, port) == 200


async def pings(factory: NetnsFactory, netns: str, ip: str) -> bool:
    done: subprocess.CompletedProcess[str] = await trio.to_thread.run_sync(
        lambda: factory.run(netns, "fping", "-t", "1000", "-r", "1", ip, check=False)
    )
    return done.returncode == 0


async def wait_answering(netns: str | None, ip: str, port: int, timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        while True:
            if await answers(netns, ip, port):
                return
            await trio.sleep(0.05)


# --- pure parts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uptimes", "delays"),
    [
        pytest.param([0, 0, 0, 0, 0, 0, 0, 0], [0.2, 0.4, 0.8, 1.6, 3.2, 5, 5, 5], id="doubles"),
        pytest.param([0, 0, 0, 10, 0], [0.2, 0.4, 0.8, 0.2, 0.4], id="reset after stable"),
        pytest.param([9.9, 9.9], [0.2, 0.4], id="not quite stable"),
    ],
)
def test_restart_backoff(uptimes: list[float], delays: list[float]) -> None:
    backoff = RestartBackoff(min_s=0.2, max_s=5.0, stable_s=10.0)
    assert [backoff.next_delay(u) for u in uptimes] == pytest.approx(delays)


@pytest.mark.parametrize(
    ("cluster", "node", "expected"),
    [
        ("lab1", "node1", "mh-health-lab1-node1"),
        ("default", "web.example", "mh-health-default-web.example"),
        ("c", "a b/c", "mh-health-c-a-b-c"),
    ],
)
def test_endpoint_netns_name(cluster: str, node: str, expected: str) -> None:
    assert endpoint_netns.endpoint_netns_name(cluster, node) == expected


def test_endpoint_netns_name_long_is_cut_and_unique() -> None:
    one = endpoint_netns.endpoint_netns_name("cluster" * 5, "node-a" * 8)
    two = endpoint_netns.endpoint_netns_name("cluster" * 5, "node-b" * 8)
    assert len(one) <= endpoint_netns.MAX_NETNS_NAME
    assert one.startswith("mh-health-cluster")
    assert one != two


def test_responder_argv() -> None:
    assert responder_argv("/py", "127.0.2.1", 4240, "n1") == [
        "/py",
        "-m",
        "meshhealth",
        "responder",
        "--listen",
        "127.0.2.1:4240",
        "--passive",
        "--node-name",
        "n1",
    ]
    dual = responder_argv("/py", "10.78.1.2", 4240, "n1", "fd78:1::2")
    assert dual[4:8] == ["--listen", "10.78.1.2:4240", "--listen", "[fd78:1::2]:4240"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "loopback", "health_ip": "10.0.0.1"}, "127.x"),
        ({"mode": "netns", "health_ip": "10.0.0.1"}, "namespace name"),
        (
            {
                "mode": "netns",
                "health_ip": "fd00::2",
                "netns": "mhx",
                "health_ip_secondary": "fd::3",
            },
            "other family",
        ),
        ({"mode": "loopback", "health_ip": "127.0.0.1", "health_ip_secondary": "fd::3"}, "::1"),
        ({"mode": "netns", "health_ip": "10.0.0.1", "netns": "mhx", "node_netns": "mhx"}, "own"),
        ({"mode": "netns", "health_ip": "10.0.0.1", "netns": "a/b"}, "invalid network namespace"),
        (
            {"mode": "netns", "health_ip": "10.0.0.1", "netns": "mhx", "host_iface": "x" * 16},
            "interface name",
        ),
        ({"mode": "none", "health_ip": "127.0.0.1"}, "mode must be"),
    ],
)
def test_endpoint_rejects_bad_settings(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HealthEndpoint(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "argv_start"),
    [("loopback", [sys.executable]), ("netns", ["ip", "netns", "exec", "mh-health-c1-n1"])],
)
def test_endpoint_from_config(mode: str, argv_start: list[str]) -> None:
    health_ip = "127.0.9.1" if mode == "loopback" else "10.78.1.2"
    config = resolve_config(
        {
            "cluster": "c1",
            "node": "n1",
            "node_ip": "127.0.0.1",
            "health_ip": health_ip,
            "health_mode": mode,
        },
        {},
        {},
    )
    endpoint = endpoint_from_config(config)
    assert endpoint is not None
    assert endpoint.argv[: len(argv_start)] == argv_start
    assert endpoint.argv[-5:] == ["--listen", f"{health_ip}:4240", "--passive", "--node-name", "n1"]
    # A root agent's responder drops to the endpoint user (nobody by default).
    at = endpoint.argv.index("--exit-with-parent")
    assert endpoint.argv[at : at + 3] == ["--exit-with-parent", "--user", "nobody"]
    none = resolve_config({"node": "n1", "node_ip": "127.0.0.1", "health_mode": "none"}, {}, {})
    assert endpoint_from_config(none) is None


# --- loopback mode -----------------------------------------------------------------------


async def test_loopback_endpoint_answers_restarts_and_stops() -> None:
    ip = loopback_ip()
    port = free_port(ip)
    endpoint = HealthEndpoint(
        mode="loopback", health_ip=ip, port=port, node_name="n1", backoff=FAST_BACKOFF
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        state = endpoint.state
        assert state.running
        first_pid = state.pid
        assert first_pid is not None and first_pid != os.getpid()
        result = await http_probe(ip, port, timeout_s=2.0)
        assert result.ok, result

        os.kill(first_pid, signal.SIGKILL)  # the responder dies
        await wait_for(lambda: state.running and state.pid not in (None, first_pid))
        assert state.restarts == 1
        assert state.restarts_by_reason == {REASON_EXITED: 1}
        assert state.last_error is not None and "exited with code" in state.last_error
        await wait_answering(None, ip, port)
        second_pid = state.pid
        assert second_pid is not None
        nursery.cancel_scope.cancel()
    assert not endpoint.state.running and endpoint.state.pid is None
    assert pid_gone(first_pid) and pid_gone(second_pid)
    assert await http_status(None, ip, port) is None


async def test_loopback_endpoint_retries_until_the_port_is_free() -> None:
    ip = loopback_ip()
    blocker = socket.socket()
    blocker.bind((ip, 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    endpoint = HealthEndpoint(mode="loopback", health_ip=ip, port=port, backoff=FAST_BACKOFF)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run)  # returns after the first failed attempt
            state = endpoint.state
            assert not state.running
            assert state.restarts_by_reason[REASON_START_FAILED] >= 1
            assert state.last_error is not None
            assert "address already in use" in state.last_error
            blocker.close()
            await wait_for(lambda: state.running)
            await wait_answering(None, ip, port)
            nursery.cancel_scope.cancel()
    finally:
        blocker.close()


async def test_cancel_while_starting_leaves_no_process() -> None:
    ip = loopback_ip()
    endpoint = HealthEndpoint(mode="loopback", health_ip=ip, port=free_port(ip))
    pids: list[int] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(endpoint.run)
            await wait_for(lambda: endpoint.state.pid is not None)
            pids.append(endpoint.state.pid or 0)
            scope.cancel()  # most likely before the responder is ready
    assert pids and pid_gone(pids[0])
    assert endpoint.state.pid is None


# --- netns mode --------------------------------------------------------------------------


@pytest.fixture
def node_ns(netns_factory: NetnsFactory) -> Iterator[str]:
    """A node namespace with a NodeIP on lo (the source of node -> endpoint traffic)."""
    ns = netns_factory.create()
    netns_factory.ip(ns, "addr", "add", "10.211.0.1/32", "dev", "lo")
    yield ns


def netns_exists(name: str) -> bool:
    return endpoint_netns.netns_inode(name) is not None


def link_exists(factory: NetnsFactory, netns: str, iface: str) -> bool:
    done = subprocess.run(
        ["ip", "-n", netns, "link", "show", "dev", iface], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.netns
async def test_netns_endpoint_lifecycle(netns_factory: NetnsFactory, node_ns: str) -> None:
    ep_ns = endpoint_netns_for_test(netns_factory)
    health_ip = "10.213.1.2"
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip=health_ip,
        port=4240,
        node_name="n1",
        netns=ep_ns,
        node_netns=node_ns,
        check_interval_s=0.2,
        backoff=FAST_BACKOFF,
    )
    state = endpoint.state
    pids: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        assert state.running, state
        pids.append(state.pid or 0)
        # What was built.
        assert netns_exists(ep_ns)
        assert link_exists(netns_factory, node_ns, "lxc_health")
        addrs = netns_factory.ip(ep_ns, "-br", "addr", "show", "dev", "eth0").stdout
        assert f"{health_ip}/32" in addrs
        assert "inet " not in netns_factory.ip(node_ns, "-4", "addr", "show", "lxc_health").stdout
        route = netns_factory.ip(node_ns, "route", "show", f"{health_ip}/32").stdout
        assert f"{health_ip} dev lxc_health" in route
        # The kernel in the endpoint namespace answers ICMP, the responder HTTP.
        assert await pings(netns_factory, node_ns, health_ip)
        assert await answers(node_ns, health_ip, 4240)

        # The endpoint namespace is deleted: re-created, counted, answering again.
        netns_factory.run(node_ns, "ip", "netns", "del", ep_ns)
        await wait_for(lambda: state.restarts_by_reason[REASON_NETNS_MISSING] == 1)
        await wait_for(lambda: state.running)
        pids.append(state.pid or 0)
        await wait_answering(node_ns, health_ip, 4240)
        assert await pings(netns_factory, node_ns, health_ip)

        # The veth is deleted (from the node side).
        netns_factory.ip(node_ns, "link", "del", "lxc_health")
        await wait_for(lambda: state.restarts_by_reason[REASON_VETH_MISSING] == 1)
        await wait_for(lambda: state.running)
        pids.append(state.pid or 0)
        await wait_answering(node_ns, health_ip, 4240)

        # The responder dies.
        os.kill(pids[-1], signal.SIGKILL)
        await wait_for(lambda: state.restarts_by_reason[REASON_EXITED] == 1)
        await wait_for(lambda: state.running)
        pids.append(state.pid or 0)
        await wait_answering(node_ns, health_ip, 4240)
        assert state.restarts == 3
        nursery.cancel_scope.cancel()
    # Shutdown removes process, namespace and veth.
    assert all(pid_gone(pid) for pid in pids), pids
    assert not netns_exists(ep_ns)
    assert not link_exists(netns_factory, node_ns, "lxc_health")


@pytest.mark.netns
async def test_netns_endpoint_responder_runs_unprivileged(
    netns_factory: NetnsFactory, node_ns: str
) -> None:
    """The responder opens its listener as root, then runs as nobody:nogroup with no
    capabilities (not even in its bounding set) and no_new_privs, and still answers;
    the agent still stops it by PID."""
    nobody = pwd.getpwnam("nobody")
    ep_ns = endpoint_netns_for_test(netns_factory)
    health_ip = "10.213.1.2"
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip=health_ip,
        port=4240,
        netns=ep_ns,
        node_netns=node_ns,
        user="nobody",
        backoff=FAST_BACKOFF,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        assert endpoint.state.running, endpoint.state
        pid = endpoint.state.pid
        assert pid is not None
        child = read_privileges(pid)
        assert child.uids == (nobody.pw_uid,) * 4
        assert child.gids == (nobody.pw_gid,) * 4
        assert child.groups == ()
        assert child.effective == child.permitted == child.inheritable == frozenset()
        assert child.ambient == child.bounding == frozenset()
        assert child.no_new_privs
        assert await answers(node_ns, health_ip, 4240)
        assert await pings(netns_factory, node_ns, health_ip)
        nursery.cancel_scope.cancel()
    assert pid_gone(pid)
    assert not netns_exists(ep_ns)


async def test_responder_with_an_unknown_user_does_not_serve() -> None:
    ip = loopback_ip()
    endpoint = HealthEndpoint(
        mode="loopback",
        health_ip=ip,
        port=free_port(ip),
        user="no-such-user-mh",
        backoff=FAST_BACKOFF,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)  # after the first failed attempt
        assert not endpoint.state.running
        assert endpoint.state.restarts_by_reason[REASON_START_FAILED] >= 1
        assert "no such user: no-such-user-mh" in (endpoint.state.last_error or "")
        nursery.cancel_scope.cancel()


@pytest.mark.netns
async def test_netns_endpoint_clears_leftovers(netns_factory: NetnsFactory, node_ns: str) -> None:
    ep_ns = endpoint_netns_for_test(netns_factory)
    # A crashed agent left its namespace with a process inside.
    endpoint_netns.create_netns(ep_ns)
    leftover = netns_factory.spawn(ep_ns, "sleep", "60")
    await wait_for(lambda: leftover.pid in endpoint_netns.netns_pids(ep_ns))
    endpoint = HealthEndpoint(
        mode="netns", health_ip="10.213.1.2", netns=ep_ns, node_netns=node_ns, port=4240
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        assert endpoint.state.running, endpoint.state
        assert leftover.poll() is not None  # stopped
        assert await answers(node_ns, "10.213.1.2", 4240)
        nursery.cancel_scope.cancel()
    assert not netns_exists(ep_ns)


@pytest.mark.netns
async def test_netns_endpoint_leaves_foreign_interface_alone(
    netns_factory: NetnsFactory, node_ns: str
) -> None:
    other = netns_factory.create()
    # Someone else's `lxc_health` in the node namespace (e.g. Cilium's).
    netns_factory.veth(node_ns, other, name_a="lxc_health", name_b="peer0")
    ep_ns = endpoint_netns_for_test(netns_factory)
    endpoint = HealthEndpoint(
        mode="netns",
        health_ip="10.213.1.2",
        netns=ep_ns,
        node_netns=node_ns,
        backoff=FAST_BACKOFF,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        state = endpoint.state
        assert not state.running
        assert state.restarts_by_reason[REASON_SETUP_FAILED] >= 1
        assert state.last_error is not None and "is not this endpoint's" in state.last_error
        nursery.cancel_scope.cancel()
    assert link_exists(netns_factory, node_ns, "lxc_health")  # untouched


@pytest.mark.netns
async def test_endpoint_reachable_across_nodes_with_programmed_routes(
    netns_factory: NetnsFactory,
) -> None:
    """Node A's endpoint answers node B through routes built from Node entries."""
    a, b = netns_factory.create(), netns_factory.create()
    netns_factory.veth(a, b, addrs_a=["10.212.0.1/24"], addrs_b=["10.212.0.2/24"])
    nodes = [
        Node("na", "c1", "10.212.0.1", "10.220.1.2", ("10.220.1.0/24",), 4240, "t", 0.0),
        Node("nb", "c1", "10.212.0.2", "10.220.2.2", ("10.220.2.0/24",), 4240, "t", 0.0),
    ]
    endpoints = [
        HealthEndpoint(
            mode="netns",
            health_ip=n.health_ip or "",
            port=4240,
            node_name=n.name,
            netns=endpoint_netns_for_test(netns_factory),
            node_netns=ns,
        )
        for n, ns in zip(nodes, (a, b), strict=True)
    ]
    programmers = [
        RouteProgrammer(cluster="c1", node=n.name, own_cidrs=n.cidrs, node_netns=ns)
        for n, ns in zip(nodes, (a, b), strict=True)
    ]
    async with trio.open_nursery() as nursery:
        for endpoint in endpoints:
            await nursery.start(endpoint.run)
            assert endpoint.state.running
        # Without routes, B cannot reach A's endpoint.
        assert await http_status(b, "10.220.1.2", 4240, timeout_s=0.3) is None
        for programmer in programmers:
            await nursery.start(programmer.run)
            programmer.set_peers(nodes)
        await wait_for(lambda: all(len(p.state.installed) == 1 for p in programmers))
        assert await pings(netns_factory, b, "10.220.1.2")
        assert await answers(b, "10.220.1.2", 4240)
        assert await pings(netns_factory, a, "10.220.2.2")
        assert await answers(a, "10.220.2.2", 4240)
        # A leaves: B's route goes, and with it the way to A's endpoint.
        programmers[1].set_peers(nodes[1:])
        await wait_for(lambda: programmers[1].state.installed == {})
        assert await http_status(b, "10.220.1.2", 4240, timeout_s=0.3) is None
        nursery.cancel_scope.cancel()


# The agent's way: the supervisor runs inside the node namespace (node_netns=None).
AGENT_LIKE_DRIVER = """
import signal, sys, trio
from meshhealth.agent.health_endpoint.supervisor import HealthEndpoint

async def main():
    endpoint = HealthEndpoint(mode="netns", health_ip=sys.argv[1], netns=sys.argv[2], port=4240)
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run)
            print("ready", endpoint.state.running, endpoint.state.pid, flush=True)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()

trio.run(main)
"""


@pytest.mark.netns
async def test_netns_endpoint_from_inside_the_node_namespace(
    netns_factory: NetnsFactory, node_ns: str
) -> None:
    ep_ns = endpoint_netns_for_test(netns_factory)
    driver = netns_factory.spawn(
        node_ns,
        sys.executable,
        "-c",
        AGENT_LIKE_DRIVER,
        "10.213.1.2",
        ep_ns,
        stdout=subprocess.PIPE,
    )
    assert driver.stdout is not None
    with driver.stdout, trio.fail_after(20):
        line = await trio.to_thread.run_sync(driver.stdout.readline)
    word, running, pid = line.decode().split()
    assert (word, running) == ("ready", "True")
    assert await pings(netns_factory, node_ns, "10.213.1.2")
    assert await answers(node_ns, "10.213.1.2", 4240)
    forward = netns_factory.run(node_ns, "cat", "/proc/sys/net/ipv4/ip_forward").stdout
    assert forward.strip() == "1"
    driver.send_signal(signal.SIGTERM)
    with trio.fail_after(15):
        code = await trio.to_thread.run_sync(driver.wait)
    assert code == 0
    assert pid_gone(int(pid))
    assert not netns_exists(ep_ns)
    assert not link_exists(netns_factory, node_ns, "lxc_health")
