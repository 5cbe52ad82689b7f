"""`meshhealth lab` against real namespaces, nftables and etcd (root; CI runs these).

Every lab here has a unique prefix (`mht<pid>...`) and is removed with `lab down` in a
fixture's finally, also when the test failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from meshhealth.lab import netns_ops
from meshhealth.lab import plan as P
from meshhealth.lab.processes import start_ticks
from tests.plugins.netns import NetnsFactory, require_root

pytestmark = pytest.mark.netns

CLI = [sys.executable, "-m", "meshhealth"]
_labs = 0


def lab(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def new_prefix() -> str:
    global _labs  # noqa: PLW0603 - unique prefixes within this pytest process
    _labs += 1
    return f"mht{os.getpid() % 100000}x{_labs}"


def leftovers(prefix: str, pids: list[int]) -> list[str]:
    """Everything of lab `prefix` still present: namespaces, processes, its directory."""
    left = [n for n in netns_ops.list_netns() if n.startswith(f"{prefix}-")]
    left += [f"pid {p}" for p in pids if start_ticks(p) is not None]
    if P.lab_dir(prefix).exists():
        left.append(str(P.lab_dir(prefix)))
    return left


def state_of(prefix: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((P.lab_dir(prefix) / "state.json").read_text())
    return data


def recorded_pids(prefix: str) -> list[int]:
    procs = state_of(prefix)["processes"]
    assert isinstance(procs, dict)
    return [int(p["pid"]) for p in procs.values()]


class Lab:
    def __init__(self, prefix: str, nodes: int) -> None:
        self.prefix = prefix
        self.plan = P.make_plan(prefix, nodes)
        self.up_output = ""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return lab(*args[:1], "--prefix", self.prefix, *args[1:])

    def ns(self, node: str) -> str:
        return self.plan.node(node).netns

    def run(self, node: str, *cmd: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(node), *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def pings(self, src: str, *ips: str) -> bool:
        done = self.run(src, "fping", "-q", "-t", "300", "-r", "1", *ips)
        return done.returncode == 0

    def http_ok(self, src: str, ip: str) -> bool:
        return netns_ops.tcp_answers(self.ns(src), ip, 4240, "/hello", 0.5)


def _down(prefix: str) -> None:
    done = lab("down", "--prefix", prefix)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def lab3() -> Iterator[Lab]:
    """A 3-node lab without agents, shared by the tests of this module."""
    require_root()
    prefix = new_prefix()
    try:
        done = lab("up", "--nodes", "3", "--no-agents", "--prefix", prefix)
        assert done.returncode == 0, done.stdout + done.stderr
        built = Lab(prefix, 3)
        built.up_output = done.stdout
        yield built
    finally:
        _down(prefix)
    assert leftovers(prefix, []) == []


def wait_until(cond: object, timeout_s: float = 10.0) -> bool:
    assert callable(cond)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def test_up_ends_with_commands_that_run_as_shown(lab3: Lab) -> None:
    """The "next:" lines name the program as the user's shell can run it: here, without
    the virtualenv on PATH (a new user's shell after scripts/quickstart.sh)."""
    steps = lab3.up_output.split("next:\n", 1)[1].splitlines()
    status_cmd = steps[0].strip()
    assert status_cmd.endswith(f"lab status --prefix {lab3.prefix}")
    assert not status_cmd.startswith("meshhealth ")
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    done = subprocess.run(
        status_cmd, shell=True, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"lab {lab3.prefix}: ready, 1 cluster(s) x 3 node(s)" in done.stdout


def test_up_builds_namespaces_and_etcd(lab3: Lab) -> None:
    present = set(netns_ops.list_netns())
    assert set(lab3.plan.netns_names) <= present
    etcd = lab3.plan.clusters[0].etcd_url
    done = lab3.run("node2", "etcdctl", "--endpoints", etcd, "endpoint", "health")
    assert done.returncode == 0 and "is healthy" in done.stdout + done.stderr
    others = [n.node_ip for n in lab3.plan.nodes[1:]]
    assert lab3.pings("node1", *others, lab3.plan.clusters[0].etcd_ip)
    # Nothing of the lab in the host's namespace.
    host_links = subprocess.run(
        ["ip", "-o", "link"], check=False, capture_output=True, text=True
    ).stdout
    assert not any(n.veth_fabric + ":" in host_links for n in lab3.plan.nodes)
    route = subprocess.run(
        ["ip", "route", "get", "10.77.0.2"], capture_output=True, text=True, check=False
    )
    assert "vl1n" not in route.stdout
    st = state_of(lab3.prefix)
    assert st["phase"] == "ready" and st["namespaces"] == list(lab3.plan.netns_names)


def test_up_again_refuses(lab3: Lab) -> None:
    done = lab3.cli("up", "--nodes", "2", "--no-agents")
    assert done.returncode == 1
    assert f"lab {lab3.prefix} already exists; run `meshhealth lab down` first" in done.stderr


def test_exec_sets_env_and_passes_exit_code(lab3: Lab) -> None:
    script = 'echo "$MESHHEALTH_SOCKET $ETCDCTL_ENDPOINTS"; ip -br addr show eth0; exit 7'
    done = lab3.cli("exec", "lab1/node3", "--", "sh", "-c", script)
    assert done.returncode == 7, done.stderr
    node = lab3.plan.node("node3")
    assert f"{node.socket} http://10.77.255.1:2379" in done.stdout
    assert node.node_ip in done.stdout
    keys = lab3.cli("exec", "node1", "--", "etcdctl", "put", "meshhealth/x", "1")
    assert keys.returncode == 0, keys.stderr
    bad = lab3.cli("exec", "node9", "--", "true")
    assert bad.returncode == 1 and "no node 'node9'" in bad.stderr


def test_icmp_drop_blocks_ping_not_tcp(lab3: Lab, netns_factory: NetnsFactory) -> None:
    ip2 = lab3.plan.node("node2").node_ip
    netns_factory.spawn(
        lab3.ns("node2"), *CLI, "responder", "--listen", f"{ip2}:4240", "--passive",
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert wait_until(lambda: lab3.http_ok("node1", ip2))
    assert lab3.pings("node1", ip2)
    done = lab3.cli("fault", "icmp-drop", "node2")
    assert done.returncode == 0, done.stderr
    try:
        assert not lab3.pings("node1", ip2)
        assert lab3.http_ok("node1", ip2)
        assert lab3.pings("node1", lab3.plan.node("node3").node_ip)
        status = lab3.cli("status")
        assert "icmp-drop on lab1/node2" in status.stdout
    finally:
        cleared = lab3.cli("fault", "clear", "node2")
    assert cleared.returncode == 0 and "cleared nft rules on lab1/node2" in cleared.stdout
    assert lab3.pings("node1", ip2)
    assert "faults: none" in lab3.cli("status").stdout


def test_partition_cuts_the_node_off(lab3: Lab) -> None:
    ip3 = lab3.plan.node("node3").node_ip
    assert lab3.cli("fault", "partition", "node3").returncode == 0
    try:
        assert not lab3.pings("node1", ip3)
        assert not lab3.pings("node3", lab3.plan.node("node2").node_ip)
        assert lab3.pings("node3", "10.77.255.1")  # etcd stays reachable
        assert lab3.pings("node1", lab3.plan.node("node2").node_ip)
    finally:
        assert lab3.cli("fault", "clear").returncode == 0
    assert lab3.pings("node1", ip3)


def test_endpoint_forward_drop(lab3: Lab, netns_factory: NetnsFactory) -> None:
    """A stand-in health endpoint behind node2 (the agent makes the real one): forwarded
    traffic to it is dropped, node2's own traffic to it is not."""
    node2 = lab3.plan.node("node2")
    endpoint = netns_factory.create()
    netns_factory.veth(
        node2.netns, endpoint, addrs_a=["10.78.2.1/24"], addrs_b=[f"{node2.health_ip}/24"],
        name_a="lxc_health", name_b="eth0",
    )  # fmt: skip
    netns_factory.route(endpoint, "default", "via", "10.78.2.1")
    netns_factory.route(lab3.ns("node1"), node2.cidr, "via", node2.node_ip)
    assert lab3.pings("node1", node2.health_ip)
    assert lab3.cli("fault", "endpoint-forward-drop", "node2").returncode == 0
    try:
        assert not lab3.pings("node1", node2.health_ip)
        assert lab3.pings("node1", node2.node_ip)
        assert lab3.pings("node2", node2.health_ip)
    finally:
        assert lab3.cli("fault", "clear", "node2").returncode == 0
        netns_factory.ip(lab3.ns("node1"), "route", "del", node2.cidr)
    again = lab3.cli("fault", "endpoint-forward-drop", "node2")
    assert again.returncode == 0
    assert "already active" not in again.stdout
    assert lab3.cli("fault", "clear", "node2").returncode == 0


def test_stop_and_start_etcd_keeps_data(lab3: Lab) -> None:
    assert lab3.cli("exec", "node1", "--", "etcdctl", "put", "meshhealth/k", "v").returncode == 0
    old_pid = recorded_pids(lab3.prefix)[0]
    assert lab3.cli("fault", "stop-etcd").returncode == 0
    try:
        assert start_ticks(old_pid) is None
        health = lab3.run("node1", "etcdctl", "--endpoints", "http://10.77.255.1:2379",
                          "--dial-timeout", "300ms", "--command-timeout", "500ms",
                          "endpoint", "health")  # fmt: skip
        assert health.returncode != 0
        status = lab3.cli("status").stdout
        assert "stop-etcd on lab1" in status and "NOT RUNNING" in status
        assert "2379 NOT ANSWERING" in status
    finally:
        started = lab3.cli("fault", "start-etcd", "lab1")
    assert started.returncode == 0, started.stderr
    assert "etcd of lab1 started" in started.stdout
    got = lab3.cli("exec", "node2", "--", "etcdctl", "get", "--print-value-only", "meshhealth/k")
    assert got.stdout.strip() == "v"
    assert "faults: none" in lab3.cli("status").stdout


def test_kill_agent_needs_an_agent(lab3: Lab) -> None:
    done = lab3.cli("fault", "kill-agent", "node1")
    assert done.returncode == 1 and "no running agent on lab1/node1" in done.stderr
    bad = lab3.cli("fault", "flood", "node1")
    assert bad.returncode == 1 and "unknown fault 'flood'" in bad.stderr


def test_down_removes_everything_and_is_idempotent() -> None:
    require_root()
    prefix = new_prefix()
    try:
        up = lab("up", "--nodes", "2", "--no-agents", "--prefix", prefix)
        assert up.returncode == 0, up.stderr
        pids = recorded_pids(prefix)
        assert pids and all(start_ticks(p) is not None for p in pids)
        assert lab("fault", "--prefix", prefix, "icmp-drop", "node1").returncode == 0
    finally:
        down = lab("down", "--prefix", prefix)
    assert down.returncode == 0 and f"lab {prefix} removed" in down.stdout
    assert leftovers(prefix, pids) == []
    again = lab("down", "--prefix", prefix)
    assert again.returncode == 0 and f"no lab {prefix}" in again.stdout
    status = lab("status", "--prefix", prefix)
    assert status.returncode == 1 and f"no lab {prefix}" in status.stderr


def test_crash_mid_build_is_removed_by_down() -> None:
    require_root()
    prefix = new_prefix()
    env = {**os.environ, "MESHHEALTH_LAB_CRASH_AT": "lab1/node2"}
    pids: list[int] = []
    try:
        up = lab("up", "--nodes", "3", "--no-agents", "--prefix", prefix, env=env)
        assert up.returncode == 3, up.stdout + up.stderr
        st = state_of(prefix)
        assert st["phase"] == "building"
        assert st["namespaces"] == [
            f"{prefix}-fabric",
            f"{prefix}-lab1-node1",
            f"{prefix}-lab1-node2",
        ]
        pids = recorded_pids(prefix)
        assert all(start_ticks(p) is not None for p in pids)
        assert lab("up", "--no-agents", "--prefix", prefix).returncode == 1
    finally:
        down = lab("down", "--prefix", prefix)
    assert down.returncode == 0, down.stderr
    assert leftovers(prefix, pids) == []


def test_failure_mid_build_tears_down() -> None:
    require_root()
    prefix = new_prefix()
    env = {**os.environ, "MESHHEALTH_LAB_FAIL_AT": "etcd"}
    try:
        up = lab("up", "--nodes", "2", "--no-agents", "--prefix", prefix, env=env)
        assert up.returncode == 1
        assert "injected failure after step etcd" in up.stderr
        assert "removing the half-built lab" in up.stdout
        assert leftovers(prefix, []) == []
    finally:
        _down(prefix)


def test_missing_tools_is_one_line() -> None:
    require_root()
    env = {**os.environ, "PATH": "/nonexistent"}
    done = lab("up", "--no-agents", "--prefix", new_prefix(), env=env)
    assert done.returncode == 1
    assert done.stderr == (
        "meshhealth lab: missing ip, nft, etcd, nsenter on PATH "
        "(Debian: iproute2, nftables, etcd-server, util-linux; or run scripts/setup.sh)\n"
    )


def test_two_clusters_share_the_fabric() -> None:
    require_root()
    prefix = new_prefix()
    try:
        up = lab("up", "--nodes", "2", "--clusters", "2", "--no-agents", "--prefix", prefix)
        assert up.returncode == 0, up.stdout + up.stderr
        two = Lab(prefix, 2)
        two.plan = P.make_plan(prefix, 2, 2)
        assert two.pings("lab1/node1", "10.77.1.1", "10.77.1.2", "10.77.255.2")
        for node, etcd in (("lab1/node2", "10.77.255.1"), ("lab2/node2", "10.77.255.2")):
            env = two.cli("exec", node, "--", "sh", "-c", "etcdctl endpoint health 2>&1")
            assert env.returncode == 0 and f"http://{etcd}:2379 is healthy" in env.stdout
        assert set(recorded_pids(prefix)) and len(recorded_pids(prefix)) == 2
    finally:
        _down(prefix)
    assert leftovers(prefix, []) == []
