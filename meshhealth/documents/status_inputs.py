"""What the status document is built from: the agent's state as plain values (pure).

`StatusInputs` and its parts (`LocalNode`, `EtcdState`, `RoundState`, `ClusterState`),
and the path verdicts the agent hands over (`Verdicts`). documents/status.py builds the
document from them; documents/status_nodes.py the per-node part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol as TypingProtocol

from meshhealth.documents.status_schema import (
    LocalHealthDocument,
)
from meshhealth.model import (
    PathKey,
    PathSummary,
    PlanInfo,
    Target,
)
from meshhealth.wire.summary import ClusterSummary


class PathVerdictLike(TypingProtocol):
    """A path's suspicion verdict (meshhealth.diagnosis.suspicion.PathSuspicion)."""

    @property
    def verdict(self) -> str: ...  # ok | suspect | unreachable

    @property
    def since(self) -> float | None: ...  # unix seconds the verdict was entered


Verdicts = Mapping[PathKey, PathVerdictLike]
NO_VERDICTS: Verdicts = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class LocalNode:
    """The node this agent runs on."""

    cluster: str
    name: str
    node_ip: str
    health_ip: str | None
    node_ip_secondary: str | None = None  # dual stack: the other family's addresses
    health_ip_secondary: str | None = None


@dataclass(frozen=True, slots=True)
class EtcdState:
    """The agent's view of its etcd connection."""

    up: bool
    since: float | None = None  # unix seconds of the last change of `up`
    last_error: str | None = None  # one line, when down
    endpoint: str | None = None  # the etcd member requests go to now


@dataclass(frozen=True, slots=True)
class RoundState:
    """The prober loop's progress."""

    running: bool
    last_started_at: float | None = None  # unix seconds of the newest finished round
    last_duration_s: float | None = None
    completed: int = 0  # rounds finished since the agent started


@dataclass(frozen=True, slots=True)
class ClusterState:
    """One cluster of the mesh (the local one, or a remote one) for the `clusters` list."""

    name: str
    id: int | None  # None while not known (a remote whose cluster-config was not read)
    local: bool
    state: str  # ok | etcd_down | waiting | refused (meshhealth.agent.membership.clustermesh)
    etcd: EtcdState
    error: str | None = None  # why a remote is refused or waiting


@dataclass(frozen=True, slots=True)
class StatusInputs:
    local: LocalNode
    targets: Sequence[Target]
    summaries: Mapping[PathKey, PathSummary]
    probe_time: float | None  # unix seconds of the round the results come from
    probe_interval_s: float
    etcd: EtcdState
    round: RoundState
    now: float  # unix seconds; the document's `generated_at`
    clusters: Sequence[ClusterState] = ()  # local first; empty: the local one is derived
    local_health: LocalHealthDocument | None = None  # the agent's own health
    # each path's suspicion verdict (none: by status alone)
    verdicts: Verdicts = field(default_factory=lambda: NO_VERDICTS)
    # The followed clusters' summaries (cluster -> summary) and the clusters to give a
    # verdict for (empty: the local one).
    cluster_summaries: Mapping[str, ClusterSummary] = field(default_factory=dict)
    verdict_clusters: Sequence[str] = ()
    plan: PlanInfo | None = None  # the probe plan of the round `targets` come from
