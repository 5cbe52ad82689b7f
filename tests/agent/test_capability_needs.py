"""What the agent's mode needs of the kernel (pure table), and the agent keeping only
that: a real `meshhealth agent` process, its /proc status read."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from meshhealth.agent.capability_needs import CapabilityMode, describe, needed_capabilities
from meshhealth.agent.config.agent_config import resolve_config
from meshhealth.privileges import parse_status, read_privileges

BASE = {"cluster": "c1", "node": "n1", "node_ip": "10.0.0.1", "health_ip": "10.200.0.2"}
ENDPOINT = ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_KILL"]


@pytest.mark.parametrize(
    ("settings", "root", "endpoint_uid", "needed"),
    [
        pytest.param({"health_mode": "none"}, True, 65534, ["CAP_NET_RAW"], id="none"),
        pytest.param(
            {"health_mode": "none", "route_cidrs": True},
            True,
            65534,
            ["CAP_NET_RAW", "CAP_NET_ADMIN"],
            id="none + routes",
        ),
        pytest.param(
            {"health_mode": "netns"},
            True,
            65534,
            ["CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", *ENDPOINT],
            id="netns",
        ),
        pytest.param(
            {"health_mode": "netns", "endpoint_user": "root"},
            True,
            0,
            ["CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SETPCAP"],
            id="netns, responder stays root",
        ),
        pytest.param(
            {"health_mode": "loopback", "health_ip": "127.0.2.1"},
            True,
            65534,
            ["CAP_NET_RAW", *ENDPOINT],
            id="loopback as root",
        ),
        pytest.param(
            {"health_mode": "loopback", "health_ip": "127.0.2.1"},
            False,
            65534,
            ["CAP_NET_RAW"],
            id="loopback, not root: no switch",
        ),
        pytest.param(
            {"health_mode": "none", "metrics_listen": "0.0.0.0:443"},
            True,
            65534,
            ["CAP_NET_RAW", "CAP_NET_BIND_SERVICE"],
            id="low port",
        ),
        pytest.param(
            {"health_mode": "none", "http_port": 80},
            True,
            65534,
            ["CAP_NET_RAW", "CAP_NET_BIND_SERVICE"],
            id="low responder port",
        ),
    ],
)
def test_needed_capabilities(
    settings: dict[str, Any], root: bool, endpoint_uid: int, needed: list[str]
) -> None:
    config = resolve_config({**BASE, **settings}, {}, {})
    mode = CapabilityMode.of(config, root=root, endpoint_uid=endpoint_uid)
    assert list(needed_capabilities(mode)) == needed


def test_the_line_says_why_what_was_dropped_and_what_is_missing() -> None:
    needed = {"CAP_NET_RAW": "ICMP probes", "CAP_NET_ADMIN": "routes to peers' CIDRs"}
    full = parse_status(
        "Uid:\t0 0 0 0\nGid:\t0 0 0 0\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n"
    )
    kept = parse_status("Uid:\t0 0 0 0\nGid:\t0 0 0 0\nCapPrm:\t2000\nCapEff:\t2000\n")
    assert describe(needed, full, kept) == (
        "capabilities: this mode needs CAP_NET_RAW (ICMP probes), CAP_NET_ADMIN (routes to "
        "peers' CIDRs); dropped the other 40; missing CAP_NET_ADMIN (what needs them will fail)"
    )


def test_an_agent_without_endpoint_nor_routes_keeps_only_cap_net_raw(tmp_path: Path) -> None:
    """A real agent (etcd unreachable: a closed loopback port) in health mode none."""
    assert "CAP_SYS_ADMIN" in read_privileges().effective  # we are root: there is a drop
    log_path = tmp_path / "agent.log"
    argv = [
        *(sys.executable, "-m", "meshhealth", "agent", "--etcd", "http://127.0.0.1:9"),
        *("--cluster", "c1", "--node", "n1", "--node-ip", "127.0.0.1"),
        *("--health-mode", "none", "--socket", str(tmp_path / "a.sock")),
    ]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while "capabilities:" not in log_path.read_text() and time.monotonic() < deadline:
                assert proc.poll() is None, log_path.read_text()
                time.sleep(0.05)
            agent = read_privileges(proc.pid)
            # the agent still answers on its admin socket
            while not (tmp_path / "a.sock").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            done = subprocess.run(
                [sys.executable, "-m", "meshhealth", "status", "-H", f"unix://{tmp_path}/a.sock"],
                capture_output=True, text=True, timeout=20, check=False,
            )  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    log = log_path.read_text()
    assert "capabilities: this mode needs CAP_NET_RAW (ICMP probes); dropped the other" in log
    assert agent.uids[1] == 0
    assert agent.effective == agent.permitted == agent.bounding == {"CAP_NET_RAW"}
    assert agent.inheritable == agent.ambient == frozenset()
    assert done.returncode in (0, 1), done.stderr
    assert "Permission denied" not in log
