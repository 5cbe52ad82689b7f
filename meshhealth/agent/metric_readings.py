"""Metrics whose value another package keeps, read when /metrics is scraped.

    read_at_scrape(metrics, cluster="lab1", etcd=etcd, mesh=mesh, endpoint=ep, pinger=p)

The components of the agent count in their metric handles themselves (the agent object,
the publisher, discovery, the node entries, the mesh's cluster-config write). What the
etcd client, the health endpoint supervisor and the pinger count stays with them: each
series here reads it at exposition (client_golang's GaugeFunc / CounterFunc), so there
is no copy to keep in step and no task that copies.
"""

from __future__ import annotations

from functools import partial

from meshhealth.agent.agent_metrics import AgentMetrics
from meshhealth.agent.health_endpoint.supervisor import HealthEndpoint
from meshhealth.agent.membership.clustermesh import ClusterMesh, RemoteCluster
from meshhealth.http_server import ConnectionStats
from meshhealth.kvstore import Etcd
from meshhealth.probe.icmp import Pinger
from meshhealth.probe.udp_responder import REFUSAL_REASONS, UdpEchoStats


def _remote_up(remote: RemoteCluster) -> float:
    return 1 if remote.etcd is not None and remote.etcd.health.up else 0


def _remote_errors(remote: RemoteCluster) -> float:
    etcd = remote.etcd
    if etcd is None:
        return 0
    # Failed requests, plus each time the liveness check found it gone: an admitted
    # remote is only watched, and a dead watch sends no request.
    return etcd.stats.errors + etcd.health.changes // 2


def read_at_scrape(
    metrics: AgentMetrics,
    *,
    cluster: str,
    etcd: Etcd,
    mesh: ClusterMesh,
    endpoint: HealthEndpoint | None,
    pinger: Pinger | None,
    responder: ConnectionStats,
    udp_echo: UdpEchoStats,
) -> None:
    """Bind the series of etcd (this cluster's and each remote's), the health endpoint's
    restarts, the probes in flight, the responder's refused connections and the UDP echo
    responder's datagrams to the state that holds them."""
    metrics.etcd_up.labels(cluster=cluster).read_from(lambda: 1 if etcd.health.up else 0)
    metrics.etcd_errors.labels(cluster=cluster).read_from(lambda: etcd.stats.errors)
    for remote in mesh.remotes:
        metrics.etcd_up.labels(cluster=remote.name).read_from(partial(_remote_up, remote))
        metrics.etcd_errors.labels(cluster=remote.name).read_from(partial(_remote_errors, remote))
    if endpoint is not None:
        metrics.endpoint_restarts.labels().read_from(lambda: endpoint.state.restarts)
    if pinger is not None:
        metrics.probes_in_flight.labels().read_from(lambda: pinger.in_flight)
    refused = metrics.responder_refused
    refused.labels(reason="per-source").read_from(lambda: responder.refused_per_source)
    refused.labels(reason="reserved").read_from(lambda: responder.refused_reserved)
    refused.labels(reason="full").read_from(
        lambda: (
            responder.connections_rejected
            - responder.refused_per_source
            - responder.refused_reserved
        )
    )
    metrics.udp_echo_answered.labels().read_from(lambda: udp_echo.answered)
    for reason in REFUSAL_REASONS:
        metrics.udp_echo_refused.labels(reason=reason).read_from(
            partial(udp_echo.refused.__getitem__, reason)
        )
