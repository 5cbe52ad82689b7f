"""The lab's pure parts: address plan, agent/etcd argv, state file, nft scripts, status line."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from meshhealth import defaults
from meshhealth.lab import faults, ram_disk
from meshhealth.lab import plan as P
from meshhealth.lab import state as S
from meshhealth.lab.build import namespaces_removed
from meshhealth.lab.control import exec_env, health_line, resolve_target

IFNAMSIZ = 15


@pytest.mark.parametrize(
    ("cluster", "node", "node_ip", "cidr", "health_ip"),
    [
        (1, 1, "10.77.0.1", "10.78.1.0/24", "10.78.1.2"),
        (1, 4, "10.77.0.4", "10.78.4.0/24", "10.78.4.2"),
        (1, 250, "10.77.0.250", "10.78.250.0/24", "10.78.250.2"),
        (2, 1, "10.77.1.1", "10.79.1.0/24", "10.79.1.2"),
        (16, 200, "10.77.15.200", "10.93.200.0/24", "10.93.200.2"),
    ],
)
def test_addresses(cluster: int, node: int, node_ip: str, cidr: str, health_ip: str) -> None:
    assert P.node_ip(cluster, node) == node_ip
    assert P.node_cidr(cluster, node) == cidr
    assert P.health_ip(cluster, node) == health_ip
    assert ipaddress.ip_address(health_ip) in ipaddress.ip_network(cidr)


def test_plan_default_names_and_paths() -> None:
    plan = P.make_plan()
    assert plan.fabric_netns == "mh-fabric"
    assert [n.netns for n in plan.nodes] == [f"mh-lab1-node{i}" for i in range(1, 5)]
    assert [n.qualified for n in plan.nodes] == [f"lab1/node{i}" for i in range(1, 5)]
    assert plan.dir == Path("/run/meshhealth/lab/mh")
    assert plan.state_file == Path("/run/meshhealth/lab/mh/state.json")
    (cluster,) = plan.clusters
    assert cluster.name == "lab1"
    assert cluster.etcd_url == "http://10.77.255.1:2379"
    assert plan.nodes[0].socket == Path("/run/meshhealth/lab/mh/lab1/node1.sock")
    assert plan.nodes[0].metrics_listen == "10.77.0.1:9962"
    assert plan.netns_names[0] == "mh-fabric"


@pytest.mark.parametrize(("nodes", "clusters"), [(1, 1), (200, 1), (250, 2), (250, 16)])
def test_plan_is_unique_and_fits(nodes: int, clusters: int) -> None:
    plan = P.make_plan("mhx", nodes, clusters)
    assert len(plan.nodes) == nodes * clusters
    fabric = ipaddress.ip_network(P.FABRIC_SUBNET)
    ips = [n.node_ip for n in plan.nodes] + [c.etcd_ip for c in plan.clusters]
    assert len(set(ips)) == len(ips)
    assert all(ipaddress.ip_address(ip) in fabric for ip in ips)
    cidrs = [ipaddress.ip_network(n.cidr) for n in plan.nodes]
    assert len(set(cidrs)) == len(cidrs)
    assert not any(c.overlaps(fabric) for c in cidrs)
    for names in (
        [n.netns for n in plan.nodes],
        [n.veth_fabric for n in plan.nodes],
        [str(n.socket) for n in plan.nodes],
    ):
        assert len(set(names)) == len(names)
    assert all(len(n.veth_fabric) <= IFNAMSIZ for n in plan.nodes)
    assert len(P.BRIDGE) <= IFNAMSIZ and len(P.NODE_IFACE) <= IFNAMSIZ
    # Unix socket paths are limited to 108 bytes.
    assert all(len(str(n.socket)) < 108 for n in plan.nodes)
    pattern = P.netns_pattern("mhx")
    assert all(pattern.match(n) for n in plan.netns_names)


@pytest.mark.parametrize(
    ("prefix", "nodes", "clusters", "message"),
    [
        ("MH", 4, 1, "bad lab prefix"),
        ("mh-x", 4, 1, "bad lab prefix"),
        ("1mh", 4, 1, "bad lab prefix"),
        ("mh" * 7, 4, 1, "bad lab prefix"),
        ("mh", 0, 1, "--nodes must be 1..250"),
        ("mh", 251, 1, "--nodes must be 1..250"),
        ("mh", 4, 0, "--clusters must be 1..16"),
        ("mh", 4, 17, "--clusters must be 1..16"),
    ],
)
def test_plan_rejects(prefix: str, nodes: int, clusters: int, message: str) -> None:
    with pytest.raises(P.PlanError, match=message):
        P.make_plan(prefix, nodes, clusters)


@pytest.mark.parametrize(
    ("name", "matches"),
    [
        ("mh-fabric", True),
        ("mh-lab1-node1", True),
        ("mh-lab12-node200", True),
        ("mh2-fabric", False),
        ("mh-health-node1", False),
        ("mhx-lab1-node1", False),
        ("mh-lab1-node1x", False),
        ("mh-lab1-node1-ep", True),
        ("mh2-lab1-node1-ep", False),
        ("mh-router", True),
        ("mh2-router", False),
    ],
)
def test_netns_pattern_is_this_prefix_only(name: str, matches: bool) -> None:
    assert bool(P.netns_pattern("mh").match(name)) is matches


@pytest.mark.parametrize(
    ("spec", "qualified"),
    [("node2", "lab1/node2"), ("lab1/node3", "lab1/node3"), ("lab2/node1", "lab2/node1")],
)
def test_node_lookup(spec: str, qualified: str) -> None:
    assert P.make_plan("mh", 3, 2).node(spec).qualified == qualified


@pytest.mark.parametrize("spec", ["node4", "lab3/node1", "lab1/", "x"])
def test_node_lookup_unknown(spec: str) -> None:
    with pytest.raises(P.PlanError, match="no node"):
        P.make_plan("mh", 3, 2).node(spec)


def test_agent_argv_one_cluster() -> None:
    plan = P.make_plan("mh", 4, 1)
    argv = P.agent_argv(plan, plan.nodes[0], "/venv/bin/python", 2.0)
    assert argv == [
        *("/venv/bin/python", "-m", "meshhealth", "agent"),
        *("--etcd", "http://10.77.255.1:2379", "--cluster", "lab1", "--node", "node1"),
        *("--node-ip", "10.77.0.1", "--health-ip", "10.78.1.2", "--cidr", "10.78.1.0/24"),
        *("--socket", "/run/meshhealth/lab/mh/lab1/node1.sock", "--health-mode", "netns"),
        *("--health-netns", "mh-lab1-node1-ep"),
        *("--route-cidrs", "--metrics-listen", "10.77.0.1:9962"),
        *("--web-listen", "10.77.0.1:9963", "--interval", "2"),
    ]


def test_agent_argv_meshes_the_other_clusters() -> None:
    plan = P.make_plan("mh", 2, 3)
    argv = P.agent_argv(plan, plan.node("lab2/node2"), "py", None)
    assert "--interval" not in argv
    assert argv[argv.index("--etcd") + 1] == "http://10.77.255.2:2379"
    assert argv[argv.index("--node-ip") + 1] == "10.77.1.2"
    mesh = [argv[i + 1] for i, a in enumerate(argv) if a == "--mesh"]
    assert mesh == ["lab1=http://10.77.255.1:2379", "lab3=http://10.77.255.3:2379"]


def test_etcd_argv_listens_on_the_fabric_only() -> None:
    cluster = P.make_plan("mh", 1, 2).cluster("lab2")
    argv = P.etcd_argv(cluster, "/usr/bin/etcd")
    assert argv[0] == "/usr/bin/etcd"
    assert argv[argv.index("--listen-client-urls") + 1] == "http://10.77.255.2:2379"
    # etcd's data in RAM (/dev/shm, a tmpfs), where the host has it
    assert argv[argv.index("--data-dir") + 1] == str(P.etcd_data_dir("mh") / "lab2/etcd.data")
    room = ram_disk.in_ram(ram_disk.free_bytes(), defaults.ETCD_RAM_MIN_FREE_BYTES)
    in_ram = room or (P.ETCD_DATA_ROOT / "mh").is_dir()
    assert P.etcd_data_dir("mh") == (
        P.ETCD_DATA_ROOT / "mh" if in_ram else P.lab_dir("mh") / "etcd"
    )
    assert not any("127.0.0.1" in a or "0.0.0.0" in a for a in argv)


def test_state_round_trip() -> None:
    st = S.LabState(
        prefix="mh", dir="/run/meshhealth/lab/mh", nodes=3, clusters=1, interval_s=2.0, agents=False
    )
    st.add_namespace("mh-fabric")
    st.add_namespace("mh-fabric")
    st.processes["etcd/lab1"] = S.ProcessRecord(12, 345, "mh-fabric", ["etcd"], "/x/etcd.log")
    st.faults.append(S.FaultRecord("icmp-drop", "lab1/node2", 1.5))
    back = S.state_from_json(st.to_json())
    assert back == st
    assert back.namespaces == ["mh-fabric"]
    assert back.fault("icmp-drop", "lab1/node2") is not None
    assert back.fault("icmp-drop", "lab1/node1") is None
    assert back.path == Path("/run/meshhealth/lab/mh/state.json")


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 99}', '{"version": 1, "bogus": 1}'])
def test_state_rejects(text: str) -> None:
    with pytest.raises(S.StateError):
        S.state_from_json(text)


@pytest.mark.parametrize(
    ("kind", "must_contain"),
    [
        (faults.ENDPOINT_FORWARD_DROP, ["hook forward", "ip daddr 10.78.2.2 drop"]),
        (faults.ICMP_DROP, ['iifname "eth0" icmp type', "hook input", "hook forward"]),
        (faults.UDP_DROP, ['iifname "eth0" udp dport 4240 drop', "hook input"]),
    ],
)
def test_nft_scripts(kind: str, must_contain: list[str]) -> None:
    script = faults.nft_script(kind, P.make_plan("mh", 3).node("node2"))
    assert script.startswith("table inet meshhealth_lab {")
    assert "policy accept;" in script
    for text in must_contain:
        assert text in script
    # Nothing dropped on output: the node's own sends must not fail with EPERM.
    assert "hook output" not in script


def test_nft_script_rejects_process_faults() -> None:
    with pytest.raises(ValueError, match="not an nftables fault"):
        faults.nft_script(faults.KILL_AGENT, P.make_plan().nodes[0])


@pytest.mark.parametrize(
    ("kind", "target", "resolved"),
    [
        ("icmp-drop", "node2", "lab1/node2"),
        ("partition", "lab2/node1", "lab2/node1"),
        ("stop-etcd", None, "lab1"),
        ("stop-etcd", "lab2", "lab2"),
        ("start-etcd", "lab2/node3", "lab2"),
    ],
)
def test_resolve_target(kind: str, target: str | None, resolved: str) -> None:
    assert resolve_target(P.make_plan("mh", 3, 2), kind, target) == resolved


def test_node_fault_needs_a_node() -> None:
    with pytest.raises(P.PlanError, match="needs one NODE"):
        resolve_target(P.make_plan(), "kill-agent", None)


def test_exec_env() -> None:
    plan = P.make_plan("mh", 2, 2)
    env = exec_env(plan, plan.node("lab2/node1"), {"PATH": "/usr/bin", "HOME": "/root"})
    assert env["MESHHEALTH_SOCKET"] == "/run/meshhealth/lab/mh/lab2/node1.sock"
    assert env["MESHHEALTH_ETCD"] == env["ETCDCTL_ENDPOINTS"] == "http://10.77.255.2:2379"
    assert env["ETCDCTL_API"] == "3"
    assert env["PATH"].endswith(":/usr/bin")
    assert env["HOME"] == "/root"


def _path(status: str) -> dict[str, object]:
    return {"status": status}


def _node(name: str, host: tuple[str, str], endpoint: tuple[str, str] | None) -> dict[str, object]:
    def addr(pair: tuple[str, str]) -> dict[str, object]:
        return {"primary_address": {"icmp": _path(pair[0]), "http": _path(pair[1])}}

    return {
        "cluster": "lab1",
        "name": name,
        "host": addr(host),
        "health_endpoint": addr(endpoint) if endpoint else None,
    }


@pytest.mark.parametrize(
    ("nodes", "summary", "etcd_up", "line"),
    [
        ([_node("node1", ("ok", "ok"), ("ok", "ok"))], (1, 1, 0), True, "1/1 reachable"),
        (
            [
                _node("node1", ("ok", "ok"), ("ok", "ok")),
                _node("node2", ("ok", "ok"), ("timeout", "timeout")),
            ],
            (1, 2, 0),
            True,
            "1/2 reachable; failing: lab1/node2 (endpoint icmp, endpoint http)",
        ),
        (
            [_node("node2", ("timeout", "ok"), ("unknown", "ok"))],
            (0, 1, 0),
            False,
            "0/1 reachable; failing: lab1/node2 (host icmp); etcd unreachable",
        ),
        (
            [_node("node1", ("unknown", "unknown"), None)],
            (0, 1, 1),
            True,
            "0/1 reachable, 1 not probed yet",
        ),
    ],
)
def test_health_line(
    nodes: list[dict[str, object]], summary: tuple[int, int, int], etcd_up: bool, line: str
) -> None:
    reachable, total, unknown = summary
    doc = {
        "summary": {"reachable": reachable, "total": total, "unknown": unknown},
        "nodes": nodes,
        "etcd": {"up": etcd_up},
    }
    assert health_line(doc) == line


def test_dual_stack_plan_adds_ipv6_secondaries() -> None:
    plan = P.make_plan("mh", nodes=2, clusters=2, ip_mode="dual")
    node = plan.node("lab2/node2")
    assert (node.node_ip, node.cidr, node.health_ip) == ("10.77.1.2", "10.79.2.0/24", "10.79.2.2")
    assert (node.node_ip_secondary, node.cidr_secondary, node.health_ip_secondary) == (
        "fd77::2:2",
        "fd78:2:2::/64",
        "fd78:2:2::2",
    )
    assert plan.cluster("lab1").etcd_url == "http://10.77.255.1:2379"  # etcd stays IPv4
    argv = P.agent_argv(plan, node, "/py")
    at = argv.index("--node-ip-secondary")
    assert argv[at : at + 6] == [
        "--node-ip-secondary",
        "fd77::2:2",
        "--health-ip-secondary",
        "fd78:2:2::2",
        "--cidr",
        "fd78:2:2::/64",
    ]


def test_ipv6_plan_has_no_ipv4_at_all() -> None:
    plan = P.make_plan("mh", nodes=3, clusters=1, ip_mode="ipv6")
    node = plan.node("node3")
    assert (node.node_ip, node.cidr, node.health_ip) == (
        "fd77::1:3",
        "fd78:1:3::/64",
        "fd78:1:3::2",
    )
    assert node.node_ip_secondary is None
    assert node.metrics_listen == "[fd77::1:3]:9962"
    assert node.web_listen.startswith("[fd77::1:3]:")
    cluster = plan.cluster("lab1")
    assert cluster.etcd_url == "http://[fd77::ff:1]:2379"
    assert cluster.etcd_prefixlen == 64
    argv = P.agent_argv(plan, node, "/py")
    assert "--node-ip-secondary" not in argv
    assert not any(arg.startswith("10.") for arg in argv)


def test_plan_addresses_are_unique_in_every_mode() -> None:
    for mode in P.IP_MODES:
        plan = P.make_plan("mh", nodes=20, clusters=3, ip_mode=mode)
        ips = [
            ip for n in plan.nodes for ip in (*n.node_ips, n.health_ip, n.health_ip_secondary) if ip
        ]
        assert len(ips) == len(set(ips)), mode


def test_plan_rejects_an_unknown_ip_mode() -> None:
    with pytest.raises(P.PlanError, match="IP mode must be one of"):
        P.make_plan("mh", ip_mode="ipx")


def test_health_line_under_subset_probing_names_direct_targets() -> None:
    doc = {
        "summary": {"reachable": 6, "total": 6, "unknown": 0},
        "nodes": [_node("node1", ("ok", "ok"), ("ok", "ok"))],
        "etcd": {"up": True},
        "probe_plan": {"subset": True, "targets": 5, "nodes": 100},
    }
    assert health_line(doc) == "6/6 direct targets reachable (probing 5 of 100 nodes)"


@pytest.mark.parametrize(
    ("total_nodes", "interval_s"),
    [(1, 2.0), (4, 2.0), (20, 2.0), (21, 2.1), (50, 5.0), (100, 10.0), (250, 25.0)],
)
def test_lab_interval_grows_with_the_lab_past_20_nodes(total_nodes: int, interval_s: float) -> None:
    assert P.lab_interval(total_nodes) == interval_s


MIB = 1 << 20


@pytest.mark.parametrize(
    ("free_bytes", "needed_bytes", "where"),
    [
        (23_000 * MIB, 512 * MIB, "tmpfs"),  # a host's /dev/shm: half its RAM
        (512 * MIB, 512 * MIB, "tmpfs"),  # exactly enough
        (512 * MIB - 1, 512 * MIB, "disk"),
        (64 * MIB, 512 * MIB, "disk"),  # docker's default /dev/shm: etcd's WAL alone fills it
        (0, 512 * MIB, "disk"),
        (None, 512 * MIB, "disk"),  # no /dev/shm at all
        (64 * MIB, 64 * MIB, "tmpfs"),  # the rule is free >= needed, whatever `needed` is
    ],
)
def test_etcd_data_goes_to_ram_only_with_room(
    free_bytes: int | None, needed_bytes: int, where: str
) -> None:
    """A container's /dev/shm is 64 MB and etcd preallocates a 64 MB log segment: RAM
    only with room to spare, else a directory on disk; the line says which and why."""
    ram, disk, shm = Path("/dev/shm/x"), Path("/var/tmp/x"), Path("/dev/shm")
    root = ram_disk.choose(
        ram=ram, disk=disk, shm=shm, free_bytes=free_bytes, needed_bytes=needed_bytes
    )
    assert ram_disk.in_ram(free_bytes, needed_bytes) == (where == "tmpfs")
    assert root.path == (ram if where == "tmpfs" else disk)
    assert root.line().startswith(f"etcd data in {root.path} (")
    assert ("(RAM, tmpfs)" in root.line()) == (where == "tmpfs")
    if free_bytes is not None:
        assert f"/dev/shm has {free_bytes // MIB} MiB free" in root.line()


def test_etcd_data_root_measures_the_tmpfs(tmp_path: Path) -> None:
    ram, disk = tmp_path / "ram", tmp_path / "disk"
    assert ram_disk.etcd_data_root(ram=ram, disk=disk, shm=tmp_path, needed_bytes=1).path == ram
    big = ram_disk.etcd_data_root(ram=ram, disk=disk, shm=tmp_path, needed_bytes=1 << 62)
    assert big.path == disk  # no disk has 4 EiB free
    gone = ram_disk.etcd_data_root(ram=ram, disk=disk, shm=tmp_path / "none")
    assert gone.path == disk
    assert gone.line() == f"etcd data in {disk} (disk): no {tmp_path / 'none'} here"


@pytest.mark.parametrize(
    ("present", "left", "removed"),
    [
        # the endpoints' namespaces went with their agents, the rest with `down`: all count
        (["mh-node1", "mh-node1-ep", "mh-fabric"], set(), ["mh-node1", "mh-node1-ep", "mh-fabric"]),
        # one that could not be deleted is not counted
        (["mh-node1", "mh-fabric"], {"mh-fabric"}, ["mh-node1"]),
        ([], set(), []),
    ],
)
def test_lab_down_counts_every_namespace_that_went(
    present: list[str], left: set[str], removed: list[str]
) -> None:
    assert namespaces_removed(present, left.__contains__) == removed


# --- racks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "racks", "expected"),
    [
        (4, 1, [1, 1, 1, 1]),
        (4, 2, [1, 1, 2, 2]),
        (5, 2, [1, 1, 1, 2, 2]),
        (3, 3, [1, 2, 3]),
        (7, 3, [1, 1, 1, 2, 2, 3, 3]),
        (250, 8, None),
    ],
)
def test_rack_of_splits_in_order_and_evenly(
    nodes: int, racks: int, expected: list[int] | None
) -> None:
    got = [P.rack_of(i, nodes, racks) for i in range(1, nodes + 1)]
    if expected is not None:
        assert got == expected
    assert got == sorted(got) and set(got) == set(range(1, racks + 1))
    sizes = [got.count(r) for r in range(1, racks + 1)]
    assert max(sizes) - min(sizes) <= 1


def test_plan_with_two_racks() -> None:
    plan = P.make_plan("mh", 4, racks=2)
    assert plan.router_netns == "mh-router"
    assert plan.netns_names[:2] == ("mh-fabric", "mh-router")
    assert [
        (r.name, r.bridge, r.subnet, r.gateway, r.router_iface, r.veth_fabric) for r in plan.racks
    ] == [
        ("rack1", "rack1", "10.77.0.0/20", "10.77.0.254", "r1", "vr1"),
        ("rack2", "rack2", "10.77.16.0/20", "10.77.16.254", "r2", "vr2"),
    ]
    rows = [
        (
            n.name,
            None if n.rack is None else n.rack.name,
            n.node_ip,
            n.bridge,
            n.prefixlen,
            n.gateway,
        )
        for n in plan.nodes
    ]
    assert rows == [
        ("node1", "rack1", "10.77.0.1", "rack1", 20, "10.77.0.254"),
        ("node2", "rack1", "10.77.0.2", "rack1", 20, "10.77.0.254"),
        ("node3", "rack2", "10.77.16.3", "rack2", 20, "10.77.16.254"),
        ("node4", "rack2", "10.77.16.4", "rack2", 20, "10.77.16.254"),
    ]
    assert plan.etcd_addresses() == [("10.77.255.1", 24)]
    assert plan.router_routes() == [(n.cidr, n.node_ip) for n in plan.nodes]
    assert plan.rack("rack2").index == 2
    for node in plan.nodes:  # each NodeIP in its rack's subnet, the gateway too
        assert node.rack is not None
        subnet = ipaddress.ip_network(node.rack.subnet)
        assert ipaddress.ip_address(node.node_ip) in subnet
        assert ipaddress.ip_address(node.rack.gateway) in subnet
        assert ipaddress.ip_address(P.etcd_ip(1)) not in subnet
    # The router's interfaces and the fabric's veths fit IFNAMSIZ.
    assert all(len(r.veth_fabric) <= IFNAMSIZ and len(r.bridge) <= IFNAMSIZ for r in plan.racks)


def test_plan_without_racks_is_unchanged() -> None:
    plan = P.make_plan("mh", 4, 2)
    assert plan.racks == () and plan.router_netns is None
    assert plan.netns_names[0] == "mh-fabric" and "mh-router" not in plan.netns_names
    assert [(n.bridge, n.prefixlen, n.gateway) for n in plan.nodes] == [("br0", 16, None)] * 8
    assert [n.node_ip for n in plan.nodes[:2]] == ["10.77.0.1", "10.77.0.2"]
    assert plan.etcd_addresses() == [("10.77.255.1", 16), ("10.77.255.2", 16)]
    assert plan.router_routes() == []
    with pytest.raises(P.PlanError, match=r"no rack 'rack1'.*lab up --racks N"):
        plan.rack("rack1")


def test_racks_and_clusters_keep_every_address_unique_and_off_the_core() -> None:
    plan = P.make_plan("mh", 10, P.MAX_CLUSTERS, racks=P.MAX_RACKS)
    ips = [n.node_ip for n in plan.nodes]
    assert len(set(ips)) == len(ips)
    core = ipaddress.ip_network("10.77.255.0/24")
    subnets = [ipaddress.ip_network(r.subnet) for r in plan.racks]
    assert not any(a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[i + 1 :])
    assert not any(s.overlaps(core) for s in subnets)
    for node in plan.nodes:
        assert node.rack is not None
        assert ipaddress.ip_address(node.node_ip) in ipaddress.ip_network(node.rack.subnet)


@pytest.mark.parametrize(
    ("nodes", "racks", "ip_mode", "message"),
    [
        (4, 0, "ipv4", "--racks must be 1..8"),
        (4, 9, "ipv4", "--racks must be 1..8"),
        (2, 3, "ipv4", "--racks 3 needs at least 3 nodes per cluster"),
        (4, 2, "dual", "--racks builds an IPv4 lab"),
        (4, 2, "ipv6", "--racks builds an IPv4 lab"),
    ],
)
def test_racks_rejects(nodes: int, racks: int, ip_mode: str, message: str) -> None:
    with pytest.raises(P.PlanError, match=message):
        P.make_plan("mh", nodes, ip_mode=ip_mode, racks=racks)


def test_state_round_trip_keeps_racks() -> None:
    st = S.LabState(
        prefix="mh", dir="/tmp/x", nodes=4, clusters=1, interval_s=2.0, agents=True, racks=2
    )
    assert S.state_from_json(st.to_json()).racks == 2
    old = S.state_from_json(
        S.LabState(prefix="mh", dir="/tmp/x", nodes=4, clusters=1, interval_s=2.0, agents=True)
        .to_json()
        .replace('"racks": 1,', "")
    )
    assert old.racks == 1  # a state file from before racks


def test_link_drop_script_drops_both_ways_on_the_racks_router_link() -> None:
    from meshhealth.lab import fabric_faults as F

    plan = P.make_plan("mh", 4, racks=2)
    script = F.link_drop_script(plan.rack("rack2"))
    assert script.startswith(f"table inet {F.table_name('link-drop', 'rack2')} {{")
    assert 'iifname "r2" drop' in script and 'oifname "r2" drop' in script
    assert "hook forward" in script and '"r1"' not in script
