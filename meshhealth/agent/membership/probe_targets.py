"""Who this agent probes, and which etcd holds each cluster's entries.

    members = ProbeTargets(own, etcd, discovery, mesh)
    members.targets()          # every node discovered here and in admitted remotes, and us
    members.etcd_sources()     # (cluster, Etcd): ours first, then each admitted remote

Both are read when asked (at the start of a round, on a status request, when the node
entries or the matrix are read): discovery and the mesh keep them current.
"""

from __future__ import annotations

from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.kvstore import Etcd
from meshhealth.model import Target


class ProbeTargets:
    """The probe set (discovery of this cluster and of every admitted remote, plus this
    node itself: cilium-health lists localhost) and the etcd of each cluster."""

    def __init__(self, own: Target, etcd: Etcd, discovery: Discovery, mesh: ClusterMesh) -> None:
        self.own = own
        self.etcd = etcd
        self.discovery = discovery
        self.mesh = mesh

    def targets(self) -> list[Target]:
        """Every node to probe, sorted; this node is always among them."""
        found = {(t.cluster, t.node): t for t in self.discovery.targets()}
        found.update(((t.cluster, t.node), t) for t in self.mesh.targets())
        found[(self.own.cluster, self.own.node)] = self.own
        return sorted(found.values())

    def etcd_sources(self) -> list[tuple[str, Etcd]]:
        """This cluster's etcd, then every admitted remote's, by cluster name."""
        sources = [(self.own.cluster, self.etcd)]
        sources += [
            (r.name, r.etcd) for r in self.mesh.remotes if r.admitted and r.etcd is not None
        ]
        return sources
