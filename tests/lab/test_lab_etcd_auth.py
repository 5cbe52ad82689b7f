"""`meshhealth lab up --etcd-auth`: one cluster of 3 nodes whose etcd has authentication
on and whose agents each use their own etcd user (meshhealth.etcd_roles). The lab must
converge, and node1's user must not be able to write node2's entries (root; real
namespaces, etcd and agents). The lab is removed in a finally."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from meshhealth.lab import etcd_auth
from meshhealth.lab import plan as P
from meshhealth.lab.build import endpoint_names_taken
from meshhealth.lab.netns_ops import list_netns
from meshhealth.wire import keys
from tests.plugins.netns import require_root

pytestmark = pytest.mark.netns

CLI = [sys.executable, "-m", "meshhealth"]


def lab(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def etcdctl(plan: P.LabPlan, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    argv = ["ip", "netns", "exec", plan.fabric_netns, "etcdctl", "--dial-timeout", "2s"]
    argv += ["--endpoints", plan.clusters[0].etcd_url, *args]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
        env=dict(env, ETCDCTL_API="3"),
    )


def test_etcd_auth_needs_one_cluster() -> None:
    done = lab("up", "--clusters", "2", "--etcd-auth", "--prefix", "mhsex")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "--etcd-auth builds one cluster" in done.stderr
    assert not [n for n in list_netns() if n.startswith("mhsex-")]


def test_a_lab_with_a_user_per_agent_converges_and_keeps_nodes_apart() -> None:
    require_root()
    prefix = f"mhse{os.getpid() % 1000}"
    plan = P.make_plan(prefix, 3)
    taken = endpoint_names_taken(plan)
    if taken:
        pytest.skip(f"another lab with agents is up ({taken[0]} exists); `lab down` it first")
    try:
        done = lab("up", "--nodes", "3", "--interval", "2", "--etcd-auth", "--prefix", prefix)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "etcd authentication on: 3 node user(s)" in done.stdout
        assert "converged: cluster verdict lab1 3/3 reachable" in done.stdout
        passwords = etcd_auth.password_dir(plan)
        assert stat.S_IMODE(passwords.stat().st_mode) == 0o700
        files = sorted(passwords.iterdir())
        assert [f.name for f in files] == [
            "meshhealth_node_lab1_node1.password",
            "meshhealth_node_lab1_node2.password",
            "meshhealth_node_lab1_node3.password",
            "root.password",
        ]
        assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
        # authentication is on: no user, no read
        anonymous = etcdctl(plan, "get", "--prefix", "--keys-only", "meshhealth/")
        assert anonymous.returncode != 0 and "user name is empty" in anonymous.stderr
        # node1's user reads everything, writes its own entries only
        node1 = plan.nodes[0]
        user = etcd_auth.node_user(node1)
        password = (passwords / f"{user}.password").read_text().strip()
        as_node1 = [f"--user={user}:{password}"]
        listed = etcdctl(plan, *as_node1, "get", "--prefix", "--keys-only", "meshhealth/state/")
        assert keys.node_key("lab1", "node2") in listed.stdout, listed.stderr
        for key in (keys.node_key("lab1", "node2"), keys.health_key("lab1", "node2")):
            forged = etcdctl(plan, *as_node1, "put", key, "forged")
            assert forged.returncode != 0 and "permission denied" in forged.stderr, key
        # the agents themselves were never refused
        for node in plan.nodes:
            assert "permission denied" not in node.log.read_text(errors="replace")
    finally:
        down = lab("down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
    assert not [n for n in list_netns() if n.startswith(f"{prefix}-")]
