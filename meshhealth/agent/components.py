"""The agent's components, built from its configuration and wired to each other.

    parts = build_components(config, etcd, pinger, mesh_specs)
    # meshhealth.agent.app starts them, in one nursery, in the order users need

`AgentComponents` names every part (docs/architecture.md has the map of who holds
what). `build_components` builds each part once, with everything it needs, in an order
without cycles; nothing is set on a component after it was built. Every metric handle is
given to the component that counts; what other packages count is read at scrape time
(metric_readings).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from meshhealth import __version__, defaults
from meshhealth.agent.admin_handler import AgentAdminHandler
from meshhealth.agent.agent_metrics import AgentMetrics, agent_metrics
from meshhealth.agent.cluster_view.aggregator import Aggregator
from meshhealth.agent.cluster_view.election import AggregatorElection
from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.config.agent_config import AgentConfig
from meshhealth.agent.health_endpoint.route_policy import parse_networks
from meshhealth.agent.health_endpoint.routes import RouteProgrammer
from meshhealth.agent.health_endpoint.supervisor import HealthEndpoint, endpoint_from_config
from meshhealth.agent.indirect.policy import IndirectCheck, check_notes
from meshhealth.agent.indirect.probes import IndirectProbes, confirm_suspicion, make_asker
from meshhealth.agent.indirect.server import IndirectServer
from meshhealth.agent.local_health_monitor import LocalHealthMonitor
from meshhealth.agent.matrix_reader import MatrixReader
from meshhealth.agent.membership.clustermesh import ClusterMesh, RemoteSpec, default_cluster_id
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.peer_nodes import PeerNodes
from meshhealth.agent.membership.probe_targets import PlanSettings, ProbeTargets
from meshhealth.agent.membership.registrar import Registrar
from meshhealth.agent.membership.retained_nodes import RetainedNodes
from meshhealth.agent.metric_readings import read_at_scrape
from meshhealth.agent.node_agent import NodeAgent
from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.path_rollups import PathRollups
from meshhealth.agent.path_tracer import PathTracer
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.prober_loop import ProberLoop, RoundProgress
from meshhealth.agent.reporting.publisher import Publisher
from meshhealth.agent.reporting.rollup_publisher import RollupPublisher
from meshhealth.agent.serving.feed_server import FeedHub
from meshhealth.agent.status_source import AgentIdentity, StatusSource
from meshhealth.documents.status import LocalNode
from meshhealth.kvstore import Etcd
from meshhealth.metrics import Registry
from meshhealth.model import ClusterConfig, Node, PathKey, PathReport, RoundReport, Target
from meshhealth.node_address_policy import NodeAddressPolicy
from meshhealth.probe.icmp import Pinger
from meshhealth.probe.responder import ResponderStats
from meshhealth.probe.scheduler import DEADLINE_MARGIN_S, icmp_budget_s, run_round
from meshhealth.probe.udp_responder import UdpEchoStats


@dataclass(frozen=True, slots=True)
class AgentComponents:
    """Everything the agent runs (see the module docstring for who holds what)."""

    config: AgentConfig
    identity: AgentIdentity
    registry: Registry
    metrics: AgentMetrics
    registrar: Registrar
    discovery: Discovery
    retained: RetainedNodes
    mesh: ClusterMesh
    probe_targets: ProbeTargets
    publisher: Publisher
    rollups: RollupPublisher
    agent: NodeAgent
    status: StatusSource
    matrix: MatrixReader
    feed: FeedHub
    loop: ProberLoop
    admin: AgentAdminHandler
    responder_stats: ResponderStats
    udp_echo_stats: UdpEchoStats
    endpoint: HealthEndpoint | None
    routes: RouteProgrammer | None
    peer_nodes: PeerNodes | None
    indirect_server: IndirectServer
    indirect: IndirectProbes
    election: AggregatorElection
    aggregator: Aggregator
    summaries: SummaryFollower

    @property
    def indirect_budget_s(self) -> float:
        """The longest a helper's one-target probe takes (the responder route's budget)."""
        return probe_budget_s(self.config)


def probe_budget_s(config: AgentConfig) -> float:
    """How long one target's probes take at most: the ICMP probe's budget (the longer
    one) and the scheduler's margin."""
    budget_s = icmp_budget_s(config.icmp_count, defaults.ICMP_INTERVAL_S, config.timeout_s)
    return max(budget_s, config.timeout_s) + DEADLINE_MARGIN_S


def build_indirect(
    config: AgentConfig,
    pinger: Pinger | None,
    *,
    probe_targets: ProbeTargets,
    metrics: AgentMetrics,
    results: ProbeResults,
    matrix: MatrixReader,
    health: LocalHealthMonitor,
) -> tuple[IndirectServer, IndirectProbes]:
    """Both sides of indirect probes (docs/indirect-probes.md)."""

    async def probe_one(target: Target) -> tuple[PathReport, ...]:
        report = await run_round(
            [target],
            pinger=pinger,
            http_port=config.http_port,
            timeout_s=config.timeout_s,
            icmp_count=config.icmp_count,
        )
        return report.paths

    server = IndirectServer(
        own=(config.cluster, config.node),
        registered=probe_targets.nodes,
        probe=probe_one,
        counters=metrics.indirect,
        rate_per_s=config.indirect_rate,
    )

    def show(checks: Mapping[PathKey, IndirectCheck]) -> None:
        results.set_indirect(check_notes(checks))

    requester = IndirectProbes(
        probe_targets.own,
        live=probe_targets.nodes,
        probers=probe_targets.probers_of,
        ask=make_asker(
            own_ip=config.node_ip, http_port=config.http_port, counters=metrics.indirect
        ),
        deadline_s=probe_budget_s(config) + defaults.INDIRECT_ANSWER_MARGIN_S,
        counters=metrics.indirect,
        helpers=config.indirect_helpers,
        read_matrix=matrix.read,
        matrix_max_age_s=config.interval_s,
        on_checks=show,
        on_check=confirm_suspicion(results.verdicts, lambda: health.fit),
    )
    return server, requester


def node_entry(config: AgentConfig, started_at: float) -> Node:
    """This node as the registrar writes it to etcd."""
    return Node(
        name=config.node,
        cluster=config.cluster,
        node_ip=config.node_ip,
        health_ip=config.health_ip,
        cidrs=config.cidrs,
        health_port=config.http_port,
        version=__version__,
        started_at=started_at,
        node_ip_secondary=config.node_ip_secondary,
        health_ip_secondary=config.health_ip_secondary,
    )


def own_node_ips(config: AgentConfig) -> tuple[str, ...]:
    """This node's NodeIPs (either family): the source of its UDP probes."""
    return tuple(ip for ip in (config.node_ip, config.node_ip_secondary) if ip is not None)


def own_addresses(config: AgentConfig) -> list[str]:
    """This node's NodeIPs and HealthIPs (what no peer's CIDR may cover)."""
    ips = (config.node_ip, config.health_ip, config.node_ip_secondary, config.health_ip_secondary)
    return [ip for ip in ips if ip is not None]


def build_components(
    config: AgentConfig,
    etcd: Etcd,
    pinger: Pinger | None,
    mesh_specs: Sequence[RemoteSpec] = (),
) -> AgentComponents:
    """Build every component; nothing runs yet and nothing touches the network."""
    started_at = time.time()
    local = LocalNode(
        config.cluster,
        config.node,
        config.node_ip,
        config.health_ip,
        config.node_ip_secondary,
        config.health_ip_secondary,
    )
    identity = AgentIdentity(local, started_at, config.interval_s)
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster=config.cluster, source_node=config.node)

    retain = config.agent_down_retention_s > 0
    registrar = Registrar(
        etcd, node_entry(config, started_at), ttl_s=config.lease_ttl_s, retain=retain
    )
    invalid_ip = metrics.invalid_values_of("ip")
    # forged node entries (node_address_policy.py): peers probed and heard from
    address_policy = NodeAddressPolicy.of(config.allowed_node_cidrs, own_node_ip=config.node_ip)
    discovery = Discovery(
        {config.cluster: etcd},
        invalid_metric=invalid_ip,
        address_policy=address_policy,
        refused_metric=metrics.node_addresses_refused,
    )
    retained = RetainedNodes(
        etcd,
        config.cluster,
        config.node,
        discovery,
        retention_s=config.agent_down_retention_s,
        down_gauge=metrics.agent_down_nodes.labels(),
        dropped_counter=metrics.agent_down_dropped.labels(),
    )
    mesh = ClusterMesh(
        etcd,
        ClusterConfig(config.cluster, config.cluster_id or default_cluster_id(config.cluster)),
        mesh_specs,
        mesh_dir=config.mesh_dir,
        config_write_metrics=metrics.writes_of("cluster-config"),
        invalid_ip_metric=invalid_ip,
        agent_down_retention_s=config.agent_down_retention_s,
        address_policy=address_policy,
        refused_address_metric=metrics.node_addresses_refused,
    )
    own = Target(
        config.cluster,
        config.node,
        config.node_ip,
        config.health_ip,
        config.node_ip_secondary,
        config.health_ip_secondary,
    )
    plan = PlanSettings(
        interval_s=config.interval_s, k=config.probe_targets, full_mesh=config.full_mesh
    )
    probe_targets = ProbeTargets(own, etcd, discovery, mesh, plan, retained=retained)
    publisher = Publisher(
        etcd,
        registrar,
        cluster=config.cluster,
        node=config.node,
        interval_s=config.interval_s,
        metrics=metrics.writes_of("health"),
    )

    # The agent's own health first: the aggregator election reads it (an unwell agent
    # gives the claim up).
    health = LocalHealthMonitor(
        etcd_up=lambda: etcd.health.up,
        own=(config.cluster, config.node),
        interval_s=config.interval_s,
    )
    election = AggregatorElection(etcd, registrar, health, cluster=config.cluster, node=config.node)
    aggregator = Aggregator(
        etcd,
        election,
        cluster=config.cluster,
        node=config.node,
        metrics=metrics.writes_of("summary"),
        events_metrics=metrics.writes_of("events"),
        invalid_events=metrics.invalid_values_of("events"),
        registered=discovery,  # only registered nodes' reports count
        events_settle_s=defaults.EVENTS_SETTLE_S,
    )
    metrics.aggregating.labels().read_from(lambda: 1.0 if election.leading else 0.0)
    # The cluster summaries first: a path's verdict reads the other observers' failures.
    summaries = SummaryFollower(
        probe_targets.etcd_sources, invalid_metric=metrics.invalid_values_of("summary")
    )
    # The parts of the agent's rounds, then what reads them (the status, the feed,
    # indirect probes), then the agent that feeds them, then the loop that runs rounds.
    verdicts = PathVerdicts(
        interval_s=config.interval_s, failing_observers=summaries.failing_observers
    )
    results = ProbeResults(local, window=config.stats_window, verdicts=verdicts)
    history = PathHistory()
    rollups = RollupPublisher(
        etcd,
        PathRollups(config.cluster, config.node),
        metrics=metrics.writes_of("rollup"),
        invalid_metric=metrics.invalid_values_of("rollup"),
    )
    progress = RoundProgress()
    status = StatusSource(
        identity,
        results=results,
        progress=progress,
        probe_targets=probe_targets,
        mesh=mesh,
        health=health,
        summaries=summaries,
    )
    feed = FeedHub(results, status.document)
    matrix = MatrixReader(probe_targets, metrics.invalid_values_of("health"))
    indirect_server, indirect = build_indirect(
        config,
        pinger,
        probe_targets=probe_targets,
        metrics=metrics,
        results=results,
        matrix=matrix,
        health=health,
    )
    agent = NodeAgent(
        results,
        history,
        health,
        metrics=metrics,
        publisher=publisher,
        indirect=indirect,
        feed=feed,
        summaries=summaries,
        rollups=rollups,
        tracer=PathTracer(),
    )
    probe_round = partial(
        run_round,
        pinger=pinger,
        http_port=config.http_port,
        spread_s=config.spread_s,
        max_in_flight=config.max_in_flight,
        icmp_count=config.icmp_count,
        on_result=agent.on_result,
        mtu_probe_size=config.mtu_probe_size,
        udp_port=config.udp_port,
        udp_source_ports=config.udp_source_ports,
        source_ips=own_node_ips(config),
        tcp_ports=config.probe_tcp_ports,
    )

    async def stretched_round(targets: Sequence[Target]) -> RoundReport:
        # An unwell agent waits longer for answers (local health awareness).
        return await probe_round(targets, timeout_s=health.timeout_s(config.timeout_s))

    loop = ProberLoop(
        progress,
        probe_set=probe_targets.for_round,
        run_round=stretched_round,
        interval_s=config.interval_s,
        on_round=agent.on_round,
        on_lag=health.note_lag,
    )
    admin = AgentAdminHandler(status, loop=loop, registrar=registrar, matrix=matrix)

    endpoint = endpoint_from_config(config, netns=config.health_netns)
    routes: RouteProgrammer | None = None
    peer_nodes: PeerNodes | None = None
    if config.route_cidrs:  # `CIDR via NodeIP` to every peer, from the node entries
        routes = RouteProgrammer(
            cluster=config.cluster,
            node=config.node,
            own_cidrs=config.cidrs,
            # the route policy (route_policy.py): what a forged node entry may not take
            within=parse_networks(config.route_cidrs_within),
            own_addresses=own_addresses(config),
            etcd_addresses=[endpoint.host for endpoint in etcd.endpoints],
            refused_metric=metrics.route_cidrs_refused,
            next_hop_refusal=address_policy.refusal,  # never via a loopback NodeIP, ...
        )
        peer_nodes = PeerNodes(
            probe_targets.etcd_sources,
            routes.set_peers,
            invalid_metric=metrics.invalid_values_of("nodes"),
        )
    responder_stats = ResponderStats()
    udp_echo_stats = UdpEchoStats()
    read_at_scrape(
        metrics,
        cluster=config.cluster,
        etcd=etcd,
        mesh=mesh,
        endpoint=endpoint,
        pinger=pinger,
        responder=responder_stats,
        udp_echo=udp_echo_stats,
    )
    return AgentComponents(
        config=config,
        identity=identity,
        registry=registry,
        metrics=metrics,
        registrar=registrar,
        discovery=discovery,
        retained=retained,
        mesh=mesh,
        probe_targets=probe_targets,
        publisher=publisher,
        rollups=rollups,
        agent=agent,
        status=status,
        matrix=matrix,
        feed=feed,
        loop=loop,
        admin=admin,
        responder_stats=responder_stats,
        udp_echo_stats=udp_echo_stats,
        endpoint=endpoint,
        routes=routes,
        peer_nodes=peer_nodes,
        indirect_server=indirect_server,
        indirect=indirect,
        election=election,
        aggregator=aggregator,
        summaries=summaries,
    )
