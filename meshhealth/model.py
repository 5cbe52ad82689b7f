"""Dataclasses of the domain. No I/O here.

etcd entries (see docs/kvstore.md): Node, RetainedNode, IPEntry, ClusterConfig, HealthReport.
Probing: Target (a node to probe), PathKey (one path to it), ProbeResult, RoundReport.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

# Reserved identities, Cilium's numbers.
IDENTITY_HOST = 1
IDENTITY_WORLD = 2
IDENTITY_HEALTH = 4
IDENTITY_REMOTE_NODE = 6

LABEL_HEALTH = "reserved:health"
LABEL_REMOTE_NODE = "reserved:remote-node"


@dataclass(frozen=True, slots=True)
class Node:
    """`meshhealth/state/nodes/v1/<cluster>/<node>`: one registered node."""

    name: str
    cluster: str
    node_ip: str
    health_ip: str | None
    cidrs: tuple[str, ...]
    health_port: int
    version: str
    started_at: float  # unix seconds
    # The other address family (cilium-health's secondary addresses), None when absent.
    node_ip_secondary: str | None = None
    health_ip_secondary: str | None = None


@dataclass(frozen=True, slots=True)
class RetainedNode:
    """`meshhealth/state/retained/v1/<cluster>/<node>` (no lease): the node as it
    registered, written with its registration and deleted when it leaves cleanly. Left
    behind by an agent whose lease expired: the node is then kept in view as agent-down
    from `down_since` (unix seconds, set by one live agent of the cluster) for the
    retention time (docs/kvstore.md)."""

    node: Node
    down_since: float | None = None


@dataclass(frozen=True, slots=True)
class IPEntry:
    """`meshhealth/state/ip/v1/<cluster>/<ip>`: one ip -> identity entry.

    The cluster is in the key, not in the value.
    """

    ip: str
    host_ip: str  # the NodeIP of the node that owns this address
    node: str
    identity: int
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """`meshhealth/cluster-config/<cluster>`."""

    name: str
    id: int
    capabilities: tuple[str, ...] = ()


class TargetType(enum.StrEnum):
    NODE = "node"  # the NodeIP: "Host connectivity"
    ENDPOINT = "endpoint"  # the HealthIP: "Endpoint connectivity"


class Protocol(enum.StrEnum):
    ICMP = "icmp"  # "ICMP to stack"
    HTTP = "http"  # "HTTP to agent"
    ICMP_DF = "icmp-df"  # one big don't-fragment echo (the link MTU), NodeIP only
    UDP = "udp"  # echo datagrams from a few source ports to the agent, NodeIP only
    TCP = "tcp"  # a connect to an operator-chosen port (PathKey.port), NodeIP only


# The paths of every address, whose results decide reachability. ICMP_DF, UDP and TCP are
# extra: probed on the primary NodeIP only (when enabled); a lost big probe while the
# small ones pass is an MTU black hole (diagnosis: mtu-blackhole), lost UDP while ICMP
# and HTTP pass is UDP blocked (udp-blocked), a TCP port that does not accept is
# port-blocked; none of them is "unreachable".
REACHABILITY_PROTOCOLS: tuple[Protocol, ...] = (Protocol.ICMP, Protocol.HTTP)


class ProbeStatus(enum.StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"
    REFUSED = "refused"
    RESET = "reset"
    UNREACHABLE = "unreachable"  # ICMP destination unreachable / no route
    HTTP_ERROR = "http_error"  # a response that is not 200
    INVALID = "invalid"  # not HTTP, or not the reply we asked for
    ERROR = "error"  # anything else (local error: permission, no socket, ...)
    UNKNOWN = "unknown"  # not probed yet


# The words cilium-health users read.
STATUS_TEXT: dict[ProbeStatus, str] = {
    ProbeStatus.OK: "OK",
    ProbeStatus.TIMEOUT: "Connection timed out",
    ProbeStatus.REFUSED: "Connection refused",
    ProbeStatus.RESET: "Connection reset",
    ProbeStatus.UNREACHABLE: "No route to host",
    ProbeStatus.HTTP_ERROR: "HTTP error",
    ProbeStatus.INVALID: "Invalid response",
    ProbeStatus.ERROR: "Error",
    ProbeStatus.UNKNOWN: "Not probed yet",
}


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of one probe (ICMP: `sent` echo requests; HTTP: one request)."""

    status: ProbeStatus
    started_at: float  # unix seconds
    rtts_s: tuple[float, ...] = ()  # one per reply received
    sent: int = 1
    received: int = 0
    detail: str = ""  # e.g. "HTTP 503", errno text; empty when status says it all
    size_bytes: int = 0  # a don't-fragment ICMP probe: its IP packets' size; else 0
    # ICMP from the pinger: one per request sent, in order, None for no reply (what
    # `probe -C` lists); empty when unknown. Not part of equality.
    request_rtts_s: tuple[float | None, ...] = field(default=(), compare=False)
    # ICMP: the hop count of the newest reply, from its TTL (probe/hop_count.py); None
    # without a reply, for HTTP, or when the TTL was not read
    hops: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is ProbeStatus.OK

    @property
    def rtt_s(self) -> float | None:
        """The RTT users see: the mean of the replies, None when none came back."""
        if not self.rtts_s:
            return None
        return sum(self.rtts_s) / len(self.rtts_s)

    @property
    def loss(self) -> float:
        """Fraction of requests without a valid reply, 0.0 .. 1.0."""
        if self.sent <= 0:
            return 1.0
        return 1.0 - min(self.received, self.sent) / self.sent

    @property
    def text(self) -> str:
        """`OK` or the failure as cilium-health prints it (`HTTP 503` for HTTP errors)."""
        if self.status is ProbeStatus.HTTP_ERROR and self.detail:
            return self.detail
        return STATUS_TEXT[self.status]


def status_text(result: ProbeResult) -> str:
    """`OK`, `Connection timed out`, `HTTP 503`, `Error: ICMP disabled`, ...: the text
    with the detail after a colon when it adds something (failures only)."""
    text = result.text
    if result.detail and result.detail != text and not result.ok:
        return f"{text}: {result.detail}"
    return text


@dataclass(frozen=True, slots=True, order=True)
class Target:
    """A node to probe: its NodeIP and, when it has one, its health endpoint's HealthIP;
    a dual-stack node also has a secondary address of the other family for each."""

    cluster: str
    node: str
    node_ip: str
    health_ip: str | None = None
    node_ip_secondary: str | None = None
    health_ip_secondary: str | None = None
    # Set for a node whose agent's lease expired without a clean leave (unix seconds of
    # the expiry): its NodeIP stays probed, its views say agent-down.
    agent_down_since: float | None = None

    def address(self, target_type: TargetType, secondary: bool = False) -> str | None:
        if secondary:
            if target_type is TargetType.NODE:
                return self.node_ip_secondary
            return self.health_ip_secondary
        return self.node_ip if target_type is TargetType.NODE else self.health_ip

    @property
    def secondary_family(self) -> str | None:
        """`ipv4` or `ipv6`: the family of the secondary addresses; None without."""
        secondary = self.node_ip_secondary or self.health_ip_secondary
        return None if secondary is None else ip_family(secondary)


@dataclass(frozen=True, slots=True, order=True)
class PathKey:
    """One probed path: a target node, which of its addresses, which protocol."""

    cluster: str
    node: str
    target_type: TargetType
    protocol: Protocol
    secondary: bool = False  # the address of the other family (dual stack)
    port: int = 0  # Protocol.TCP: the port connected to; 0 for every other protocol


@dataclass(frozen=True, slots=True)
class PathReport:
    path: PathKey
    ip: str
    result: ProbeResult


@dataclass(frozen=True, slots=True)
class PlanInfo:
    """The probe plan one round followed (meshhealth.probe.assignment, docs/scale.md):
    enough for any reader to compute who was expected to probe whom in `epoch`."""

    epoch: int  # floor(round start / (rotation_rounds x interval))
    k: int  # --probe-targets: targets (and probers) per node past the full-mesh size
    rotation_rounds: int  # rounds one epoch lasts
    full_mesh: bool  # --full-mesh: every node probes every node, at any size
    full_mesh_max_nodes: int  # node lists up to this size are a full mesh anyway
    nodes: int  # nodes in the plan, this one included

    @property
    def subset(self) -> bool:
        """True when each node probes only some of the others (not a full mesh)."""
        return not self.full_mesh and self.nodes > max(self.k + 1, self.full_mesh_max_nodes)

    @property
    def targets_per_node(self) -> int:
        """Nodes each node probes (besides itself) in this plan."""
        return self.k if self.subset else max(self.nodes - 1, 0)


@dataclass(frozen=True, slots=True)
class RoundReport:
    """Everything one round found. `paths` has one entry per probed path."""

    started_at: float  # unix seconds
    duration_s: float
    targets: tuple[Target, ...]
    paths: tuple[PathReport, ...] = field(default_factory=tuple)
    plan: PlanInfo | None = None  # None: the round followed no plan (meshhealth probe)


@dataclass(frozen=True, slots=True)
class PathHealth:
    """One path's published health (inside a HealthReport)."""

    status: ProbeStatus
    rtt_s: float | None
    loss: float  # over the stats window, 0.0 .. 1.0
    # The agent's suspicion verdict (PATH_VERDICTS) and since when (unix seconds); None:
    # not published (an OK path, or an older agent: its status alone decides).
    state: str | None = None
    state_since: float | None = None


@dataclass(frozen=True, slots=True)
class TraceStop:
    """Where a trace from this node towards a target whose NodeIP ICMP path turned
    unreachable stopped: the farthest hop that answered (None, hop 0: none did)."""

    address: str | None
    hop: int  # 1 = the first router; 0 when no hop answered
    at: float  # unix seconds: when the trace ran


@dataclass(frozen=True, slots=True)
class TargetHealth:
    cluster: str
    node: str
    # keys: "node/icmp", "node/http", "endpoint/icmp", "endpoint/http"
    paths: dict[str, PathHealth]
    # The same names for the secondary addresses (dual stack); empty when none.
    secondary_paths: dict[str, PathHealth] = field(default_factory=dict)
    # Their family, `ipv4` or `ipv6` (ADDRESS_FAMILIES); None when the target has no
    # secondary paths or the writer predates the field.
    secondary_family: str | None = None
    # While its NodeIP ICMP path is unreachable: where this node's trace to it stopped.
    trace: TraceStop | None = None


@dataclass(frozen=True, slots=True)
class HealthReport:
    """`meshhealth/state/health/v1/<cluster>/<node>`: what one node sees."""

    node: str
    cluster: str
    probe_time: float  # unix seconds of the round these results come from
    interval_s: float
    targets: tuple[TargetHealth, ...]
    plan: PlanInfo | None = None  # None: written by an agent older than the probe plan
    # Local health awareness (diagnosis/local_health.py): the agent's own score (0: well)
    # and, while it is degraded, since when (unix seconds; readers discount its failures).
    health_score: int = 0
    degraded_since: float | None = None
    # While degraded, why, as codes (diagnosis/local_health.py REASON_CODES: loop-lag,
    # targets-failing, etcd-unreachable); empty from an agent older than them.
    degraded_reasons: tuple[str, ...] = ()


class Reachability(enum.StrEnum):
    """The one vocabulary for a path's, a matrix cell's and a node's state, in every view
    (status, matrix, page, watch, metrics, the cluster summary) and every rule
    (suspicion per path, diagnosis, the cluster verdict)."""

    REACHABLE = "reachable"  # answers (a path), every probed path answers (a cell, node)
    SUSPECT = "suspect"  # failing, not for long enough to be sure: neither reachable nor not
    UNREACHABLE = "unreachable"  # failing past its suspicion time
    UNKNOWN = "unknown"  # not probed yet, or no observer says anything
    STALE = "stale"  # a cell: its observer's report is too old to count
    UNASSIGNED = "unassigned"  # a cell: its observer was not asked to probe it (subset)


# The states a path or a node has (a matrix cell has the two more above).
PATH_STATES: tuple[Reachability, ...] = (
    Reachability.REACHABLE,
    Reachability.SUSPECT,
    Reachability.UNREACHABLE,
    Reachability.UNKNOWN,
)

# A path's suspicion verdict as published in a health report: only failing paths carry
# one (suspect, unreachable); "ok" is what agents before the one vocabulary wrote for
# `reachable`, still read.
PATH_VERDICTS: tuple[str, ...] = ("ok", "suspect", "unreachable")


def protocol_name(protocol: Protocol, port: int = 0) -> str:
    """`icmp`, `http`, `icmp-df`, `udp`, or `tcp:10250` for a TCP connect to a port: the
    protocol part of a path's name (and the metrics' `protocol` label)."""
    return f"{protocol.value}:{port}" if protocol is Protocol.TCP else protocol.value


def path_name(target_type: TargetType, protocol: Protocol, port: int = 0) -> str:
    """`node/icmp`, `node/tcp:10250` etc.: the key of a path inside a HealthReport (in
    `paths` for the primary addresses, in `secondary_paths` for the secondary ones)."""
    return f"{target_type.value}/{protocol_name(protocol, port)}"


def tcp_ports_of(paths: Iterable[PathKey]) -> tuple[int, ...]:
    """The TCP ports among `paths`, sorted: what the agent's `--probe-tcp-ports` made
    of them (every target is probed on the same ports)."""
    return tuple(sorted({p.port for p in paths if p.protocol is Protocol.TCP}))


SECONDARY_SUFFIX = "@secondary"


def path_label(path: PathKey) -> str:
    """`node/icmp`, or `node/icmp@secondary` for a secondary address: how a path is
    named where one flat name is needed (logs, the watch view)."""
    name = path_name(path.target_type, path.protocol, path.port)
    return name + SECONDARY_SUFFIX if path.secondary else name


ADDRESS_FAMILIES = ("ipv4", "ipv6")


def ip_family(ip: str) -> str:
    """`ipv4` or `ipv6` (the metrics' `family` label)."""
    return "ipv6" if ":" in ip else "ipv4"


@dataclass(frozen=True, slots=True)
class PathSummary:
    """One path over the stats window (meshhealth.probe.stats.PathStats.summary())."""

    samples: int  # results in the window
    last: ProbeResult | None  # the newest result, None before the first probe
    loss: float  # fraction of failed probes over the window, 0.0 .. 1.0
    rtt_last_s: float | None
    rtt_p50_s: float | None
    rtt_p95_s: float | None
    rtt_max_s: float | None
    last_probed: float | None  # unix seconds
    last_success: float | None  # unix seconds
    consecutive_failures: int
