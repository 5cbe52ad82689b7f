"""What the agent shows of its clustermesh: the status `clusters` list and metrics.

states = cluster_states(mesh)          # StatusInputs.clusters
mesh_metrics = MeshMetrics(metrics, mesh)
mesh_metrics.sync()                    # every second, with the other mirrors
"""

from __future__ import annotations

from meshhealth.agent.agent_metrics import AgentMetrics
from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.documents.status import ClusterState, EtcdState
from meshhealth.kvstore import Etcd


def etcd_state(etcd: Etcd | None) -> EtcdState:
    if etcd is None:
        return EtcdState(up=False, since=None, last_error="not connected")
    health = etcd.health
    return EtcdState(up=health.up, since=health.since, last_error=health.last_error or None)


def cluster_states(mesh: ClusterMesh) -> list[ClusterState]:
    """The status document's `clusters`: the local cluster, then each remote."""
    local_etcd = etcd_state(mesh.etcd)
    states = [
        ClusterState(
            name=mesh.local.name,
            id=mesh.local.id,
            local=True,
            state="ok" if local_etcd.up else "etcd_down",
            etcd=local_etcd,
        )
    ]
    for remote in mesh.remotes:
        states.append(
            ClusterState(
                name=remote.name,
                id=remote.config.id if remote.config is not None else None,
                local=False,
                state=remote.state,
                etcd=etcd_state(remote.etcd),
                error=remote.error,
            )
        )
    return states


class MeshMetrics:
    """Feeds etcd_up / etcd_errors_total {cluster=remote} and the kvstore write counters
    of the local cluster-config from the mesh's own counters."""

    def __init__(self, metrics: AgentMetrics, mesh: ClusterMesh) -> None:
        self.metrics = metrics
        self.mesh = mesh
        self._errors_seen: dict[str, int] = {}
        self._config_writes_seen = 0
        self._config_bytes_seen = 0

    def sync(self) -> None:
        metrics = self.metrics
        for remote in self.mesh.remotes:
            etcd = remote.etcd
            metrics.etcd_up.labels(cluster=remote.name).set(
                1 if etcd is not None and etcd.health.up else 0
            )
            # Failed requests, plus each time the liveness check found it gone: an
            # admitted remote is only watched, and a dead watch sends no request.
            errors = etcd.stats.errors + etcd.health.changes // 2 if etcd is not None else 0
            seen = self._errors_seen.get(remote.name, 0)
            series = metrics.etcd_errors.labels(cluster=remote.name)
            if errors > seen:
                series.inc(errors - seen)
            self._errors_seen[remote.name] = max(seen, errors)
        writes, size = self.mesh.config_writes, self.mesh.config_write_bytes
        if writes > self._config_writes_seen:
            metrics.kvstore_writes.labels(key_kind="cluster-config").inc(
                writes - self._config_writes_seen
            )
            metrics.kvstore_write_bytes.labels(key_kind="cluster-config").inc(
                size - self._config_bytes_seen
            )
            self._config_writes_seen, self._config_bytes_seen = writes, size
