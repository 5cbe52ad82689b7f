"""What the agent shows of its clustermesh: the status document's `clusters` list.

states = cluster_states(mesh)          # StatusInputs.clusters
"""

from __future__ import annotations

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
