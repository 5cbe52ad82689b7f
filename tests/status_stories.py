"""The troubleshooting stories as status inputs (pure, deterministic): a healthy
cluster; an endpoint nobody reaches because its node drops forwarding to it; ICMP
dropped on the fabric while TCP works; an agent that stopped answering (host up, HTTP
refused); etcd down; one lost probe (a `suspect` path, with the agent's verdicts); and
an agent before its first round (docs/troubleshooting.md
reads the same path patterns).

Each story feeds a few rounds of probe results through the real StatsBook, so the
documents and goldens built from them are what the agent would really show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import replace

from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.diagnosis.cluster_summary import build_summary
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
)
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    PathKey,
    PathReport,
    PlanInfo,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
    TargetType,
)
from meshhealth.probe.stats import StatsBook
from meshhealth.wire.summary import (
    ClusterSummary,
    DiscountedObserver,
    MaintenanceNote,
    NodeCounts,
    SummaryFinding,
)
from tests import matrix_stories

NOW = 1_795_341_603.0  # 2026-11-22T10:00:03Z
PROBE_TIME = 1_795_341_600.0  # 2026-11-22T10:00:00Z
INTERVAL_S = 10.0
ROUNDS = 6

LOCAL = LocalNode(cluster="lab1", name="node1", node_ip="10.77.0.1", health_ip="10.78.1.2")
TARGETS = (
    Target("lab1", "node2", "10.77.0.2", "10.78.2.2"),
    Target("lab1", "node1", "10.77.0.1", "10.78.1.2"),
    Target("lab1", "node3", "10.77.0.3", "10.78.3.2"),
)

# Base RTT per (node, target type, protocol), seconds.
BASE_RTT_S = {
    ("node1", TargetType.NODE, Protocol.ICMP): 412.5e-6,
    ("node1", TargetType.NODE, Protocol.HTTP): 1.02e-3,
    ("node1", TargetType.ENDPOINT, Protocol.ICMP): 455e-6,
    ("node1", TargetType.ENDPOINT, Protocol.HTTP): 1.31e-3,
    ("node2", TargetType.NODE, Protocol.ICMP): 520e-6,
    ("node2", TargetType.NODE, Protocol.HTTP): 2.7e-3,
    ("node2", TargetType.ENDPOINT, Protocol.ICMP): 610e-6,
    ("node2", TargetType.ENDPOINT, Protocol.HTTP): 3.1e-3,
    ("node3", TargetType.NODE, Protocol.ICMP): 498e-6,
    ("node3", TargetType.NODE, Protocol.HTTP): 1.9e-3,
    ("node3", TargetType.ENDPOINT, Protocol.ICMP): 577e-6,
    ("node3", TargetType.ENDPOINT, Protocol.HTTP): 2.2e-3,
}

# (node, target type, protocol[, TCP port]) -> the status of the newest rounds; older
# rounds were OK.
Fault = dict[tuple[str, TargetType, Protocol] | tuple[str, TargetType, Protocol, int], ProbeStatus]
FAILING_ROUNDS = 3


MTU_PROBE_BYTES = 1500
UDP_SOURCE_PORTS = 4
TCP_PORTS = (22, 10250)  # the story's --probe-tcp-ports


def _ok(path: PathKey, round_index: int, started_at: float) -> ProbeResult:
    if path.protocol is Protocol.ICMP_DF:  # a big packet takes a little longer
        base = BASE_RTT_S[(path.node, path.target_type, Protocol.ICMP)] * 1.25
    elif path.protocol in (Protocol.UDP, Protocol.TCP):  # one round trip, to user space
        base = BASE_RTT_S[(path.node, path.target_type, Protocol.ICMP)] * 1.5
    else:
        base = BASE_RTT_S[(path.node, path.target_type, path.protocol)]
    # The newest round (index ROUNDS-1) measures exactly the base RTT.
    jitter = [1.0, 1.1, 0.9, 1.28, 0.95, 1.0][round_index % ROUNDS]
    if path.protocol is Protocol.TCP:
        return ProbeResult(ProbeStatus.OK, started_at, (base * jitter,), sent=1, received=1)
    if path.protocol is Protocol.UDP:
        rtts = (base * jitter,) * UDP_SOURCE_PORTS
        return ProbeResult(ProbeStatus.OK, started_at, rtts, UDP_SOURCE_PORTS, UDP_SOURCE_PORTS)
    if path.protocol is not Protocol.HTTP:
        rtts = (base * jitter, base * jitter, base * jitter)
        size = MTU_PROBE_BYTES if path.protocol is Protocol.ICMP_DF else 0
        # Hops from the replies' TTL: the node on the same link, its endpoint behind it.
        hops = 1 if path.target_type is TargetType.NODE else 2
        return ProbeResult(ProbeStatus.OK, started_at, rtts, 3, 3, size_bytes=size, hops=hops)
    return ProbeResult(ProbeStatus.OK, started_at, (base * jitter,), sent=1, received=1)


def _failed(path: PathKey, status: ProbeStatus, started_at: float) -> ProbeResult:
    sent = {Protocol.HTTP: 1, Protocol.TCP: 1, Protocol.UDP: UDP_SOURCE_PORTS}.get(path.protocol, 3)
    size = MTU_PROBE_BYTES if path.protocol is Protocol.ICMP_DF else 0
    return ProbeResult(status, started_at, (), sent=sent, received=0, size_bytes=size)


def _protocols(
    target_type: TargetType, secondary: bool, mtu_probe: bool, l4: bool = False
) -> tuple[tuple[Protocol, int], ...]:
    """(protocol, TCP port or 0) of every path of that address."""
    kinds = [(p, 0) for p in REACHABILITY_PROTOCOLS]
    if target_type is TargetType.NODE and not secondary:
        if mtu_probe:
            kinds.append((Protocol.ICMP_DF, 0))
        if l4:
            kinds += [(Protocol.UDP, 0), *((Protocol.TCP, port) for port in TCP_PORTS)]
    return tuple(kinds)


def _book(
    fault: Fault,
    targets: tuple[Target, ...] = TARGETS,
    secondary_fault: Fault | None = None,
    *,
    mtu_probe: bool = False,
    l4: bool = False,
) -> StatsBook:
    book = StatsBook()
    for round_index in range(ROUNDS):
        started_at = PROBE_TIME - (ROUNDS - 1 - round_index) * INTERVAL_S
        reports = []
        for target in targets:
            for target_type in TargetType:
                for secondary in (False, True):
                    ip = target.address(target_type, secondary)
                    if ip is None:
                        assert secondary
                        continue
                    faults = (secondary_fault or {}) if secondary else fault
                    for protocol, port in _protocols(target_type, secondary, mtu_probe, l4):
                        path = PathKey(
                            target.cluster, target.node, target_type, protocol, secondary, port
                        )
                        failing = faults.get(
                            (target.node, target_type, protocol, port)
                            if port
                            else (target.node, target_type, protocol)
                        )
                        if failing is not None and round_index >= ROUNDS - FAILING_ROUNDS:
                            result = _failed(path, failing, started_at)
                        else:
                            result = _ok(path, round_index, started_at)
                        reports.append(PathReport(path, ip, result))
        book.record(RoundReport(started_at, 0.8, targets, tuple(reports)))
    return book


def _inputs(
    fault: Fault,
    *,
    etcd: EtcdState | None = None,
    local: LocalNode = LOCAL,
    targets: tuple[Target, ...] = TARGETS,
    secondary_fault: Fault | None = None,
    mtu_probe: bool = False,
    l4: bool = False,
) -> StatusInputs:
    return StatusInputs(
        local=local,
        targets=targets,
        summaries=_book(fault, targets, secondary_fault, mtu_probe=mtu_probe, l4=l4).summaries(),
        probe_time=PROBE_TIME,
        probe_interval_s=INTERVAL_S,
        etcd=etcd or EtcdState(up=True, since=NOW - 3600),
        round=RoundState(
            running=False, last_started_at=PROBE_TIME, last_duration_s=1.0234, completed=ROUNDS
        ),
        now=NOW,
    )


TIMEOUT = ProbeStatus.TIMEOUT


def healthy() -> StatusInputs:
    return _inputs({})


def endpoint_forward_drop() -> StatusInputs:
    """node2's FORWARD policy drops: host paths OK, both endpoint paths time out."""
    return _inputs(
        {
            ("node2", TargetType.ENDPOINT, Protocol.ICMP): TIMEOUT,
            ("node2", TargetType.ENDPOINT, Protocol.HTTP): TIMEOUT,
        }
    )


def icmp_drop() -> StatusInputs:
    """ICMP dropped on the fabric towards node3: every ICMP path times out, HTTP is OK."""
    return _inputs(
        {
            ("node3", TargetType.NODE, Protocol.ICMP): TIMEOUT,
            ("node3", TargetType.ENDPOINT, Protocol.ICMP): TIMEOUT,
        }
    )


def agent_down() -> StatusInputs:
    """node2's agent crashed (refused), node3's is SIGSTOPped (timed out); ICMP is OK."""
    return _inputs(
        {
            ("node2", TargetType.NODE, Protocol.HTTP): ProbeStatus.REFUSED,
            ("node2", TargetType.ENDPOINT, Protocol.HTTP): ProbeStatus.REFUSED,
            ("node3", TargetType.NODE, Protocol.HTTP): TIMEOUT,
            ("node3", TargetType.ENDPOINT, Protocol.HTTP): TIMEOUT,
        }
    )


LOCAL_DUAL = LocalNode("lab1", "node1", "10.77.0.1", "10.78.1.2", "fd77::1", "fd78:1::2")
TARGETS_DUAL = (
    Target("lab1", "node2", "10.77.0.2", "10.78.2.2", "fd77::2", "fd78:2::2"),
    Target("lab1", "node1", "10.77.0.1", "10.78.1.2", "fd77::1", "fd78:1::2"),
    Target("lab1", "node3", "10.77.0.3", "10.78.3.2", "fd77::3", "fd78:3::2"),
)


def dual_stack_ipv6_drop() -> StatusInputs:
    """A dual-stack cluster whose fabric drops IPv6 towards node3: its IPv4 paths are
    OK, both secondary (IPv6) addresses time out, so node3 is unreachable."""
    drop = {(node, t, p): TIMEOUT for node in ("node3",) for t in TargetType for p in Protocol}
    return _inputs({}, local=LOCAL_DUAL, targets=TARGETS_DUAL, secondary_fault=drop)


def dual_stack_healthy() -> StatusInputs:
    return _inputs({}, local=LOCAL_DUAL, targets=TARGETS_DUAL)


def mtu_blackhole() -> StatusInputs:
    """The MTU probe runs (1500 B, don't fragment); big packets to node3 are dropped:
    its small probes pass, its `ICMP 1500 B DF` path times out, it stays reachable."""
    return _inputs({("node3", TargetType.NODE, Protocol.ICMP_DF): TIMEOUT}, mtu_probe=True)


def l4_blocked() -> StatusInputs:
    """The UDP echo and TCP connects to ports 22 and 10250 run; UDP to node2 is lost and
    nothing listens on node3's port 10250: both stay reachable (ICMP and HTTP pass)."""
    return _inputs(
        {
            ("node2", TargetType.NODE, Protocol.UDP): TIMEOUT,
            ("node3", TargetType.NODE, Protocol.TCP, 10250): ProbeStatus.REFUSED,
        },
        l4=True,
    )


def etcd_down() -> StatusInputs:
    return _inputs({}, etcd=EtcdState(up=False, since=NOW - 42, last_error="connection refused"))


def lost_probe() -> StatusInputs:
    """One ICMP probe to node3 was lost in the newest round: the agent's verdict is
    `suspect` (for 3 s), not `unreachable`; every other path is OK."""
    fault = {("node3", TargetType.NODE, Protocol.ICMP): TIMEOUT}
    verdicts = PathVerdicts(interval_s=INTERVAL_S, failing_observers=lambda cluster, node: 0)
    verdicts.finish_round(TARGETS)
    for round_index in range(ROUNDS):
        started_at = PROBE_TIME - (ROUNDS - 1 - round_index) * INTERVAL_S
        for target in TARGETS:
            for target_type in TargetType:
                for protocol in REACHABILITY_PROTOCOLS:
                    failing = (
                        round_index == ROUNDS - 1 and (target.node, target_type, protocol) in fault
                    )
                    path = PathKey(target.cluster, target.node, target_type, protocol)
                    verdicts.observe(path, ok=not failing, now=started_at)
    inputs = _inputs(fault)
    book = StatsBook()
    for round_index in range(ROUNDS):  # only the newest round fails
        started_at = PROBE_TIME - (ROUNDS - 1 - round_index) * INTERVAL_S
        reports = []
        for target in TARGETS:
            for target_type in TargetType:
                ip = target.address(target_type)
                assert ip is not None
                for protocol in REACHABILITY_PROTOCOLS:
                    path = PathKey(target.cluster, target.node, target_type, protocol)
                    if round_index == ROUNDS - 1 and (target.node, target_type, protocol) in fault:
                        result = _failed(path, TIMEOUT, started_at)
                    else:
                        result = _ok(path, round_index, started_at)
                    reports.append(PathReport(path, ip, result))
        book.record(RoundReport(started_at, 0.8, TARGETS, tuple(reports)))
    return replace(inputs, summaries=book.summaries(), verdicts=verdicts.snapshot())


# What node2, the aggregator of lab1, published for agent_down: every observer's view.
AGENT_DOWN_SUMMARY = ClusterSummary(
    cluster="lab1",
    aggregator="node2",
    generated_at=NOW - 12,
    nodes=NodeCounts(reachable=2, unreachable=1, suspect=0, unknown=0),
    observers_min=2,
    observers_median=2.0,
    failing_observers={"lab1/node3": 2},
    findings=(
        SummaryFinding(
            kind="agent-down",
            nodes=("lab1/node3",),
            confidence=0.75,
            since=NOW - 40,
            evidence="its NodeIP answers ICMP but HTTP to its agent fails from 2 of 2 "
            "observers; its report is stale",
        ),
    ),
)


def agent_down_summary() -> StatusInputs:
    """agent_down, with lab1's summary (its aggregator's verdict and finding) and a
    meshed lab2 that has no summary yet (this node's own view of it, said as such)."""
    return replace(
        agent_down(),
        cluster_summaries={"lab1": AGENT_DOWN_SUMMARY},
        verdict_clusters=("lab1", "lab2"),
    )


def agent_down_in_maintenance() -> StatusInputs:
    """agent_down, but node3 is in planned maintenance: the summary counts it apart with
    its own state and window, its finding expected (the reason is anyone's: escaped)."""
    summary = replace(
        AGENT_DOWN_SUMMARY,
        nodes=NodeCounts(reachable=2, maintenance=1),
        findings=tuple(replace(f, expected=True) for f in AGENT_DOWN_SUMMARY.findings),
        discounted={"lab1/node3": DiscountedObserver("maintenance", 2, 2, 0, 2)},
        maintenance={
            "lab1/node3": MaintenanceNote(
                "unreachable", NOW + 5400, "kernel \x1b[31mupgrade CHG-1234", "alice@bastion"
            )
        },
    )
    return replace(agent_down(), cluster_summaries={"lab1": summary}, verdict_clusters=("lab1",))


def never_probed() -> StatusInputs:
    """The first seconds of an agent: etcd not reached yet, the first round running."""
    return StatusInputs(
        local=LOCAL,
        targets=(),
        summaries={},
        probe_time=None,
        probe_interval_s=INTERVAL_S,
        etcd=EtcdState(up=False, since=NOW - 1),
        round=RoundState(running=True),
        now=NOW,
    )


def subset_plan() -> StatusInputs:
    """Subset probing in a 99-node cluster: the same 3 targets (itself and 2 others,
    k = 2), one of them with its endpoint failing; the plan of the round is known."""
    plan = PlanInfo(
        epoch=int(PROBE_TIME // 60), k=2, rotation_rounds=6, full_mesh=False,
        full_mesh_max_nodes=16, nodes=99,
    )  # fmt: skip
    inputs = endpoint_forward_drop()
    return dataclasses.replace(inputs, plan=plan)


def small_full_mesh() -> StatusInputs:
    """3 nodes, k = 5: a full mesh, the line keeps its cilium-health name."""
    plan = PlanInfo(int(PROBE_TIME // 60), 5, 6, full_mesh=False, full_mesh_max_nodes=16, nodes=3)
    return dataclasses.replace(healthy(), plan=plan)


ONE_NODE_SUMMARY = ClusterSummary(
    cluster="lab1",
    aggregator="node1",
    generated_at=NOW - 2,
    nodes=NodeCounts(reachable=0, unreachable=0, suspect=0, unknown=1),
    observers_min=0,
    observers_median=0.0,
    failing_observers={},
    findings=(),
)


def one_node() -> StatusInputs:
    """A cluster of one node: its aggregator's summary counts it, nobody observes it
    (no other node): the verdict says so instead of `0/1 reachable (0 observers)`."""
    return replace(
        never_probed(),
        probe_time=PROBE_TIME,
        etcd=EtcdState(up=True),
        round=RoundState(running=False),
        cluster_summaries={"lab1": ONE_NODE_SUMMARY},
        verdict_clusters=("lab1",),
    )


def egress_blocked_here() -> StatusInputs:
    """This node (node1) cannot reach out: its own probes of node2 and node3 time out on
    every path, while both reach it; the aggregator's summary, built from such reports
    by the real matrix, diagnosis and summary, discounts node1 and names it."""
    everything = {
        (node, target_type, protocol): TIMEOUT
        for node in ("node2", "node3")
        for target_type in TargetType
        for protocol in REACHABILITY_PROTOCOLS
    }
    reports = matrix_stories.full_mesh(
        lambda source, _: source == "lab1/node1",
        degraded=["lab1/node1"],
        nodes=matrix_stories.NODES3,
    )
    matrix = build_matrix(reports, now=matrix_stories.NOW, source_clusters=["lab1"])
    summary = build_summary(
        matrix, diagnose(matrix_view(matrix)), cluster="lab1", aggregator="node2"
    )
    shift = NOW - 2 - matrix_stories.NOW  # the matrix stories' time -> this story's
    summary = replace(
        summary,
        generated_at=summary.generated_at + shift,
        findings=tuple(replace(f, since=f.since + shift) for f in summary.findings),
    )
    return replace(
        _inputs(everything),
        cluster_summaries={"lab1": summary},
        verdict_clusters=("lab1",),
    )


STORIES: dict[str, Callable[[], StatusInputs]] = {
    "healthy": healthy,
    "endpoint_forward_drop": endpoint_forward_drop,
    "icmp_drop": icmp_drop,
    "agent_down": agent_down,
    "etcd_down": etcd_down,
    "lost_probe": lost_probe,
    "dual_stack_healthy": dual_stack_healthy,
    "dual_stack_ipv6_drop": dual_stack_ipv6_drop,
    "never_probed": never_probed,
    "agent_down_summary": agent_down_summary,
    "agent_down_in_maintenance": agent_down_in_maintenance,
    "subset_plan": subset_plan,
    "small_full_mesh": small_full_mesh,
    "mtu_blackhole": mtu_blackhole,
    "l4_blocked": l4_blocked,
    "one_node": one_node,
    "egress_blocked_here": egress_blocked_here,
}
