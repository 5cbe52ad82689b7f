"""The lab's address and name plan: pure, computed from (prefix, nodes, clusters, racks,
address families).

Everything `lab up` creates and `lab down` removes is named here, so both sides agree
and the plan can be recomputed from the options stored in the state file. The address
tables (IPv4, IPv6 with `--dual-stack`/`--ipv6`, racks) are in docs/lab.md; rack 1 keeps
the addresses of a lab without racks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from meshhealth import defaults
from meshhealth.lab.ram_disk import DataRoot, etcd_data_root

# NodeIPs use the 4th octet (1..250) of 10.77.(k-1).0; .251-.254 stay free.
MAX_NODES: Final = 250
# CIDRs use the second octet 78..(78+C-1): keep well below 10.255.
MAX_CLUSTERS: Final = 16
MAX_PREFIX_LEN: Final = 12

LAB_ROOT: Final = Path("/run/meshhealth/lab")
# etcd fsyncs its WAL on every write; on a disk-backed /run that took 117 ms a write
# (average) under a 100-node lab's load, so etcd fell behind, leases expired and the
# lab churned. Its data goes to RAM (tmpfs) when the host's /dev/shm has room for it
# (meshhealth.lab.ram_disk); a lab's etcd keeps nothing worth a disk.
ETCD_DATA_ROOT: Final = Path("/dev/shm/meshhealth-lab")
FABRIC_SUBNET: Final = "10.77.0.0/16"
FABRIC_PREFIXLEN: Final = 16
BRIDGE: Final = "br0"
NODE_IFACE: Final = "eth0"  # the node's fabric link, inside the node namespace
ETCD_CLIENT_PORT: Final = 2379
ETCD_PEER_PORT: Final = 2380
NFT_TABLE: Final = "meshhealth_lab"  # `table inet meshhealth_lab` in each namespace
FABRIC_SUBNET6: Final = "fd77::/64"
FABRIC_PREFIXLEN6: Final = 64
# Address families of a lab: IPv4 only (the default), dual stack, IPv6 only.
IP_MODES: Final = ("ipv4", "dual", "ipv6")
# Racks: rack r's subnet is 10.77.16(r-1).0/20 (third octets 16(r-1) .. 16(r-1)+15, one
# per cluster); 10.77.255.0/24 stays the core's.
MAX_RACKS: Final = 8
RACK_PREFIXLEN: Final = 20
CORE_PREFIXLEN: Final = 24
ROUTER_CORE_IP: Final = "10.77.255.254"
ROUTER_CORE_IFACE: Final = "r0"  # the router's link to the core bridge (its peer: vr0)

_PREFIX_RE: Final = re.compile(r"^[a-z][a-z0-9]*$")


class PlanError(ValueError):
    """Options that do not make a lab (bad prefix, too many nodes...)."""


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    name: str  # lab1, lab2, ...
    index: int  # k, 1-based
    etcd_ip: str
    etcd_url: str  # client URL, reachable from every node namespace
    etcd_peer_url: str
    etcd_dir: Path  # data dir
    etcd_log: Path
    dir: Path  # per-cluster directory: sockets, logs

    @property
    def etcd_prefixlen(self) -> int:
        return FABRIC_PREFIXLEN6 if ":" in self.etcd_ip else FABRIC_PREFIXLEN


@dataclass(frozen=True, slots=True)
class RackPlan:
    """One rack: a bridge in the fabric namespace, a subnet, the router's link to it."""

    name: str  # rack1, rack2, ...
    index: int  # r, 1-based
    bridge: str  # in the fabric namespace: `rack1`
    subnet: str  # 10.77.16.0/20
    gateway: str  # the router's address on the rack: 10.77.16.254
    router_iface: str  # the router's end of its link to the rack: `r2`
    veth_fabric: str  # the fabric's end, on the rack's bridge: `vr2`


@dataclass(frozen=True, slots=True)
class NodePlan:
    cluster: str
    name: str  # node1, node2, ...
    index: int  # i, 1-based
    netns: str
    node_ip: str
    cidr: str
    health_ip: str
    veth_fabric: str  # the fabric-side end of the node's link (in the fabric ns)
    socket: Path
    log: Path
    metrics_listen: str
    # Dual stack: the IPv6 NodeIP, CIDR and HealthIP (None in an IPv4-only lab).
    node_ip_secondary: str | None = None
    cidr_secondary: str | None = None
    health_ip_secondary: str | None = None
    # Racks: the node's rack, whose bridge it hangs off and whose router it routes
    # through (None in a lab without racks: the fabric's one bridge).
    rack: RackPlan | None = None

    @property
    def bridge(self) -> str:
        """The fabric bridge the node's link hangs off."""
        return BRIDGE if self.rack is None else self.rack.bridge

    @property
    def prefixlen(self) -> int:
        """The prefix length of the NodeIP (IPv4 ones; IPv6: FABRIC_PREFIXLEN6)."""
        return FABRIC_PREFIXLEN if self.rack is None else RACK_PREFIXLEN

    @property
    def gateway(self) -> str | None:
        """Where the node routes everything off its rack (None: no racks, one subnet)."""
        return None if self.rack is None else self.rack.gateway

    @property
    def node_ips(self) -> tuple[str, ...]:
        """Every NodeIP of the node, primary first."""
        return (
            (self.node_ip,)
            if self.node_ip_secondary is None
            else (self.node_ip, self.node_ip_secondary)
        )

    @property
    def endpoint_netns(self) -> str:
        """The agent's health-endpoint namespace (`--health-netns`): named after the
        node's own namespace, so labs with other prefixes never share one."""
        return f"{self.netns}-ep"

    @property
    def web_listen(self) -> str:
        """`--web-listen`: the live page on the NodeIP (reachable inside the lab)."""
        return listen_address(self.node_ip, defaults.WEB_PORT)

    @property
    def web_url(self) -> str:
        return f"http://{self.web_listen}/"

    @property
    def qualified(self) -> str:
        """`lab1/node2`: the name users type and status prints."""
        return f"{self.cluster}/{self.name}"


@dataclass(frozen=True, slots=True)
class LabPlan:
    prefix: str
    nodes_per_cluster: int
    dir: Path
    fabric_netns: str
    clusters: tuple[ClusterPlan, ...]
    nodes: tuple[NodePlan, ...]
    ip_mode: str = "ipv4"  # one of IP_MODES
    racks: tuple[RackPlan, ...] = ()  # none: one bridge for every node

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def router_netns(self) -> str | None:
        """The namespace joining the racks (None without racks)."""
        return f"{self.prefix}-router" if self.racks else None

    @property
    def netns_names(self) -> tuple[str, ...]:
        """Every namespace the lab creates, in creation order (fabric, router first)."""
        router = () if self.router_netns is None else (self.router_netns,)
        return (self.fabric_netns, *router, *(n.netns for n in self.nodes))

    def etcd_addresses(self) -> list[tuple[str, int]]:
        """The addresses (ip, prefix length) on the fabric's bridge `br0`: the etcds'."""
        return [
            (c.etcd_ip, CORE_PREFIXLEN if self.racks else c.etcd_prefixlen) for c in self.clusters
        ]

    def rack(self, name: str) -> RackPlan:
        for r in self.racks:
            if r.name == name:
                return r
        have = ", ".join(r.name for r in self.racks) or "none: lab up --racks N makes them"
        raise PlanError(f"no rack {name!r} in lab {self.prefix} (racks: {have})")

    def router_routes(self) -> list[tuple[str, str]]:
        """(CIDR, NodeIP) of every node: the router's routes to the nodes' CIDRs."""
        return [(n.cidr, n.node_ip) for n in self.nodes] if self.racks else []

    def cluster(self, name: str) -> ClusterPlan:
        for c in self.clusters:
            if c.name == name:
                return c
        raise PlanError(f"no cluster {name!r} in lab {self.prefix} (have {self._cluster_names()})")

    def node(self, spec: str) -> NodePlan:
        """Find a node by `node2` (cluster lab1) or `lab2/node2`."""
        cluster, _, name = spec.rpartition("/")
        cluster = cluster or self.clusters[0].name
        for n in self.nodes:
            if n.cluster == cluster and n.name == name:
                return n
        raise PlanError(
            f"no node {spec!r} in lab {self.prefix} "
            f"(nodes node1..node{self.nodes_per_cluster} of {self._cluster_names()})"
        )

    def _cluster_names(self) -> str:
        return ", ".join(c.name for c in self.clusters)


def validate_prefix(prefix: str) -> str:
    if not _PREFIX_RE.match(prefix) or len(prefix) > MAX_PREFIX_LEN:
        raise PlanError(
            f"bad lab prefix {prefix!r}: lowercase letters and digits, starting with a letter, "
            f"at most {MAX_PREFIX_LEN} characters"
        )
    return prefix


def lab_dir(prefix: str, root: Path = LAB_ROOT) -> Path:
    return root / validate_prefix(prefix)


def lab_interval(total_nodes: int) -> float:
    """The agents' probe interval `lab up` uses when none is given: LAB_INTERVAL_S, or
    LAB_INTERVAL_PER_NODE_S per node of the whole lab when that is longer. Pure."""
    return max(defaults.LAB_INTERVAL_S, round(defaults.LAB_INTERVAL_PER_NODE_S * total_nodes, 1))


def etcd_data_dir(prefix: str, root: Path = LAB_ROOT) -> Path:
    """Where the lab's etcd members keep their data (`etcd_data_choice`)."""
    return etcd_data_choice(prefix, root).path


def etcd_data_choice(prefix: str, root: Path = LAB_ROOT) -> DataRoot:
    """Under ETCD_DATA_ROOT (RAM) when /dev/shm has room (meshhealth.lab.ram_disk) or
    already holds this lab's data, else in the lab's directory; and why. Unique per
    prefix, as namespace names are."""
    in_ram = ETCD_DATA_ROOT / validate_prefix(prefix)
    if in_ram.is_dir():
        return DataRoot(in_ram, True, "it already holds this lab's etcd data")
    return etcd_data_root(ram=in_ram, disk=lab_dir(prefix, root) / "etcd")


def etcd_data_dirs(prefix: str, root: Path = LAB_ROOT) -> tuple[Path, Path]:
    """Both places a lab's etcd data may be (`lab down` removes whichever exists)."""
    return ETCD_DATA_ROOT / validate_prefix(prefix), lab_dir(prefix, root) / "etcd"


def netns_pattern(prefix: str) -> re.Pattern[str]:
    """Namespace names `lab up` makes for this prefix (never another prefix's)."""
    p = re.escape(validate_prefix(prefix))
    return re.compile(rf"^{p}-(fabric|router|lab[0-9]+-node[0-9]+(-ep)?|lab[0-9]+-etcd[0-9]+)$")


def node_ip(cluster_index: int, node_index: int, rack_index: int = 1) -> str:
    return f"10.77.{16 * (rack_index - 1) + cluster_index - 1}.{node_index}"


def rack_of(node_index: int, nodes: int, racks: int) -> int:
    """The rack (1-based) of node `node_index` of `nodes`, split in order into `racks`
    blocks as even as can be. Pure."""
    return (node_index - 1) * racks // nodes + 1


def make_rack(index: int) -> RackPlan:
    third = 16 * (index - 1)
    return RackPlan(
        name=f"rack{index}",
        index=index,
        bridge=f"rack{index}",
        subnet=f"10.77.{third}.0/{RACK_PREFIXLEN}",
        gateway=f"10.77.{third}.254",
        router_iface=f"r{index}",
        veth_fabric=f"vr{index}",
    )


def node_cidr(cluster_index: int, node_index: int) -> str:
    return f"10.{78 + cluster_index - 1}.{node_index}.0/24"


def health_ip(cluster_index: int, node_index: int) -> str:
    return f"10.{78 + cluster_index - 1}.{node_index}.2"


def etcd_ip(cluster_index: int) -> str:
    return f"10.77.255.{cluster_index}"


def node_ip6(cluster_index: int, node_index: int) -> str:
    return f"fd77::{cluster_index:x}:{node_index:x}"


def node_cidr6(cluster_index: int, node_index: int) -> str:
    return f"fd78:{cluster_index:x}:{node_index:x}::/64"


def health_ip6(cluster_index: int, node_index: int) -> str:
    return f"fd78:{cluster_index:x}:{node_index:x}::2"


def etcd_ip6(cluster_index: int) -> str:
    return f"fd77::ff:{cluster_index:x}"


def listen_address(ip: str, port: int) -> str:
    """`IP:PORT`, `[IPv6]:PORT`."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


Addresses = tuple[str, str, str]  # NodeIP, CIDR, HealthIP


def _node_addresses(ip_mode: str, k: int, i: int, r: int = 1) -> tuple[Addresses, Addresses | None]:
    """The primary and (dual stack) secondary addresses of node i of cluster k (in rack
    r)."""
    v4 = (node_ip(k, i, r), node_cidr(k, i), health_ip(k, i))
    v6 = (node_ip6(k, i), node_cidr6(k, i), health_ip6(k, i))
    if ip_mode == "ipv6":
        return v6, None
    return v4, (v6 if ip_mode == "dual" else None)


def veth_name(cluster_index: int, node_index: int) -> str:
    """Fabric-side veth end: `vl1n200` fits IFNAMSIZ (15) for every allowed value."""
    return f"vl{cluster_index}n{node_index}"


def make_plan(
    prefix: str = defaults.LAB_PREFIX,
    nodes: int = defaults.LAB_NODES,
    clusters: int = defaults.LAB_CLUSTERS,
    root: Path = LAB_ROOT,
    ip_mode: str = "ipv4",
    *,
    racks: int = 1,
) -> LabPlan:
    validate_prefix(prefix)
    if ip_mode not in IP_MODES:
        raise PlanError(f"IP mode must be one of {', '.join(IP_MODES)}, got {ip_mode!r}")
    if not 1 <= nodes <= MAX_NODES:
        raise PlanError(f"--nodes must be 1..{MAX_NODES}, got {nodes}")
    if not 1 <= clusters <= MAX_CLUSTERS:
        raise PlanError(f"--clusters must be 1..{MAX_CLUSTERS}, got {clusters}")
    if not 1 <= racks <= MAX_RACKS:
        raise PlanError(f"--racks must be 1..{MAX_RACKS}, got {racks}")
    if racks > nodes:
        raise PlanError(f"--racks {racks} needs at least {racks} nodes per cluster, got {nodes}")
    if racks > 1 and ip_mode != "ipv4":
        raise PlanError("--racks builds an IPv4 lab (no --dual-stack or --ipv6)")
    rack_plans = tuple(make_rack(r) for r in range(1, racks + 1)) if racks > 1 else ()
    base = lab_dir(prefix, root)
    data = etcd_data_dir(prefix, root)
    cluster_plans: list[ClusterPlan] = []
    node_plans: list[NodePlan] = []
    for k in range(1, clusters + 1):
        name = f"lab{k}"
        cdir = base / name
        ip = etcd_ip6(k) if ip_mode == "ipv6" else etcd_ip(k)
        cluster_plans.append(
            ClusterPlan(
                name=name,
                index=k,
                etcd_ip=ip,
                etcd_url=f"http://{listen_address(ip, ETCD_CLIENT_PORT)}",
                etcd_peer_url=f"http://{listen_address(ip, ETCD_PEER_PORT)}",
                etcd_dir=data / name / "etcd.data",
                etcd_log=cdir / "etcd.log",
                dir=cdir,
            )
        )
        for i in range(1, nodes + 1):
            rack = rack_plans[rack_of(i, nodes, racks) - 1] if rack_plans else None
            r = 1 if rack is None else rack.index
            (nip, cidr, hip), secondary = _node_addresses(ip_mode, k, i, r)
            node_plans.append(
                NodePlan(
                    cluster=name,
                    name=f"node{i}",
                    index=i,
                    netns=f"{prefix}-{name}-node{i}",
                    node_ip=nip,
                    cidr=cidr,
                    health_ip=hip,
                    veth_fabric=veth_name(k, i),
                    socket=cdir / f"node{i}.sock",
                    log=cdir / f"node{i}.log",
                    metrics_listen=listen_address(nip, defaults.LAB_METRICS_PORT),
                    node_ip_secondary=None if secondary is None else secondary[0],
                    cidr_secondary=None if secondary is None else secondary[1],
                    health_ip_secondary=None if secondary is None else secondary[2],
                    rack=rack,
                )
            )
    return LabPlan(
        prefix=prefix,
        nodes_per_cluster=nodes,
        dir=base,
        fabric_netns=f"{prefix}-fabric",
        clusters=tuple(cluster_plans),
        nodes=tuple(node_plans),
        ip_mode=ip_mode,
        racks=rack_plans,
    )


def agent_argv(
    plan: LabPlan,
    node: NodePlan,
    python: str,
    interval_s: float | None = defaults.LAB_INTERVAL_S,
) -> list[str]:
    """The agent's command line (run inside the node's namespace by the caller).

    Other clusters of the lab are meshed in with one `--mesh NAME=URL` each.
    """
    cluster = plan.cluster(node.cluster)
    argv = [
        python,
        "-m",
        "meshhealth",
        "agent",
        "--etcd",
        cluster.etcd_url,
        "--cluster",
        node.cluster,
        "--node",
        node.name,
        "--node-ip",
        node.node_ip,
        "--health-ip",
        node.health_ip,
        "--cidr",
        node.cidr,
        *_secondary_args(node),
        "--socket",
        str(node.socket),
        "--health-mode",
        "netns",
        "--health-netns",
        node.endpoint_netns,
        # Racks: the router holds the routes to every node's CIDR (a peer in another
        # rack is no next hop of ours); without racks each agent routes to its peers'.
        *(["--route-cidrs"] if node.rack is None else []),
        "--metrics-listen",
        node.metrics_listen,
        "--web-listen",
        node.web_listen,
    ]
    if interval_s is not None:
        argv += ["--interval", f"{interval_s:g}"]
    for other in plan.clusters:
        if other.name != cluster.name:
            argv += ["--mesh", f"{other.name}={other.etcd_url}"]
    return argv


def _secondary_args(node: NodePlan) -> list[str]:
    """The dual-stack flags of a node's agent (none in a single-family lab)."""
    args: list[str] = []
    if node.node_ip_secondary is not None:
        args += ["--node-ip-secondary", node.node_ip_secondary]
    if node.health_ip_secondary is not None:
        args += ["--health-ip-secondary", node.health_ip_secondary]
    if node.cidr_secondary is not None:
        args += ["--cidr", node.cidr_secondary]
    return args


def etcd_argv(cluster: ClusterPlan, etcd_bin: str = "etcd") -> list[str]:
    """A one-member etcd for one cluster, listening on its fabric address only."""
    return [
        etcd_bin,
        "--name",
        cluster.name,
        "--data-dir",
        str(cluster.etcd_dir),
        "--listen-client-urls",
        cluster.etcd_url,
        "--advertise-client-urls",
        cluster.etcd_url,
        "--listen-peer-urls",
        cluster.etcd_peer_url,
        "--initial-advertise-peer-urls",
        cluster.etcd_peer_url,
        "--initial-cluster",
        f"{cluster.name}={cluster.etcd_peer_url}",
        "--initial-cluster-state",
        "new",
        "--initial-cluster-token",
        f"meshhealth-{cluster.name}",
        # Small lab: keep memory and disk use down.
        "--quota-backend-bytes",
        str(256 * 1024 * 1024),
        "--auto-compaction-retention",
        "5m",
        "--logger",
        "zap",
        "--log-level",
        "warn",
    ]
