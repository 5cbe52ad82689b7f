"""`meshhealth lab up --dual-stack` and `--ipv6`: 3 nodes each, real namespaces, etcd and
agents; every node's status must show every node, both families where there are two,
OK over ICMP and HTTP (root; CI runs these). Each lab is removed in a finally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from meshhealth.lab import netns_ops
from meshhealth.lab import plan as P
from tests.plugins.netns import require_root

pytestmark = pytest.mark.netns

CLI = [sys.executable, "-m", "meshhealth"]
# Agents start, register, discover each other and finish a round with every endpoint
# up: seconds on an idle machine, generous under load.
HEALTHY_WITHIN_S = 180.0


def lab(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def status_of(node: P.NodePlan) -> dict[str, object] | None:
    done = subprocess.run(
        [*CLI, "status", "-H", f"unix://{node.socket}", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode not in (0, 1):
        return None
    try:
        doc: dict[str, object] = json.loads(done.stdout)
    except ValueError:
        return None
    return doc


def problems(doc: dict[str, object] | None, plan: P.LabPlan) -> list[str]:
    """Why `doc` is not yet a healthy status of every node of `plan` (empty: it is)."""
    if doc is None:
        return ["no status"]
    nodes = doc["nodes"]
    assert isinstance(nodes, list)
    found: list[str] = []
    if len(nodes) != len(plan.nodes):
        found.append(f"{len(nodes)} nodes")
    by_name = {n.name: n for n in plan.nodes}
    for node in nodes:
        want = by_name[node["name"]]
        for section, primary, secondary in (
            ("host", want.node_ip, want.node_ip_secondary),
            ("health_endpoint", want.health_ip, want.health_ip_secondary),
        ):
            address = node[section]
            if address is None:
                found.append(f"{node['name']}: no {section}")
                continue
            addresses = [address["primary_address"], *address.get("secondary_addresses", [])]
            ips = [a["ip"] for a in addresses]
            expected = [ip for ip in (primary, secondary) if ip is not None]
            if ips != expected:
                found.append(f"{node['name']} {section}: {ips} != {expected}")
            for a in addresses:
                for protocol in ("icmp", "http"):
                    if a[protocol]["status"] != "ok":
                        found.append(f"{node['name']} {a['ip']} {protocol}: {a[protocol]['text']}")
    return found


def log_tail(node: P.NodePlan, lines: int = 15) -> list[str]:
    try:
        return node.log.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return ["no log"]


@pytest.mark.parametrize("mode", ["dual", "ipv6"])
def test_three_node_lab_is_healthy_in_every_family(mode: str) -> None:
    require_root()
    prefix = f"pg{os.getpid() % 10000}{mode[0]}"
    plan = P.make_plan(prefix, 3, ip_mode=mode)
    flag = "--dual-stack" if mode == "dual" else "--ipv6"
    try:
        done = lab("up", "--nodes", "3", "--interval", "2", flag, "--prefix", prefix)
        assert done.returncode == 0, done.stdout + done.stderr
        if mode == "dual":
            assert "(and fd77::1:1, fd78:1:1::/64)" in done.stdout
        last: dict[str, list[str]] = {}
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        waiting = list(plan.nodes)
        while waiting and time.monotonic() < deadline:
            for node in list(waiting):
                last[node.name] = problems(status_of(node), plan)
                if not last[node.name]:
                    waiting.remove(node)
            if waiting:
                time.sleep(0.5)
        assert not waiting, (last, {n.name: log_tail(n) for n in waiting})
        # The routes the agents program: the peers' CIDRs of each family, via the
        # peer's NodeIP of that family.
        routes = netns_ops.run(["ip", "-n", plan.nodes[0].netns, "-6", "route", "show"])
        peer = plan.nodes[1]
        assert f"{peer.cidr_secondary or peer.cidr} via {peer.node_ips[-1]}" in routes, routes
        if mode == "ipv6":
            shown = netns_ops.run(["ip", "-n", plan.nodes[0].netns, "-4", "addr", "show"])
            assert "inet 10." not in shown  # IPv6 only: no IPv4 on the node
    finally:
        down = lab("down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
    assert not [n for n in netns_ops.list_netns() if n.startswith(f"{prefix}-")]
