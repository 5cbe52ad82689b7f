"""The troubleshooting stories, end to end: a lab with real agents, each fault, and what
the other nodes' `meshhealth status` shows (root; CI runs these).

The lab (3 nodes, interval 1 s) is shared by the tests of this module and removed with
`lab down` in the fixture's finally. Expectations are read from each agent's status
document (GET /v1/status on its admin socket), the same data `meshhealth status` prints.
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

from meshhealth import defaults
from meshhealth.lab import netns_ops
from meshhealth.lab import plan as P
from meshhealth.lab.build import endpoint_names_taken
from meshhealth.lab.control import fetch_status
from tests.docs_shape import find_example, not_printed, undocumented
from tests.plugins.netns import require_root
from tests.repo_paths import REPO_ROOT

pytestmark = [pytest.mark.netns, pytest.mark.slow]

CLI = [sys.executable, "-m", "meshhealth"]
LAB_MD = (REPO_ROOT / "docs" / "lab.md").read_text()
INTERVAL_S = 1.5
# A fault shows within one interval + one probe timeout; generous for a loaded CI box.
SHOW_S = 20.0


def lab(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


Paths = dict[str, str]  # "host icmp" -> "ok" / "timeout" / ...


def paths_seen(doc: dict[str, Any], target: str) -> Paths | None:
    """How the document's node sees `target` (`lab1/node2`); None when not listed."""
    cluster, name = target.split("/")
    for node in doc["nodes"]:
        if node["cluster"] == cluster and node["name"] == name:
            out: Paths = {}
            for kind, key in (("host", "host"), ("endpoint", "health_endpoint")):
                addr = node.get(key)
                for proto in ("icmp", "http"):
                    status = addr["primary_address"][proto]["status"] if addr else "absent"
                    out[f"{kind} {proto}"] = status
            return out
    return None


class StoryLab:
    def __init__(self, prefix: str, nodes: int, clusters: int, racks: int = 1) -> None:
        self.prefix = prefix
        self.plan = P.make_plan(prefix, nodes, clusters, racks=racks)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return lab(*args[:1], "--prefix", self.prefix, *args[1:])

    def doc(self, observer: str) -> dict[str, Any] | None:
        try:
            return fetch_status(self.plan.node(observer).socket)
        except (OSError, ValueError):
            return None

    def wait_view(
        self,
        observer: str,
        target: str,
        want: Callable[[Paths | None], bool],
        what: str,
        timeout_s: float = SHOW_S,
    ) -> Paths | None:
        """Poll `observer`'s status until its view of `target` satisfies `want`."""
        deadline = time.monotonic() + timeout_s
        seen: Paths | None = None
        while time.monotonic() < deadline:
            doc = self.doc(observer)
            if doc is not None:
                seen = paths_seen(doc, target)
                if want(seen):
                    return seen
            time.sleep(0.2)
        pytest.fail(f"{observer} never saw {target} {what} within {timeout_s:g}s; last: {seen}")

    def wait_paths(
        self, observer: str, target: str, expected: Paths, timeout_s: float = SHOW_S
    ) -> None:
        def matches(seen: Paths | None) -> bool:
            return seen is not None and all(seen.get(k) == v for k, v in expected.items())

        self.wait_view(observer, target, matches, f"as {expected}", timeout_s)

    def wait_healthy(self, observer: str, target: str, timeout_s: float = SHOW_S) -> None:
        self.wait_paths(observer, target, ALL_OK, timeout_s)

    def wait_summary(self, observer: str, *, reachable: int, total: int) -> None:
        deadline = time.monotonic() + SHOW_S
        summary = None
        while time.monotonic() < deadline:
            doc = self.doc(observer)
            summary = doc["summary"] if doc else None
            if summary and (summary["reachable"], summary["total"]) == (reachable, total):
                return
            time.sleep(0.2)
        pytest.fail(f"{observer} never saw {reachable}/{total} reachable; last: {summary}")


ALL_OK: Paths = {"host icmp": "ok", "host http": "ok", "endpoint icmp": "ok", "endpoint http": "ok"}


def _make(prefix: str, nodes: int, clusters: int) -> StoryLab:
    require_root()
    taken = endpoint_names_taken(P.make_plan(prefix, nodes, clusters))
    if taken:
        pytest.skip(f"another lab with agents is up ({taken[0]} exists); `lab down` it first")
    done = lab(
        "up", "--prefix", prefix, "--nodes", str(nodes), "--clusters", str(clusters),
        "--interval", f"{INTERVAL_S:g}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return StoryLab(prefix, nodes, clusters)


def _down_and_check(story: StoryLab, endpoint_netns: set[str]) -> None:
    prefix = story.prefix
    done = lab("down", "--prefix", prefix)
    assert done.returncode == 0, done.stderr
    # what it removed: the nodes', the fabric's and the health endpoints' namespaces
    removed = len(story.plan.netns_names) + len(endpoint_netns)
    assert f" {removed} namespace(s) deleted, " in done.stdout, done.stdout
    left = [n for n in netns_ops.list_netns() if n.startswith(f"{prefix}-") or n in endpoint_netns]
    assert left == []
    assert not P.lab_dir(prefix).exists()
    assert not P.etcd_data_dir(prefix).exists()  # etcd's data (tmpfs) goes with the lab


def _endpoint_netns(story: StoryLab) -> set[str]:
    found: set[str] = set()
    for node in story.plan.nodes:
        found |= netns_ops.peer_netns(node.netns) - {story.plan.fabric_netns}
    return found


@pytest.fixture(scope="module")
def story() -> Iterator[StoryLab]:
    prefix = f"mhs{os.getpid() % 100000}"
    s = _make(prefix, 3, 1)  # a failed `lab up` removes its half-built lab itself
    endpoints: set[str] = set()
    try:
        endpoints = _endpoint_netns(s)
        yield s
    finally:
        _down_and_check(s, endpoints)


def test_healthy_lab_is_all_ok(story: StoryLab) -> None:
    for observer in ("node1", "node2", "node3"):
        for target in ("lab1/node1", "lab1/node2", "lab1/node3"):
            story.wait_healthy(observer, target)
    story.wait_summary("node1", reachable=3, total=3)
    # Every node has its health endpoint in a namespace of its own.
    assert len(_endpoint_netns(story)) == 3
    status = story.cli("exec", "node1", "--", "meshhealth", "status")
    assert status.returncode == 0, status.stderr
    assert "Cluster health:" in status.stdout and "3/3 reachable" in status.stdout
    assert "lab1/node1" in story.cli("status").stdout
    # docs/lab.md's quick start shows what `status` prints, line for line in shape.
    example = find_example(LAB_MD, "meshhealth lab exec lab1/node1 -- meshhealth status")
    assert not_printed(example, status.stdout) == set(), status.stdout
    assert undocumented(example, status.stdout) == set(), status.stdout


def _fault(story: StoryLab, *args: str) -> None:
    done = story.cli("fault", *args)
    assert done.returncode == 0, done.stderr


def test_endpoint_forward_drop_story(story: StoryLab) -> None:
    """The blog's story: host fine, endpoint times out."""
    _fault(story, "endpoint-forward-drop", "node2")
    try:
        expected = {"host icmp": "ok", "host http": "ok"}
        expected |= {"endpoint icmp": "timeout", "endpoint http": "timeout"}
        story.wait_paths("node1", "lab1/node2", expected)
        story.wait_paths("node3", "lab1/node2", expected)
        story.wait_healthy("node1", "lab1/node3")
        _documented_story_shape(story, "endpoint-forward-drop node2")
    finally:
        _fault(story, "clear")
    story.wait_healthy("node1", "lab1/node2")


def _status_with_finding(story: StoryLab, observer: str) -> str:
    """`meshhealth status` on `observer` once it shows a finding (polled, with a deadline)."""
    deadline = time.monotonic() + SHOW_S
    out = ""
    while time.monotonic() < deadline:
        done = story.cli("exec", observer, "--", "meshhealth", "status")
        out = done.stdout
        if "\nFinding:" in out:
            return out
        time.sleep(0.5)
    pytest.fail(f"{observer}'s status never showed a finding; last:\n{out}")


def _documented_story_shape(story: StoryLab, fault: str) -> None:
    """The status commands docs/lab.md shows after `lab fault FAULT` print the shape
    it shows (a `| grep -E RE` in the doc filters our output the same way)."""
    fault_cmd = f"meshhealth lab fault {fault}"
    checked = 0
    for observer in ("node1", "node2", "node3"):
        command = f"meshhealth lab exec {observer} -- meshhealth status"
        try:
            example = find_example(LAB_MD, command, after=fault_cmd)
        except LookupError:
            grep = re.search(rf"^# {re.escape(command)} \| grep -E '([^']*)'$", LAB_MD, re.M)
            if grep is None:
                continue
            example = find_example(LAB_MD, grep.group(0)[2:], after=fault_cmd)
            pattern = re.compile(grep.group(1))
            out = "\n".join(
                line for line in _status_with_finding(story, observer).splitlines()
                if pattern.search(line)
            )  # fmt: skip
        else:
            out = _status_with_finding(story, observer)
        assert not_printed(example, out) == set(), (observer, out)
        assert undocumented(example, out) == set(), (observer, out)
        checked += 1
    assert checked, f"docs/lab.md shows no status after `{fault_cmd}`"


def test_icmp_drop_story(story: StoryLab) -> None:
    _fault(story, "icmp-drop", "node2")
    try:
        expected = {"host icmp": "timeout", "host http": "ok"}
        expected |= {"endpoint icmp": "timeout", "endpoint http": "ok"}
        story.wait_paths("node1", "lab1/node2", expected)
    finally:
        _fault(story, "clear", "node2")
    story.wait_healthy("node1", "lab1/node2")


def test_partition_story(story: StoryLab) -> None:
    _fault(story, "partition", "node3")
    try:
        down = dict.fromkeys(ALL_OK, "timeout")
        story.wait_paths("node1", "lab1/node3", down)
        story.wait_paths("node3", "lab1/node1", down)  # the cut-off node sees it too
        story.wait_healthy("node1", "lab1/node2")
    finally:
        _fault(story, "clear")
    story.wait_healthy("node1", "lab1/node3")
    story.wait_healthy("node3", "lab1/node1")


def test_kill_agent_story(story: StoryLab) -> None:
    _fault(story, "kill-agent", "node3")
    try:
        # The kernel still answers ICMP; nobody answers HTTP on the NodeIP any more. After
        # the lease TTL the node stays in view as agent-down (--agent-down-retention).
        def agent_gone(seen: Paths | None) -> bool:
            if seen is None:
                return False
            return seen["host icmp"] == "ok" and seen["host http"] in ("refused", "timeout")

        story.wait_view("node1", "lab1/node3", agent_gone, "with its agent gone")
        assert "kill-agent on lab1/node3" in story.cli("status").stdout
    finally:
        _fault(story, "clear", "node3")
    # The new agent waits for its predecessor's entry to expire (lease TTL) first.
    back_s = defaults.LEASE_TTL_S + SHOW_S
    story.wait_healthy("node1", "lab1/node3", back_s)
    story.wait_healthy("node3", "lab1/node1", back_s)


def test_stop_etcd_story(story: StoryLab) -> None:
    _fault(story, "stop-etcd")
    try:
        deadline = time.monotonic() + SHOW_S
        while time.monotonic() < deadline:
            doc = story.doc("node1")
            if doc is not None and not doc["etcd"]["up"]:
                break
            time.sleep(0.2)
        else:
            pytest.fail("node1 never reported etcd down")
        # Probing goes on without etcd.
        story.wait_healthy("node1", "lab1/node2")
    finally:
        _fault(story, "start-etcd")
    deadline = time.monotonic() + SHOW_S
    while time.monotonic() < deadline:
        doc = story.doc("node1")
        if doc is not None and doc["etcd"]["up"]:
            break
        time.sleep(0.2)
    else:
        pytest.fail("node1 never reported etcd up again")
    story.wait_healthy("node2", "lab1/node1")


def test_endpoint_recreated_after_its_namespace_is_deleted(story: StoryLab) -> None:
    node2 = story.plan.node("node2")
    story.wait_healthy("node1", "lab1/node2")
    (endpoint,) = netns_ops.peer_netns(node2.netns) - {story.plan.fabric_netns}
    netns_ops.del_netns(endpoint)
    deadline = time.monotonic() + SHOW_S
    while time.monotonic() < deadline and not netns_ops.netns_exists(endpoint):
        time.sleep(0.1)
    assert netns_ops.netns_exists(endpoint), f"{endpoint} was not re-created"
    story.wait_healthy("node1", "lab1/node2")
