"""The agent's status document, built on request from what the agent holds.

    status = StatusSource(identity, results=..., progress=..., probe_targets=..., mesh=...,
                          health=..., summaries=...)
    status.document()   # the status document (the live feed's snapshot and round)
    status.encoded()    # GET /v1/status: as JSON, the cached `nodes` spliced in

Building never waits on etcd or on a round: the document shows the last finished round
(ProbeResults: the summaries and the cached status `nodes`), how far the rounds are
(RoundProgress) and the state of etcd, the mesh, the agent's own health and the cluster
summaries at the moment of the request. It reads the round's progress, not the loop:
the live feed needs the document, and the loop's rounds go to the feed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.local_health_monitor import LocalHealthMonitor
from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.agent.membership.mesh_status import cluster_states
from meshhealth.agent.membership.probe_targets import ProbeTargets
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.prober_loop import RoundProgress
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    build_status_document,
    encode_status_document,
)
from meshhealth.documents.status_schema import StatusDocument
from meshhealth.kvstore import Etcd


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """What the status document says about this agent itself."""

    local: LocalNode
    started_at: float  # unix time the agent started
    interval_s: float  # its probe interval


def etcd_state(etcd: Etcd) -> EtcdState:
    """The local etcd as the documents show it."""
    health = etcd.health
    # The error of an outage that is over (or the initial "not checked yet") would
    # read as "connected since T (connection refused)": only a down etcd has one.
    last_error = None if health.up else (health.last_error or None)
    return EtcdState(
        up=health.up, since=health.since, last_error=last_error, endpoint=etcd.endpoint_in_use
    )


class StatusSource:
    """Builds the status document (docs/status.md) from the agent's parts."""

    def __init__(
        self,
        identity: AgentIdentity,
        *,
        results: ProbeResults,
        progress: RoundProgress,
        probe_targets: ProbeTargets,
        mesh: ClusterMesh,
        health: LocalHealthMonitor,
        summaries: SummaryFollower,
    ) -> None:
        self.identity = identity
        self.results = results
        self.progress = progress
        self.probe_targets = probe_targets
        self.mesh = mesh
        self.health = health
        self.summaries = summaries

    def inputs(self) -> StatusInputs:
        report = self.progress.last_report
        now = time.time()
        if report is not None:
            targets, plan = report.targets, report.plan
        else:  # before the first round: what it will probe
            chosen = self.probe_targets.for_round(now)
            targets, plan = chosen.targets, chosen.plan
        return StatusInputs(
            local=self.identity.local,
            targets=targets,
            summaries=self.results.summaries,
            probe_time=report.started_at if report is not None else None,
            probe_interval_s=self.identity.interval_s,
            etcd=etcd_state(self.probe_targets.etcd),
            round=RoundState(
                running=self.progress.running,
                last_started_at=report.started_at if report is not None else None,
                last_duration_s=report.duration_s if report is not None else None,
                completed=self.progress.rounds_finished,
            ),
            now=now,
            clusters=cluster_states(self.mesh),
            verdicts=self.results.shown_verdicts,
            local_health=None if report is None else self.health.document(),
            cluster_summaries=self.summaries.summaries(),
            verdict_clusters=self.summaries.clusters(),
            plan=plan,
        )

    def document(self) -> StatusDocument:
        """The status document; its `nodes` are shared: read-only."""
        inputs = self.inputs()
        return build_status_document(inputs, self.results.status_nodes(inputs.targets))

    def encoded(self) -> bytes:
        """The document as JSON, the cached `nodes` spliced in."""
        inputs = self.inputs()
        return encode_status_document(inputs, self.results.status_nodes(inputs.targets))
