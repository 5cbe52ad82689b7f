"""Indirect probes end to end: a netns lab of 3 real agents (root; CI runs it).

node1's path to node3 is broken by an nftables rule in node1's namespace (made by this
test, as the lab's faults are): node1's `status` says node3 is "reachable via lab1/node2:
path from this node broken", while node2 still reaches node3. Then node3 is cut off from
everyone (the lab's `partition` fault): node1's status says node2 fails it too, "target
down". The lab is removed with `lab down` in the fixture's finally.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from meshhealth.lab import plan as P
from meshhealth.lab.build import endpoint_names_taken
from meshhealth.lab.control import fetch_status
from tests.plugins.netns import require_root

pytestmark = [pytest.mark.netns, pytest.mark.slow]

CLI = [sys.executable, "-m", "meshhealth"]
INTERVAL_S = 1.5
# A broken path shows within an interval, a probe timeout and the helpers' answer (~2 s);
# generous for a loaded machine.
SHOW_S = 40.0


def _lab(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


class Lab:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.plan = P.make_plan(prefix, 3, 1)

    def doc(self, observer: str) -> dict[str, Any] | None:
        try:
            return fetch_status(self.plan.node(observer).socket)
        except (OSError, ValueError):
            return None

    def nft(self, node: str, *args: str, script: str | None = None) -> None:
        done = subprocess.run(
            ["ip", "netns", "exec", self.plan.node(node).netns, "nft", *args],
            input=script,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def metric(self, node: str, series: str) -> float:
        """One series of `node`'s /metrics, read from inside its namespace."""
        url = f"http://{self.plan.node(node).metrics_listen}/metrics"
        code = f"import urllib.request; print(urllib.request.urlopen({url!r}).read().decode())"
        done = subprocess.run(
            ["ip", "netns", "exec", self.plan.node(node).netns, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        for line in done.stdout.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        raise AssertionError(f"{series} not in {node}'s metrics")

    def wait_path(
        self,
        observer: str,
        target: str,
        want: Callable[[dict[str, Any]], bool],
        what: str,
    ) -> dict[str, Any]:
        """Poll `observer`'s status until its host ICMP path to `target` is `want`."""
        deadline = time.monotonic() + SHOW_S
        seen: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            doc = self.doc(observer)
            for node in doc["nodes"] if doc else ():
                if node["name"] == target:
                    seen = node["host"]["primary_address"]["icmp"]
                    if want(seen):
                        return seen
            time.sleep(0.2)
        pytest.fail(f"{observer} never saw {target} {what} within {SHOW_S:g}s; last: {seen}")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    require_root()
    prefix = f"pe{os.getpid() % 10000}"
    lab = Lab(prefix)
    taken = endpoint_names_taken(lab.plan)
    assert not taken, f"{taken[0]} exists: a lab of this prefix is up"
    try:
        done = _lab(
            "up", "--prefix", prefix, "--nodes", "3", "--interval", f"{INTERVAL_S:g}"
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        yield lab
    finally:
        down = _lab("down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
        assert not P.lab_dir(prefix).exists()


def _indirect(path: dict[str, Any]) -> str | None:
    found = path.get("indirect")
    return None if found is None else str(found["conclusion"])


def test_a_broken_path_is_told_from_a_down_node(lab: Lab) -> None:
    for observer in ("node1", "node2"):
        lab.wait_path(observer, "node3", lambda p: p["status"] == "ok", "OK")
    node3 = lab.plan.node("node3")
    # node1 drops what comes from node3 (its NodeIP, and its HealthIP on the way back
    # from node1's probes): inbound only, so node1's probes time out (no EPERM).
    drop = f"ip saddr {{ {node3.node_ip}, {node3.health_ip} }} drop"
    lab.nft(
        "node1",
        "-f",
        "-",
        script=(
            "table inet pe_indirect_test {\n"
            f"  chain drop_in {{ type filter hook input priority filter; {drop}; }}\n"
            f"  chain drop_fwd {{ type filter hook forward priority filter; {drop}; }}\n"
            "}\n"
        ),
    )
    try:
        seen = lab.wait_path(
            "node1", "node3", lambda p: _indirect(p) == "path-broken", "with a broken path"
        )
        assert seen["status"] == "timeout"
        assert seen["indirect"]["reachable_via"] == ["lab1/node2"]
        assert seen["indirect"]["detail"] == "reachable via lab1/node2: path from this node broken"
        # node2 reaches node3 all along, without asking anyone.
        at_node2 = lab.wait_path("node2", "node3", lambda p: p["status"] == "ok", "OK")
        assert "indirect" not in at_node2
        # What users read, from inside node1's namespace.
        text = _lab("exec", "--prefix", lab.prefix, "node1", "--", "meshhealth", "status")
        assert text.returncode in (0, 1), text.stderr
        # (with "(suspect for 3s)" after the failure while the path is suspect)
        line = r"Connection timed out( \(suspect for [^)]+\))?; reachable via lab1/node2: path from"
        assert re.search(line + " this node broken", text.stdout), text.stdout
        # Counted on both sides: node1 asked and concluded, node2 served.
        checks = 'meshhealth_indirect_checks_total{conclusion="path-broken"}'
        assert lab.metric("node1", checks) >= 1
        assert lab.metric("node1", 'meshhealth_indirect_requests_total{outcome="answered"}') >= 1
        assert lab.metric("node2", "meshhealth_indirect_served_total") >= 1
    finally:
        lab.nft("node1", "delete", "table", "inet", "pe_indirect_test")
    # The path is OK again: its finding goes with the failure.
    lab.wait_path(
        "node1", "node3", lambda p: p["status"] == "ok" and "indirect" not in p, "OK again"
    )

    partition = _lab("fault", "--prefix", lab.prefix, "partition", "node3")
    assert partition.returncode == 0, partition.stderr
    try:
        seen = lab.wait_path(
            "node1", "node3", lambda p: _indirect(p) == "target-down", "down for everyone"
        )
        assert seen["indirect"]["failed_via"] == ["lab1/node2"]
        assert seen["indirect"]["detail"] == (
            "unreachable from lab1/node2 too: fault at the target's end, not this node's path"
        )
    finally:
        cleared = _lab("fault", "--prefix", lab.prefix, "clear")
        assert cleared.returncode == 0, cleared.stderr
