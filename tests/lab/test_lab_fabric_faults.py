"""The faults between nodes (`egress-drop`, `ingress-drop`, `path-drop`, `partition`,
`mtu`) on a real lab without agents: real pings (fping) and real HTTP to stand-in
responders on port 4240, before, during and after each fault (root; CI runs these).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from meshhealth.lab import plan as P
from tests.lab.test_lab import CLI, Lab, lab, leftovers, new_prefix, wait_until
from tests.plugins.netns import NetnsFactory, require_root

pytestmark = pytest.mark.netns

ETCD_IP = "10.77.255.1"


@pytest.fixture(scope="module")
def lab4() -> Iterator[Lab]:
    """4 nodes, no agents; a responder on every NodeIP (started per test)."""
    require_root()
    prefix = new_prefix()
    try:
        done = lab("up", "--nodes", "4", "--no-agents", "--prefix", prefix)
        assert done.returncode == 0, done.stdout + done.stderr
        yield Lab(prefix, 4)
    finally:
        down = lab("down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
    assert leftovers(prefix, []) == []


@pytest.fixture
def responders(lab4: Lab, netns_factory: NetnsFactory) -> Lab:
    for node in lab4.plan.nodes:
        netns_factory.spawn(
            node.netns, *CLI, "responder", "--listen", f"{node.node_ip}:4240", "--passive",
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    for node in lab4.plan.nodes:
        assert wait_until(
            lambda n=node: lab4.http_ok("node1" if n.index != 1 else "node2", n.node_ip)
        )
    return lab4


def ip(lab4: Lab, node: str) -> str:
    return lab4.plan.node(node).node_ip


def reach(lab4: Lab, src: str, dst: str) -> tuple[bool, bool]:
    """(ICMP, HTTP) from src to dst's NodeIP."""
    return lab4.pings(src, ip(lab4, dst)), lab4.http_ok(src, ip(lab4, dst))


def fault(lab4: Lab, *args: str) -> str:
    done = lab4.cli("fault", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def recorded(lab4: Lab) -> list[tuple[str, str]]:
    data = json.loads((P.lab_dir(lab4.prefix) / "state.json").read_text())
    return [(f["kind"], f["target"]) for f in data["faults"]]


def all_clear(lab4: Lab) -> None:
    assert fault(lab4, "clear")
    assert recorded(lab4) == []
    tables = lab4.run("node1", "true")  # the lab still answers
    assert tables.returncode == 0
    for src in ("node1", "node2", "node3", "node4"):
        for dst in ("node1", "node2", "node3", "node4"):
            if src != dst:
                assert reach(lab4, src, dst) == (True, True), (src, dst)


def test_egress_drop_fails_only_the_row(responders: Lab) -> None:
    lab4 = responders
    out = fault(lab4, "egress-drop", "node2")
    assert "fault egress-drop on lab1/node2" in out
    try:
        assert recorded(lab4) == [("egress-drop", "lab1/node2")]
        assert reach(lab4, "node2", "node1") == (False, False)
        assert reach(lab4, "node2", "node4") == (False, False)
        assert reach(lab4, "node1", "node2") == (True, True)  # its answers pass
        assert reach(lab4, "node3", "node1") == (True, True)
        assert lab4.pings("node2", ETCD_IP)  # not a probe: etcd stays reachable
    finally:
        all_clear(lab4)


def test_ingress_drop_fails_only_the_column(responders: Lab) -> None:
    lab4 = responders
    fault(lab4, "ingress-drop", "node2")
    try:
        assert reach(lab4, "node1", "node2") == (False, False)
        assert reach(lab4, "node4", "node2") == (False, False)
        assert reach(lab4, "node2", "node1") == (True, True)  # answers to it pass
        assert reach(lab4, "node3", "node4") == (True, True)
        assert lab4.pings("node2", ETCD_IP)
    finally:
        all_clear(lab4)


def test_path_drop_is_one_direction(responders: Lab) -> None:
    lab4 = responders
    fault(lab4, "path-drop", "node1", "node3")
    try:
        assert recorded(lab4) == [("path-drop", "lab1/node1 lab1/node3")]
        assert reach(lab4, "node1", "node3") == (False, False)
        assert reach(lab4, "node3", "node1") == (True, True)
        assert reach(lab4, "node1", "node2") == (True, True)
        assert reach(lab4, "node2", "node3") == (True, True)
        # Clearing a node the fault does not involve leaves it; naming either end clears it.
        assert "no faults to clear" in fault(lab4, "clear", "node2")
        assert reach(lab4, "node1", "node3") == (False, False)
        assert "cleared path-drop on lab1/node1 lab1/node3" in fault(lab4, "clear", "node3")
        assert recorded(lab4) == []
        assert reach(lab4, "node1", "node3") == (True, True)
    finally:
        all_clear(lab4)


def test_partition_splits_the_groups(responders: Lab) -> None:
    lab4 = responders
    fault(lab4, "partition", "node1,node2")  # node3, node4: the rest
    try:
        for a, b in (("node1", "node3"), ("node3", "node1"), ("node2", "node4")):
            assert reach(lab4, a, b) == (False, False), (a, b)
        assert reach(lab4, "node1", "node2") == (True, True)
        assert reach(lab4, "node4", "node3") == (True, True)
        assert lab4.pings("node1", ETCD_IP) and lab4.pings("node3", ETCD_IP)
    finally:
        all_clear(lab4)
    fault(lab4, "partition", "node1", "node2", "node3,node4")  # three groups
    try:
        assert reach(lab4, "node1", "node2") == (False, False)
        assert reach(lab4, "node2", "node3") == (False, False)
        assert reach(lab4, "node3", "node4") == (True, True)
    finally:
        all_clear(lab4)


def test_partition_refuses_what_is_not_one(lab4: Lab) -> None:
    whole = lab4.cli("fault", "partition", "node1,node2,node3,node4")
    assert whole.returncode == 1 and "at least two groups" in whole.stderr
    twice = lab4.cli("fault", "partition", "node1,node2", "node2")
    assert twice.returncode == 1 and "more than one group" in twice.stderr
    assert recorded(lab4) == []


def big_ping(lab4: Lab, src: str, dst: str, size: int) -> bool:
    """One don't-fragment ICMP echo of `size` bytes of payload."""
    done = lab4.run(
        src, "fping", "-q", "-M", "-b", str(size), "-t", "300", "-r", "1", ip(lab4, dst)
    )
    return done.returncode == 0


def test_mtu_black_hole(lab4: Lab) -> None:
    assert big_ping(lab4, "node1", "node2", 1400)
    fault(lab4, "mtu", "node2", "1000")
    try:
        assert recorded(lab4) == [("mtu", "lab1/node2 1000")]
        assert not big_ping(lab4, "node1", "node2", 1400)
        assert not big_ping(lab4, "node2", "node3", 1400)
        assert big_ping(lab4, "node1", "node2", 900)  # 928 bytes of IP: passes
        assert big_ping(lab4, "node1", "node3", 1400)  # other nodes are not affected
    finally:
        assert fault(lab4, "clear", "node2")
    assert big_ping(lab4, "node1", "node2", 1400)
    bad = lab4.cli("fault", "mtu", "node2", "20")
    assert bad.returncode == 1 and "SIZE must be" in bad.stderr


def test_down_removes_fabric_faults_after_a_crash(lab4: Lab) -> None:
    """A fault table nobody recorded (a crash between the nft call and the state file)
    is found by `fault clear`; `lab down` removes the fabric with everything in it."""
    fault(lab4, "path-drop", "node1", "node2")
    state = P.lab_dir(lab4.prefix) / "state.json"
    data = json.loads(state.read_text())
    data["faults"] = []
    state.write_text(json.dumps(data))
    assert not lab4.pings("node1", ip(lab4, "node2"))
    out = fault(lab4, "clear")
    assert "cleared fabric table meshhealth_lab_path_drop_" in out
    assert lab4.pings("node1", ip(lab4, "node2"))
