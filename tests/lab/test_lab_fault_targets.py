"""Fault arguments and the fabric's nft scripts (pure): what each fault drops."""

from __future__ import annotations

import pytest

from meshhealth.lab import fabric_faults as F
from meshhealth.lab import fault_targets as T
from meshhealth.lab import faults
from meshhealth.lab import plan as P
from meshhealth.lab.starve import check_burst
from tests.repo_paths import REPO_ROOT

PLAN = P.make_plan("mh", 4, 2)


@pytest.mark.parametrize(
    ("kind", "args", "target"),
    [
        ("egress-drop", ["node2"], "lab1/node2"),
        ("ingress-drop", ["lab2/node1"], "lab2/node1"),
        ("starve", ["node3"], "lab1/node3"),
        ("path-drop", ["node1", "lab2/node3"], "lab1/node1 lab2/node3"),
        ("mtu", ["node2", "1400"], "lab1/node2 1400"),
        ("partition", ["node3"], "lab1/node3"),
        ("partition", ["node1,node2", "lab2/node1"], "lab1/node1,lab1/node2 lab2/node1"),
        ("stop-etcd", [], "lab1"),
        ("stop-etcd", ["lab2/node2"], "lab2"),
    ],
)
def test_parse_target(kind: str, args: list[str], target: str) -> None:
    got = T.parse_target(PLAN, kind, args)
    assert got.target == target
    assert T.recorded_target(PLAN, kind, target) == got


@pytest.mark.parametrize(
    ("kind", "args", "error"),
    [
        ("egress-drop", [], "needs one NODE"),
        ("egress-drop", ["node1", "node2"], "needs one NODE"),
        ("path-drop", ["node1"], "needs SRC and DST"),
        ("path-drop", ["node1", "lab1/node1"], "same node"),
        ("mtu", ["node1"], "needs NODE and SIZE"),
        ("mtu", ["node1", "big"], "needs NODE and SIZE"),
        ("mtu", ["node1", "67"], "SIZE must be 68..65535"),
        ("partition", [], "at least one GROUP"),
        ("partition", ["node1", "node1"], "more than one group"),
        ("partition", [",".join(n.qualified for n in PLAN.nodes)], "at least two groups"),
        ("starve", ["node9"], "no node 'node9'"),
    ],
)
def test_parse_target_refuses(kind: str, args: list[str], error: str) -> None:
    with pytest.raises(P.PlanError, match=error):
        T.parse_target(PLAN, kind, args)


def test_nodes_of() -> None:
    assert T.nodes_of("lab1/node1,lab1/node2 lab2/node1") == {
        "lab1/node1", "lab1/node2", "lab2/node1",
    }  # fmt: skip
    assert T.nodes_of("lab1/node2 1400") == {"lab1/node2"}
    assert T.nodes_of("lab1") == set()


def script(kind: str, args: list[str]) -> str:
    goal = T.parse_target(PLAN, kind, args)
    return F.fabric_script(kind, goal.target, PLAN, goal.groups, goal.size)


def test_egress_drop_drops_only_the_nodes_probes_to_peers() -> None:
    text = script("egress-drop", ["node2"])
    assert text.startswith("table bridge meshhealth_lab_egress_drop_")
    assert "hook forward" in text and "policy accept;" in text
    src = "ip saddr { 10.77.0.2, 10.78.2.2 }"
    assert f"{src} ip daddr {{ 10.77.0.1, 10.78.1.2, 10.77.0.3," in text
    assert "icmp type echo-request drop" in text and "tcp dport 4240 drop" in text
    assert "echo-reply" not in text and "sport" not in text  # its answers pass
    assert "10.77.255." not in text  # etcd is not a peer


def test_ingress_drop_is_the_mirror() -> None:
    text = script("ingress-drop", ["node2"])
    assert "ip daddr { 10.77.0.2, 10.78.2.2 } icmp type echo-request drop" in text
    assert "ip daddr { 10.77.0.2, 10.78.2.2 } tcp dport 4240 drop" in text


def test_path_drop_names_both_ends() -> None:
    text = script("path-drop", ["node1", "node3"])
    rule = "ip saddr { 10.77.0.1, 10.78.1.2 } ip daddr { 10.77.0.3, 10.78.3.2 }"
    assert f"{rule} icmp type echo-request drop" in text
    assert f"{rule} tcp dport 4240 drop" in text
    assert text.count(" drop\n") == 2


def test_partition_drops_everything_between_groups_and_the_rest() -> None:
    text = script("partition", ["node1,node2", "lab2/node1"])
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().endswith(" drop")]
    assert len(lines) == 3  # two groups listed, the rest is the third
    assert lines[0].startswith("ip saddr { 10.77.0.1, 10.78.1.2, 10.77.0.2, 10.78.2.2 }")
    assert "10.77.1.2" in lines[2]  # lab2/node2 is in the rest
    assert all("icmp" not in ln and "tcp" not in ln for ln in lines)


def test_mtu_drops_long_packets_both_ways() -> None:
    text = script("mtu", ["node2", "1400"])
    assert text.count("ip length > 1400 drop") == 2
    assert "ip saddr { 10.77.0.2, 10.78.2.2 }" in text
    assert "ip daddr { 10.77.0.2, 10.78.2.2 }" in text
    with pytest.raises(ValueError, match="mtu SIZE"):
        F.fabric_script("mtu", "x", PLAN, [[PLAN.nodes[0]]], None)


def test_table_names_are_stable_and_distinct() -> None:
    a = F.table_name("path-drop", "lab1/node1 lab1/node2")
    assert a == F.table_name("path-drop", "lab1/node1 lab1/node2")
    assert a != F.table_name("path-drop", "lab1/node2 lab1/node1")
    assert len(a) < 64 and a.replace("_", "").isalnum()


def test_every_kind_has_a_help_line_and_a_doc_row() -> None:
    from meshhealth.cli.lab_cmd import FAULT_HELP

    doc = (REPO_ROOT / "docs" / "lab.md").read_text()
    for kind in faults.FAULT_KINDS:
        assert f"  {kind} " in FAULT_HELP, kind
        assert f"| `{kind}" in doc, kind


@pytest.mark.parametrize(("stop_s", "period_s"), [(0.0, 4.0), (4.0, 4.0), (5.0, 4.0)])
def test_starve_burst_must_leave_the_agent_some_time(stop_s: float, period_s: float) -> None:
    with pytest.raises(ValueError, match="need 0 < stop"):
        check_burst(stop_s, period_s)
    check_burst(3.0, 4.0)


@pytest.mark.parametrize("ip_mode", ["dual", "ipv6"])
def test_fabric_rules_cover_every_family_of_the_lab(ip_mode: str) -> None:
    plan = P.make_plan("mh", 3, ip_mode=ip_mode)
    node2 = plan.node("node2")
    goal = T.parse_target(plan, "egress-drop", ["node2"])
    text = F.fabric_script("egress-drop", goal.target, plan, goal.groups)
    v6 = [a for a in (node2.node_ip, node2.node_ip_secondary) if a and ":" in a]
    assert v6 and f"ip6 saddr {{ {v6[0]}" in text
    assert "icmpv6 type echo-request drop" in text
    assert ("icmp type echo-request drop" in text) == (ip_mode == "dual")
    goal = T.parse_target(plan, "mtu", ["node2", "1400"])
    mtu = F.fabric_script("mtu", goal.target, plan, goal.groups, goal.size)
    assert "ip6 length > 1360 drop" in mtu  # IPv6's length leaves out its 40-byte header
    assert ("ip length > 1400 drop" in mtu) == (ip_mode == "dual")


def test_link_drop_takes_one_rack_of_a_lab_with_racks() -> None:
    from meshhealth.lab.fault_targets import parse_target

    plan = P.make_plan("mh", 4, racks=2)
    assert parse_target(plan, "link-drop", ["rack2"]).target == "rack2"
    with pytest.raises(P.PlanError, match="needs one RACK"):
        parse_target(plan, "link-drop", [])
    with pytest.raises(P.PlanError, match="no rack 'rack3'"):
        parse_target(plan, "link-drop", ["rack3"])
    with pytest.raises(P.PlanError, match="racks: none"):
        parse_target(P.make_plan("mh", 4), "link-drop", ["rack1"])
