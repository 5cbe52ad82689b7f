"""Who this agent probes, and which etcd holds each cluster's entries.

    probe_targets = ProbeTargets(own, etcd, discovery, mesh, settings, retained=retained)
    probe_targets.nodes()             # every node discovered here and in admitted
                                      # remotes, the agent-down nodes retained, and us
    chosen = probe_targets.for_round(time.time())  # the round's targets and its plan
    probe_targets.etcd_sources()      # (cluster, Etcd): ours first, then each remote
    probe_targets.probers_of(target)  # who probes `target` now (indirect probes ask)

The node list is read when asked (at the start of a round, on a status request, when
the node entries or the matrix are read): discovery and the mesh keep it current, and
keep the last list they had while etcd is slow or down, so probing goes on with it.

Each round probes its own targets in the probe plan (meshhealth.probe.assignment,
docs/scale.md) plus this node itself (cilium-health lists localhost). `choose_targets`
is the pure choice: the epoch comes from the round's start time, once, so a round that
runs across an epoch boundary probes the targets of the epoch it started in, and its
report (and the health entry built from it) names that epoch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.retained_nodes import RetainedNodes
from meshhealth.kvstore import Etcd
from meshhealth.model import PlanInfo, Target
from meshhealth.probe.assignment import (
    FULL_MESH_ALWAYS,
    epoch_at,
    epoch_length_s,
    probers_for,
    targets_for,
)


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """The agent's plan options (`--probe-targets`, `--full-mesh`) and what sets epochs."""

    interval_s: float
    k: int = defaults.PLAN_PROBE_TARGETS
    full_mesh: bool = False
    rotation_rounds: int = defaults.PLAN_ROTATION_ROUNDS
    full_mesh_max_nodes: int = defaults.PLAN_FULL_MESH_MAX_NODES

    @property
    def epoch_length_s(self) -> float:
        return epoch_length_s(self.interval_s, self.rotation_rounds)

    def epoch_at(self, unix_time_s: float) -> int:
        return epoch_at(unix_time_s, self.epoch_length_s)


@dataclass(frozen=True, slots=True)
class RoundTargets:
    """What one round probes (sorted, this node included) and the plan it follows."""

    targets: tuple[Target, ...]
    plan: PlanInfo


def choose_targets(
    own: Target, nodes: Iterable[Target], unix_time_s: float, settings: PlanSettings
) -> RoundTargets:
    """This node's targets for a round starting at `unix_time_s` (pure).

    The plan's node list is `nodes` plus `own` (by (cluster, node); `own` wins over an
    entry of the same name). The targets are `own` and its plan targets of the epoch of
    `unix_time_s`: every other node while the list is a full mesh, else `settings.k`.
    """
    own_key = (own.cluster, own.node)
    by_key = {(t.cluster, t.node): t for t in nodes}
    by_key[own_key] = own
    epoch = settings.epoch_at(unix_time_s)
    chosen = targets_for(
        own_key,
        by_key,
        epoch,
        settings.k,
        full_mesh_max_nodes=FULL_MESH_ALWAYS
        if settings.full_mesh
        else settings.full_mesh_max_nodes,
    )
    plan = PlanInfo(
        epoch=epoch,
        k=settings.k,
        rotation_rounds=settings.rotation_rounds,
        full_mesh=settings.full_mesh,
        full_mesh_max_nodes=settings.full_mesh_max_nodes,
        nodes=len(by_key),
    )
    return RoundTargets(tuple(sorted([own, *(by_key[key] for key in chosen)])), plan)


class ProbeTargets:
    """The node list (discovery of this cluster and of every admitted remote, plus this
    node itself), each round's targets in the plan, and the etcd of each cluster."""

    def __init__(
        self,
        own: Target,
        etcd: Etcd,
        discovery: Discovery,
        mesh: ClusterMesh,
        settings: PlanSettings,
        *,
        retained: RetainedNodes | None = None,
    ) -> None:
        self.own = own
        self.etcd = etcd
        self.discovery = discovery
        self.mesh = mesh
        self.settings = settings
        self.retained = retained

    def nodes(self) -> list[Target]:
        """Every node known (the plan's node list), sorted; this node is among them."""
        found = {(t.cluster, t.node): t for t in self.discovery.targets()}
        if self.retained is not None:  # agent-down: only while not registered
            for t in self.retained.targets():
                found.setdefault((t.cluster, t.node), t)
        found.update(((t.cluster, t.node), t) for t in self.mesh.targets())
        found[(self.own.cluster, self.own.node)] = self.own
        return sorted(found.values())

    def for_round(self, unix_time_s: float) -> RoundTargets:
        """The targets of a round that starts at `unix_time_s`, and its plan."""
        return choose_targets(self.own, self.nodes(), unix_time_s, self.settings)

    def probers_of(self, target: tuple[str, str]) -> tuple[tuple[str, str], ...]:
        """The nodes whose plan targets include `target` now (indirect probes ask
        them first: they probe it anyway)."""
        settings = self.settings
        return probers_for(
            target,
            [(t.cluster, t.node) for t in self.nodes()],
            settings.epoch_at(time.time()),
            settings.k,
            full_mesh_max_nodes=FULL_MESH_ALWAYS
            if settings.full_mesh
            else settings.full_mesh_max_nodes,
        )

    def etcd_sources(self) -> list[tuple[str, Etcd]]:
        """This cluster's etcd, then every admitted remote's, by cluster name."""
        sources = [(self.own.cluster, self.etcd)]
        sources += [
            (r.name, r.etcd) for r in self.mesh.remotes if r.admitted and r.etcd is not None
        ]
        return sources
