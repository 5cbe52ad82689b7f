"""The agent: the one nursery that owns every task of DESIGN.md.

Start order matters for users: the admin API first (it answers within a second, before
etcd is reachable), then the metrics, the /hello responder, etcd (registrar, discovery,
clustermesh, publisher), the prober loop and the health endpoint. Nothing here waits on
etcd or on a round.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from functools import partial

import trio

from meshhealth import __version__
from meshhealth.agent.agent_metrics import AgentMetrics, agent_metrics
from meshhealth.agent.config import AgentConfig
from meshhealth.agent.health_endpoint.routes import RouteProgrammer
from meshhealth.agent.health_endpoint.supervisor import HealthEndpoint, endpoint_from_config
from meshhealth.agent.membership.clustermesh import (
    ClusterMesh,
    MeshConfigError,
    RemoteSpec,
    default_cluster_id,
    load_remote_specs,
)
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.mesh_status import MeshMetrics, cluster_states
from meshhealth.agent.membership.peer_nodes import PeerNodes
from meshhealth.agent.membership.publisher import Publisher
from meshhealth.agent.membership.registrar import NodeNameTaken, Registrar
from meshhealth.agent.prober_loop import ProberLoop
from meshhealth.agent.serving.admin_api import AdminSocketError, EncodedJson, serve_admin_api
from meshhealth.agent.serving.feed_server import FeedHub, serve_feed_tcp, serve_feed_unix
from meshhealth.agent.serving.metrics_server import serve_metrics
from meshhealth.documents.feed import feed_socket_path
from meshhealth.documents.matrix import MatrixDocument, matrix_document
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    NodesCache,
    RoundState,
    StatusInputs,
    build_healthz_document,
    build_status_document,
    encode_status_document,
)
from meshhealth.documents.status_schema import HealthzDocument, StatusDocument
from meshhealth.kvstore import Etcd, open_etcd
from meshhealth.matrix_source import MatrixSource, read_matrix
from meshhealth.metrics import CounterSeries, Registry
from meshhealth.model import ClusterConfig, Node, PathKey, PathSummary, RoundReport, Target
from meshhealth.probe.icmp import Pinger, PingerPermissionError, open_pinger
from meshhealth.probe.responder import ResponderStats, serve_responder
from meshhealth.probe.scheduler import run_round
from meshhealth.probe.stats import StatsBook

log = logging.getLogger("meshhealth.agent")

METRICS_SYNC_INTERVAL_S = 1.0


class AgentStartError(Exception):
    """The agent cannot run (socket in use, port taken, name taken); one line for users."""


class CounterMirror:
    """Feeds a Prometheus counter from a counter kept elsewhere (an int that grows)."""

    def __init__(self, series: CounterSeries) -> None:
        self.series = series
        self.last = 0

    def update(self, value: int) -> None:
        if value > self.last:
            self.series.inc(value - self.last)
        self.last = max(self.last, value)


class Agent:
    """The running agent's state; also the admin API's handler."""

    def __init__(
        self,
        config: AgentConfig,
        etcd: Etcd,
        pinger: Pinger | None,
        *,
        mesh_specs: Sequence[RemoteSpec] = (),
    ) -> None:
        self.config = config
        self.etcd = etcd
        self.pinger = pinger
        self.started_at = time.time()
        self.local = LocalNode(config.cluster, config.node, config.node_ip, config.health_ip)
        self.node = Node(
            name=config.node,
            cluster=config.cluster,
            node_ip=config.node_ip,
            health_ip=config.health_ip,
            cidrs=config.cidrs,
            health_port=config.http_port,
            version=__version__,
            started_at=self.started_at,
        )
        self.book = StatsBook(config.stats_window)
        # book.summaries() after each round: the book only changes then, and computing it
        # costs ~40 ms at 300 nodes, too much for every GET /v1/status (bench/admin_latency).
        self.summaries: dict[PathKey, PathSummary] = {}
        # `nodes` of the status document (and its JSON), built once per round from the
        # summaries: GET /v1/status only adds the fresh head (bench/admin_latency).
        self.status_nodes = NodesCache(self.local)
        self.registry = Registry()
        self.metrics: AgentMetrics = agent_metrics(
            self.registry, source_cluster=config.cluster, source_node=config.node
        )
        self.registrar = Registrar(etcd, self.node, ttl_s=config.lease_ttl_s)
        self.discovery = Discovery({config.cluster: etcd})
        cluster_id = config.cluster_id or default_cluster_id(config.cluster)
        self.mesh = ClusterMesh(etcd, ClusterConfig(config.cluster, cluster_id), mesh_specs)
        self.mesh_metrics = MeshMetrics(self.metrics, self.mesh)
        self.publisher = Publisher(
            etcd,
            self.registrar,
            cluster=config.cluster,
            node=config.node,
            interval_s=config.interval_s,
            on_write=self._count_health_write,
        )
        self.endpoint: HealthEndpoint | None = endpoint_from_config(
            config, netns=config.health_netns
        )
        # --route-cidrs: `CIDR via NodeIP` to every peer, from the node entries in etcd.
        self.routes: RouteProgrammer | None = None
        self.peer_nodes: PeerNodes | None = None
        if config.route_cidrs:
            self.routes = RouteProgrammer(
                cluster=config.cluster, node=config.node, own_cidrs=config.cidrs
            )
            self.peer_nodes = PeerNodes(self._node_sources, self.discovery, self.routes.set_peers)
        self.responder_stats = ResponderStats()
        # `meshhealth watch`
        self.feed = FeedHub(self.status_document, window=config.stats_window)
        self.loop = ProberLoop(
            probe_set=self.targets,
            run_round=self._run_round,
            interval_s=config.interval_s,
            on_round=self._on_round,
        )
        self._mirrors = {
            "etcd_errors": CounterMirror(self.metrics.etcd_errors.labels(cluster=config.cluster)),
            "invalid_ip": CounterMirror(self.metrics.kvstore_invalid_values.labels(kind="ip")),
            "invalid_nodes": CounterMirror(
                self.metrics.kvstore_invalid_values.labels(kind="nodes")
            ),
            "endpoint_restarts": CounterMirror(self.metrics.endpoint_restarts.labels()),
        }

    # --- the probe set and rounds -----------------------------------------------------

    def _node_sources(self) -> list[tuple[str, Etcd]]:
        """This cluster's etcd and every admitted remote's (for the node entries)."""
        sources = [(self.config.cluster, self.etcd)]
        sources += [
            (r.name, r.etcd) for r in self.mesh.remotes if r.admitted and r.etcd is not None
        ]
        return sources

    def targets(self) -> list[Target]:
        """Every node discovered, and this node itself (cilium-health lists localhost)."""
        found = {(t.cluster, t.node): t for t in self.discovery.targets()}
        found.update(((t.cluster, t.node), t) for t in self.mesh.targets())
        found[(self.config.cluster, self.config.node)] = Target(
            self.config.cluster, self.config.node, self.config.node_ip, self.config.health_ip
        )
        return sorted(found.values())

    async def _run_round(self, targets: Sequence[Target]) -> RoundReport:
        return await run_round(
            targets,
            pinger=self.pinger,
            http_port=self.config.http_port,
            timeout_s=self.config.timeout_s,
            spread_s=self.config.spread_s,
            max_in_flight=self.config.max_in_flight,
            icmp_count=self.config.icmp_count,
            on_result=self.feed.publish_path,
        )

    def _on_round(self, report: RoundReport) -> None:
        self.book.record(report)
        gone = self.book.retain_targets(report.targets)
        if gone:
            log.info("forgot %d paths of nodes that left", len(gone))
        self.metrics.observe_round(report)
        summaries = self.summaries = self.book.summaries()
        self.status_nodes.get(report.targets, summaries)  # before anyone reads status
        self.metrics.sync_connectivity(report.targets, summaries)
        self.publisher.note_round(report, summaries)
        failing = sum(1 for p in report.paths if not p.result.ok)
        log.debug(
            "round of %d paths to %d nodes took %.3fs, %d failing",
            len(report.paths),
            len(report.targets),
            report.duration_s,
            failing,
        )
        self.feed.publish_round(report)  # after the book has the round: status() has it

    # --- admin API handler ------------------------------------------------------------

    def _etcd_state(self) -> EtcdState:
        health = self.etcd.health
        # The error of an outage that is over (or the initial "not checked yet") would
        # read as "connected since T (connection refused)": only a down etcd has one.
        last_error = None if health.up else (health.last_error or None)
        return EtcdState(up=health.up, since=health.since, last_error=last_error)

    def healthz(self) -> HealthzDocument:
        doc = build_healthz_document(
            started_at=self.started_at, now=time.time(), etcd=self._etcd_state()
        )
        doc["registered"] = self.registrar.registered
        return doc

    def _status_inputs(self) -> StatusInputs:
        report = self.loop.last_report
        return StatusInputs(
            local=self.local,
            targets=report.targets if report is not None else self.targets(),
            summaries=self.summaries,
            probe_time=report.started_at if report is not None else None,
            probe_interval_s=self.config.interval_s,
            etcd=self._etcd_state(),
            round=RoundState(
                running=self.loop.running,
                last_started_at=report.started_at if report is not None else None,
                last_duration_s=report.duration_s if report is not None else None,
                completed=self.loop.rounds_finished,
            ),
            now=time.time(),
            clusters=cluster_states(self.mesh),
        )

    def status_document(self) -> StatusDocument:
        """The status document (docs/status.md); its `nodes` are shared: read-only."""
        inputs = self._status_inputs()
        return build_status_document(
            inputs, self.status_nodes.get(inputs.targets, inputs.summaries)
        )

    def status(self) -> EncodedJson:
        """GET /v1/status: the document as JSON, the cached `nodes` spliced in."""
        inputs = self._status_inputs()
        nodes = self.status_nodes.get(inputs.targets, inputs.summaries)
        return EncodedJson(encode_status_document(inputs, nodes))

    async def matrix(self) -> MatrixDocument:
        """GET /v1/matrix: read on request (no background watch: zero etcd load when
        nobody asks) from this cluster's etcd and every admitted remote's."""
        sources = [MatrixSource(self.config.cluster, self.etcd)]
        sources += [
            MatrixSource(r.name, r.etcd)
            for r in self.mesh.remotes
            if r.admitted and r.etcd is not None
        ]
        matrix, skipped = await read_matrix(
            sources, now=time.time(), extra_nodes=[(t.cluster, t.node) for t in self.targets()]
        )
        if skipped:
            self.metrics.kvstore_invalid_values.labels(kind="health").inc(skipped)
        return matrix_document(matrix)

    def _count_health_write(self, size: int) -> None:
        self.metrics.kvstore_writes.labels(key_kind="health").inc()
        self.metrics.kvstore_write_bytes.labels(key_kind="health").inc(size)

    async def probe_now(self) -> EncodedJson:
        await self.loop.probe_now()
        return self.status()

    # --- metrics that mirror other components' counters -------------------------------

    def sync_metrics(self) -> None:
        self.metrics.etcd_up.labels(cluster=self.config.cluster).set(
            1 if self.etcd.health.up else 0
        )
        self._mirrors["etcd_errors"].update(self.etcd.stats.errors)
        remote_invalid = sum(r.discovery.invalid_values for r in self.mesh.remotes if r.discovery)
        self._mirrors["invalid_ip"].update(self.discovery.invalid_values + remote_invalid)
        if self.peer_nodes is not None:
            self._mirrors["invalid_nodes"].update(self.peer_nodes.invalid_values)
        if self.endpoint is not None:
            self._mirrors["endpoint_restarts"].update(self.endpoint.state.restarts)
        self.metrics.probes_in_flight.set(self.pinger.in_flight if self.pinger else 0)
        self.mesh_metrics.sync()

    async def run_metrics_sync(self) -> None:
        while True:
            self.sync_metrics()
            await trio.sleep(METRICS_SYNC_INTERVAL_S)


async def _open_pinger_or_none(stack: AsyncExitStack) -> Pinger | None:
    """ICMP needs a raw socket; without the right the agent still probes over HTTP."""
    pinger = await stack.enter_async_context(open_pinger())
    try:
        pinger.open_socket_for("127.0.0.1")
    except PingerPermissionError as error:
        log.error("%s: ICMP paths will show as errors, HTTP probes go on", error)
        return None
    return pinger


async def _start_tcp(
    nursery: trio.Nursery, what: str, serve: Callable[..., Awaitable[object]], *args: object
) -> None:
    """Start a TCP server task; a bind error becomes one line for the user."""
    try:
        await nursery.start(serve, *args)
    except OSError as error:
        raise AgentStartError(f"cannot {what}: {error.strerror}") from None


async def run_agent(
    config: AgentConfig, *, task_status: trio.TaskStatus[Agent] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run until cancelled. Raises AgentStartError for problems users must fix."""
    async with AsyncExitStack() as stack:
        etcd = await stack.enter_async_context(open_etcd(config.etcd))
        pinger = await _open_pinger_or_none(stack)
        try:
            mesh_specs = load_remote_specs(config.mesh, config.mesh_dir, config.cluster)
        except MeshConfigError as error:
            raise AgentStartError(str(error)) from None
        agent = Agent(config, etcd, pinger, mesh_specs=mesh_specs)
        nursery = await stack.enter_async_context(trio.open_nursery())
        try:
            await nursery.start(serve_admin_api, config.socket, agent)
        except AdminSocketError as error:
            raise AgentStartError(str(error)) from None
        log.info("admin API on unix:%s", config.socket)
        try:
            feed_path = await nursery.start(
                serve_feed_unix, feed_socket_path(config.socket), agent.feed
            )
        except AdminSocketError as error:
            raise AgentStartError(str(error)) from None
        log.info("live feed on unix:%s", feed_path)
        if config.feed_listen is not None:
            host, port = config.feed_listen
            await _start_tcp(
                nursery, f"serve the feed on {host}:{port}", serve_feed_tcp, host, port, agent.feed
            )
        if config.metrics_listen is not None:
            host, port = config.metrics_listen
            await _start_tcp(
                nursery,
                f"serve metrics on {host}:{port}",
                serve_metrics,
                host,
                port,
                agent.registry,
            )
        await _start_tcp(
            nursery,
            f"listen on {config.node_ip}:{config.http_port}",
            partial(serve_responder, node_name=config.node, stats=agent.responder_stats),
            config.node_ip,
            config.http_port,
        )
        await nursery.start(agent.registrar.run)
        await nursery.start(agent.discovery.run)
        await nursery.start(agent.mesh.run)
        await nursery.start(agent.publisher.run)
        if agent.routes is not None and agent.peer_nodes is not None:
            await nursery.start(agent.routes.run)
            await nursery.start(agent.peer_nodes.run)
        if agent.endpoint is not None:
            # Before the first round: probing our own endpoint before it was started
            # would report it down. started() comes when the responder is ready or its
            # first attempt failed (bounded by ENDPOINT_READY_TIMEOUT_S); the admin API
            # answers meanwhile ("never probed").
            await nursery.start(agent.endpoint.run)
        await nursery.start(agent.loop.run)
        nursery.start_soon(agent.run_metrics_sync)
        log.info(
            "agent %s/%s up: node_ip=%s health_ip=%s interval=%ss",
            config.cluster,
            config.node,
            config.node_ip,
            config.health_ip,
            config.interval_s,
        )
        task_status.started(agent)


async def run_agent_until_signal(config: AgentConfig) -> None:
    """`meshhealth agent`: run until SIGTERM/SIGINT, then shut down cleanly."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_agent, config)

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        log.info("%s: shutting down", signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
        except* (AgentStartError, NodeNameTaken) as group:
            raise AgentStartError(str(_first_leaf(group))) from None


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
