"""The agent's Prometheus metrics (docs/metrics.md), named after Cilium's node health ones.

    metrics = agent_metrics(registry, source_cluster="lab1", source_node="node1")
    metrics.observe_round(report)                        # after each round
    metrics.sync_connectivity(probe_set, book.summaries())  # after each round / set change
    publisher = Publisher(..., metrics=metrics.writes_of("health"))  # handles, given out

`sync_connectivity` sets the status gauges (exactly one of reachable / unreachable /
unknown is 1 per path, like Cilium), the unreachable counts and the paths by status, and
removes every series of targets that left the probe set. Reachability follows
meshhealth.documents.status, so the metrics and `meshhealth status` never disagree.

Cardinality is O(K) per agent: per-target series (status gauges, latency histograms)
exist only for the targets of the last round (the plan's K direct targets and the node
itself), the rest is a fixed number of series (docs/metrics.md, "Cardinality").
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from meshhealth import __version__, defaults
from meshhealth.documents.status import (
    NO_VERDICTS,
    Verdicts,
    combined_state,
    path_state,
)
from meshhealth.metrics import Counter, CounterSeries, Gauge, Histogram, Registry
from meshhealth.model import (
    PATH_STATES,
    REACHABILITY_PROTOCOLS,
    PathKey,
    PathSummary,
    Protocol,
    RoundReport,
    Target,
    TargetType,
    ip_family,
    protocol_name,
    tcp_ports_of,
)
from meshhealth.runtime_metrics import runtime_metrics
from meshhealth.wire.summary import ClusterSummary

TARGET_LABELS = (
    "source_cluster",
    "source_node",
    "target_cluster",
    "target_node",
    "target_type",
    "protocol",
    "family",  # ipv4 | ipv6: which of a dual-stack target's addresses
)
LATENCY_BUCKETS_S = defaults.LATENCY_BUCKETS_S
ROUND_BUCKETS_S = defaults.ROUND_BUCKETS_S


@dataclass(frozen=True, slots=True)
class WriteCounters:
    """Values of one kind written to etcd, their bytes and the writes that failed (a
    component's own handles, its only count of them; the defaults are unregistered
    series, for components built without a registry)."""

    writes: CounterSeries = field(default_factory=CounterSeries)
    write_bytes: CounterSeries = field(default_factory=CounterSeries)
    write_errors: CounterSeries = field(default_factory=CounterSeries)

    def count(self, size: int) -> None:
        self.writes.inc()
        self.write_bytes.inc(size)

    def count_error(self) -> None:
        self.write_errors.inc()


# Labels of the indirect probe counters (docs/indirect-probes.md).
INDIRECT_REFUSAL_REASONS = ("unauthorised", "rate", "malformed", "unknown-target", "busy")
INDIRECT_REQUEST_OUTCOMES = ("answered", "refused", "error", "timeout")
INDIRECT_CONCLUSIONS = ("path-broken", "target-down", "no-answer", "no-helper")


def _by_label(
    family: Counter | None, label: str, values: tuple[str, ...]
) -> dict[str, CounterSeries]:
    if family is None:
        return {value: CounterSeries() for value in values}
    return {value: family.labels(**{label: value}) for value in values}


@dataclass(frozen=True, slots=True)
class IndirectCounters:
    """The handles of indirect probes: served and refused (helper side), requests sent
    by outcome and failed paths checked by conclusion (requester side)."""

    served: CounterSeries
    refused: dict[str, CounterSeries]  # by INDIRECT_REFUSAL_REASONS
    sent: dict[str, CounterSeries]  # by INDIRECT_REQUEST_OUTCOMES
    checks: dict[str, CounterSeries]  # by INDIRECT_CONCLUSIONS

    @classmethod
    def unregistered(cls) -> IndirectCounters:
        """Series that count but are not exposed (components built without a registry)."""
        return cls(
            CounterSeries(),
            _by_label(None, "reason", INDIRECT_REFUSAL_REASONS),
            _by_label(None, "outcome", INDIRECT_REQUEST_OUTCOMES),
            _by_label(None, "conclusion", INDIRECT_CONCLUSIONS),
        )


@dataclass(frozen=True, slots=True)
class AgentMetrics:
    source_cluster: str
    source_node: str
    connectivity_status: Gauge
    connectivity_latency: Histogram
    unreachable_nodes: Gauge
    unreachable_health_endpoints: Gauge
    suspect_nodes: Gauge
    local_health_score: Gauge
    probe_targets: Gauge
    probe_paths: Gauge  # {status}: this agent's paths by status, O(1) series
    rounds: Counter
    round_duration: Histogram
    probes_in_flight: Gauge
    etcd_up: Gauge  # {cluster}
    etcd_errors: Counter  # {cluster}
    kvstore_invalid_values: Counter  # {kind}: nodes | ip | health | cluster-config
    route_cidrs_refused: Counter  # {reason}: route_policy.REFUSAL_CODES
    node_addresses_refused: Counter  # {reason}: node_address_policy.REFUSAL_CODES
    endpoint_restarts: Counter
    responder_refused: Counter  # {reason}: connections the /hello responder closed at once
    udp_echo_answered: Counter  # datagrams the UDP echo responder answered
    udp_echo_refused: Counter  # {reason}: datagrams it dropped unanswered
    agent_down_nodes: Gauge
    agent_down_dropped: Counter
    build_info: Gauge
    kvstore_writes: Counter  # {key_kind}: health | cluster-config
    kvstore_write_bytes: Counter  # {key_kind}
    kvstore_write_errors: Counter  # {key_kind}
    indirect: IndirectCounters
    finding: Gauge  # {kind, node, expected}: 1 per current finding of a followed summary
    cluster_nodes: Gauge  # {cluster, state}: the cluster verdict of its summary
    node_state: Gauge  # {cluster, node, state}: 1 per node of a summary not reachable
    node_maintenance: Gauge  # {cluster, node}: 1 per node of a summary in maintenance
    discounted_observer: Gauge  # {source_cluster, source_node, reason}: 1 per discounted
    aggregating: Gauge  # 1 while this agent is its cluster's aggregator
    plan_targets: Gauge  # the probe plan (docs/scale.md): own targets this epoch
    plan_nodes: Gauge  # nodes in the plan
    plan_epoch: Gauge  # the epoch of the last round

    def writes_of(self, key_kind: str) -> WriteCounters:
        """The write counters of one key kind (`health`, `cluster-config`)."""
        return WriteCounters(
            self.kvstore_writes.labels(key_kind=key_kind),
            self.kvstore_write_bytes.labels(key_kind=key_kind),
            self.kvstore_write_errors.labels(key_kind=key_kind),
        )

    def invalid_values_of(self, kind: str) -> CounterSeries:
        """Values of one kind skipped as invalid (`ip`, `nodes`, `health`)."""
        return self.kvstore_invalid_values.labels(kind=kind)

    def _path_labels(self, path: PathKey, ip: str) -> dict[str, str]:
        return {
            "source_cluster": self.source_cluster,
            "source_node": self.source_node,
            "target_cluster": path.cluster,
            "target_node": path.node,
            "target_type": path.target_type.value,
            "protocol": protocol_name(path.protocol, path.port),
            "family": ip_family(ip),
        }

    def observe_round(self, report: RoundReport) -> None:
        """One finished round: its duration, its plan and every RTT it measured."""
        self.rounds.inc()
        self.round_duration.observe(report.duration_s)
        if report.plan is not None:
            self.plan_targets.set(report.plan.targets_per_node)
            self.plan_nodes.set(report.plan.nodes)
            self.plan_epoch.set(report.plan.epoch)
        for path_report in report.paths:
            rtt_s = path_report.result.rtt_s
            if rtt_s is not None:
                labels = self._path_labels(path_report.path, path_report.ip)
                self.connectivity_latency.labels(**labels).observe(rtt_s)

    def sync_connectivity(
        self,
        targets: Iterable[Target],
        summaries: Mapping[PathKey, PathSummary],
        verdicts: Verdicts = NO_VERDICTS,
    ) -> None:
        """Status gauges and unreachable counts for the current probe set (a path's
        state is its suspicion verdict); series of targets (or health endpoints) that
        are gone are removed."""
        targets = list(targets)
        # (protocol, port) of every path kind: each protocol, and TCP once per probed port
        kinds: list[tuple[Protocol, int]] = [(p, 0) for p in Protocol if p is not Protocol.TCP]
        kinds += [(Protocol.TCP, port) for port in tcp_ports_of(summaries)]
        unreachable_nodes = unreachable_endpoints = suspect_nodes = 0
        paths_by_state = dict.fromkeys(PATH_STATES, 0)
        wanted: set[tuple[str, str, str, str]] = set()
        for target in targets:
            for target_type in TargetType:
                states = []  # both families of a dual-stack target count, as in status
                for secondary in (False, True):
                    ip = target.address(target_type, secondary)
                    if ip is None:
                        continue
                    wanted.add((target.cluster, target.node, target_type.value, ip_family(ip)))
                    for protocol, port in kinds:
                        path = PathKey(
                            target.cluster, target.node, target_type, protocol, secondary, port
                        )
                        summary = summaries.get(path)
                        if protocol not in REACHABILITY_PROTOCOLS and summary is None:
                            continue  # the MTU probe's series: only where it is probed
                        state = path_state(summary, verdicts.get(path))
                        if protocol in REACHABILITY_PROTOCOLS:  # a lost big probe: no outage
                            states.append(state)
                        paths_by_state[state] += 1
                        labels = self._path_labels(path, ip)
                        for status in PATH_STATES:
                            self.connectivity_status.labels(**labels, status=status).set(
                                1 if status == state else 0
                            )
                if not states:
                    continue
                combined = combined_state(states)
                if combined == "unreachable":
                    if target_type is TargetType.NODE:
                        unreachable_nodes += 1
                    else:
                        unreachable_endpoints += 1
                elif combined == "suspect" and target_type is TargetType.NODE:
                    suspect_nodes += 1
        self.unreachable_nodes.set(unreachable_nodes)
        self.suspect_nodes.set(suspect_nodes)
        self.unreachable_health_endpoints.set(unreachable_endpoints)
        self.probe_targets.set(len(targets))
        for status, count in paths_by_state.items():
            self.probe_paths.labels(status=status).set(count)
        self._remove_series_except(wanted)

    def sync_summaries(self, summaries: Mapping[str, ClusterSummary]) -> None:
        """The findings and node counts of every followed cluster's summary; the series
        of a finding that ended (or of a cluster without a summary) are removed."""
        findings: set[tuple[str, str, str]] = set()
        for summary in summaries.values():
            for finding in summary.findings:
                expected = "true" if finding.expected else "false"
                findings.update((finding.kind, node, expected) for node in finding.nodes)
        _set_exactly(self.finding, findings, ("kind", "node", "expected"))
        for summary in summaries.values():
            counts = summary.nodes
            for state, count in (
                ("reachable", counts.reachable),
                ("unreachable", counts.unreachable),
                ("suspect", counts.suspect),
                ("unknown", counts.unknown),
                ("maintenance", counts.maintenance),
            ):
                self.cluster_nodes.labels(cluster=summary.cluster, state=state).set(count)
        for cluster in {key[0] for key in self.cluster_nodes.series()} - set(summaries):
            self.cluster_nodes.remove_matching(cluster=cluster)
        states = {
            (summary.cluster, node, state)
            for summary in summaries.values()
            for node, state in summary.node_states.items()
        }
        _set_exactly(self.node_state, states, ("cluster", "node", "state"))
        in_maintenance = {
            (summary.cluster, node)
            for summary in summaries.values()
            for node in summary.maintenance
        }
        _set_exactly(self.node_maintenance, in_maintenance, ("cluster", "node"))
        discounted = {
            (*name.split("/", 1), observer.reason)
            for summary in summaries.values()
            for name, observer in summary.discounted.items()
        }
        _set_exactly(
            self.discounted_observer, discounted, ("source_cluster", "source_node", "reason")
        )

    def _remove_series_except(self, wanted: set[tuple[str, str, str, str]]) -> None:
        # Label order of TARGET_LABELS: target_cluster, target_node, target_type at 2..4,
        # family at 6.
        for metric in (self.connectivity_status, self.connectivity_latency):
            keys = {(*key[2:5], key[6]) for key in metric.series()}
            for cluster, node, target_type, family in keys - wanted:
                metric.remove_matching(
                    target_cluster=cluster,
                    target_node=node,
                    target_type=target_type,
                    family=family,
                )


def agent_metrics(registry: Registry, *, source_cluster: str, source_node: str) -> AgentMetrics:
    """Register the agent's families in `registry`; the holder updates them. The
    process's own families (meshhealth/runtime_metrics.py) come last, read at scrape."""
    build_info = registry.gauge(
        "meshhealth_build_info",
        "Always 1; the labels say which meshhealth and Python run.",
        ("version", "python"),
    )
    build_info.labels(version=__version__, python=platform.python_version()).set(1)
    indirect = IndirectCounters(
        served=registry.counter(
            "meshhealth_indirect_served_total",
            "Indirect probe requests of peers this agent served (probed and answered).",
        ).labels(),
        refused=_by_label(
            registry.counter(
                "meshhealth_indirect_refused_total",
                "Indirect probe requests of peers refused without a probe, by reason.",
                ("reason",),
            ),
            "reason",
            INDIRECT_REFUSAL_REASONS,
        ),
        sent=_by_label(
            registry.counter(
                "meshhealth_indirect_requests_total",
                "Indirect probe requests this agent sent to helpers, by outcome.",
                ("outcome",),
            ),
            "outcome",
            INDIRECT_REQUEST_OUTCOMES,
        ),
        checks=_by_label(
            registry.counter(
                "meshhealth_indirect_checks_total",
                "Failed direct paths checked through helpers, by conclusion.",
                ("conclusion",),
            ),
            "conclusion",
            INDIRECT_CONCLUSIONS,
        ),
    )
    metrics = AgentMetrics(
        source_cluster=source_cluster,
        source_node=source_node,
        connectivity_status=registry.gauge(
            "meshhealth_node_connectivity_status",
            "1 for the path's current status (reachable, suspect, unreachable or unknown), "
            "0 for the others.",
            (*TARGET_LABELS, "status"),
        ),
        connectivity_latency=registry.histogram(
            "meshhealth_node_connectivity_latency_seconds",
            "Round-trip time of successful probes, per path.",
            TARGET_LABELS,
            buckets=LATENCY_BUCKETS_S,
        ),
        unreachable_nodes=registry.gauge(
            "meshhealth_unreachable_nodes",
            "Nodes whose NodeIP is unreachable on ICMP or HTTP (suspicion over).",
        ),
        local_health_score=registry.gauge(
            "meshhealth_local_health_score",
            "This agent's own health score: 0 well .. 7; from 2 it is degraded and "
            "stretches its timeouts (event-loop lag, most targets failing, etcd down).",
        ),
        suspect_nodes=registry.gauge(
            "meshhealth_suspect_nodes",
            "Nodes whose NodeIP is suspect on ICMP or HTTP (failing, not long enough yet).",
        ),
        unreachable_health_endpoints=registry.gauge(
            "meshhealth_unreachable_health_endpoints",
            "Health endpoints whose HealthIP fails on ICMP or HTTP (newest probe).",
        ),
        probe_targets=registry.gauge(
            "meshhealth_probe_targets", "Nodes in this agent's probe set."
        ),
        probe_paths=registry.gauge(
            "meshhealth_probe_paths",
            "Paths this agent probes, by their status (reachable, suspect, unreachable, unknown).",
            ("status",),
        ),
        rounds=registry.counter("meshhealth_rounds_total", "Probe rounds finished."),
        round_duration=registry.histogram(
            "meshhealth_round_duration_seconds",
            "Time from the start of a probe round to its last result.",
            buckets=ROUND_BUCKETS_S,
        ),
        probes_in_flight=registry.gauge(
            "meshhealth_probes_in_flight", "Probes started and not finished yet."
        ),
        etcd_up=registry.gauge(
            "meshhealth_etcd_up", "1 when the cluster's etcd answers, 0 when not.", ("cluster",)
        ),
        etcd_errors=registry.counter(
            "meshhealth_etcd_errors_total",
            "etcd requests that failed (timeouts, unavailable, lost leases).",
            ("cluster",),
        ),
        kvstore_invalid_values=registry.counter(
            "meshhealth_kvstore_invalid_values_total",
            "Values read from etcd that did not decode or validate and were skipped.",
            ("kind",),
        ),
        route_cidrs_refused=registry.counter(
            "meshhealth_route_cidrs_refused_total",
            "Peer CIDRs not routed by the route policy (--route-cidrs), once per node, CIDR "
            "and reason.",
            ("reason",),
        ),
        node_addresses_refused=registry.counter(
            "meshhealth_node_addresses_refused_total",
            "Peer NodeIPs and HealthIPs refused as probe targets and indirect-probe "
            "requesters, once per node, address and reason.",
            ("reason",),
        ),
        endpoint_restarts=registry.counter(
            "meshhealth_endpoint_restarts_total",
            "Times the health endpoint (responder) was restarted after it died.",
        ),
        responder_refused=registry.counter(
            "meshhealth_responder_connections_refused_total",
            "Connections the /hello responder (NodeIP:4240) closed at once: full (every slot "
            "busy), per-source (that address held its share), reserved (only the slots kept "
            "for registered nodes were left). Rising: someone holds connections to it.",
            ("reason",),
        ),
        udp_echo_answered=registry.counter(
            "meshhealth_udp_echo_answered_total",
            "Echo datagrams the UDP echo responder (NodeIP:4240/udp) answered: peers' "
            "node/udp probes.",
        ),
        udp_echo_refused=registry.counter(
            "meshhealth_udp_echo_refused_total",
            "Datagrams the UDP echo responder dropped unanswered: malformed (not an echo "
            "request of an answered size), unregistered (not from a registered node's "
            "NodeIP), rate (past its source's or the total rate). Rising: someone sends it "
            "datagrams that are not peers' probes.",
            ("reason",),
        ),
        agent_down_nodes=registry.gauge(
            "meshhealth_agent_down_nodes",
            "Nodes kept in view as agent-down: their agent's lease expired without a clean "
            "leave, less than the retention time ago.",
        ),
        agent_down_dropped=registry.counter(
            "meshhealth_agent_down_dropped_total",
            "Agent-down nodes that left this agent's view when their retention time ended.",
        ),
        build_info=build_info,
        kvstore_writes=registry.counter(
            "meshhealth_kvstore_writes_total",
            "Values this agent wrote to etcd (health: its published results, written on "
            "status changes and a liveness refresh once a minute).",
            ("key_kind",),
        ),
        kvstore_write_bytes=registry.counter(
            "meshhealth_kvstore_write_bytes_total",
            "Bytes of the values this agent wrote to etcd.",
            ("key_kind",),
        ),
        kvstore_write_errors=registry.counter(
            "meshhealth_kvstore_write_errors_total",
            "Writes to etcd that failed (retried with back-off).",
            ("key_kind",),
        ),
        indirect=indirect,
        finding=registry.gauge(
            "meshhealth_finding",
            "1 per current diagnosis finding (kind) and culprit node (cluster/node), from "
            "the cluster summaries this agent follows; the series goes when the finding ends. "
            'expected="true": every culprit is in planned maintenance (leave it out of alerts).',
            ("kind", "node", "expected"),
        ),
        cluster_nodes=registry.gauge(
            "meshhealth_cluster_nodes",
            "Nodes of a cluster by verdict (reachable, unreachable, suspect, unknown) and in "
            "planned maintenance (maintenance: in no verdict), from its aggregator's summary.",
            ("cluster", "state"),
        ),
        node_state=registry.gauge(
            "meshhealth_cluster_node_state",
            "1 per node that the cluster's verdict does not find reachable (state: "
            "unreachable, suspect, unknown), from its aggregator's summary; reachable nodes "
            "have no series, so the count stays with the faults, not the cluster's size.",
            ("cluster", "node", "state"),
        ),
        node_maintenance=registry.gauge(
            "meshhealth_node_maintenance",
            "1 per node (cluster/node) in planned maintenance (`meshhealth maintenance start`), "
            "from its cluster's summary; the series goes when the window ends. Join it on "
            "cluster, node (or, relabelled, on target_cluster, target_node) to leave the "
            "node out of alerts.",
            ("cluster", "node"),
        ),
        discounted_observer=registry.gauge(
            "meshhealth_discounted_observer",
            "1 per observer whose own row explains its failures (reason: the finding that "
            "names it, or degraded), from its cluster's summary: its failures do not count "
            "against the nodes it fails to reach. Join it on source_cluster, source_node to "
            "leave its per-path series out of alerts.",
            ("source_cluster", "source_node", "reason"),
        ),
        aggregating=registry.gauge(
            "meshhealth_cluster_aggregator",
            "1 while this agent is its cluster's aggregator (reads every health report and "
            "publishes the summary), else 0.",
        ),
        plan_targets=registry.gauge(
            "meshhealth_probe_plan_targets",
            "Nodes this agent probes in the probe plan's current epoch, itself not counted.",
        ),
        plan_nodes=registry.gauge(
            "meshhealth_probe_plan_nodes",
            "Nodes in this agent's probe plan (its cluster, admitted remotes, itself).",
        ),
        plan_epoch=registry.gauge(
            "meshhealth_probe_plan_epoch",
            "Epoch of the probe plan the last round followed (rotation x interval long).",
        ),
    )
    runtime_metrics(registry)  # process_*, python_gc_*, meshhealth_trio_tasks: read at scrape
    return metrics


def _set_exactly(
    gauge: Gauge, series: AbstractSet[tuple[str, ...]], label_names: tuple[str, ...]
) -> None:
    """`gauge` is 1 for each label tuple of `series` and has no other series."""
    for values in series:
        gauge.labels(**dict(zip(label_names, values, strict=True))).set(1)
    for values in [key for key in gauge.series() if key not in series]:
        gauge.remove(**dict(zip(label_names, values, strict=True)))
