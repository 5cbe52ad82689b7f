"""The admin handler: answers the admin API (meshhealth.agent.serving.admin_api) from
the documents of meshhealth.documents, built from what the other components hold.

    handler = AgentAdminHandler(identity, results, loop, members, registrar, mesh, ...)
    handler.healthz()          # GET /v1/healthz
    handler.status()           # GET /v1/status, as JSON with the cached `nodes` spliced in
    handler.status_document()  # the same as a document (the live feed's snapshot and round)
    await handler.matrix()     # GET /v1/matrix, read from etcd on request
    await handler.probe_now()  # PUT /v1/status/probe

Reading never waits on etcd or on a round (`matrix` and `probe_now` excepted, which
are asked for that): the status comes from the last finished round (ProbeResults) and
the state of the loop, etcd and the mesh at the moment of the request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.local_health_monitor import LocalHealthMonitor
from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.agent.membership.mesh_status import cluster_states
from meshhealth.agent.membership.probe_targets import ProbeTargets
from meshhealth.agent.membership.registrar import Registrar
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.prober_loop import ProberLoop
from meshhealth.agent.serving.admin_api import EncodedJson
from meshhealth.documents.matrix import Matrix
from meshhealth.documents.matrix_json import MatrixDocument, matrix_document
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    build_healthz_document,
    build_status_document,
    encode_status_document,
)
from meshhealth.documents.status_schema import HealthzDocument, StatusDocument
from meshhealth.kvstore import Etcd
from meshhealth.matrix_source import MatrixSource, read_matrix
from meshhealth.metrics import CounterSeries


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


class AgentAdminHandler:
    """The agent's AdminHandler (meshhealth.agent.serving.admin_api.AdminHandler)."""

    def __init__(
        self,
        identity: AgentIdentity,
        *,
        results: ProbeResults,
        loop: ProberLoop,
        members: ProbeTargets,
        registrar: Registrar,
        mesh: ClusterMesh,
        invalid_health: CounterSeries,
        summaries: SummaryFollower | None = None,
    ) -> None:
        self.identity = identity
        self.results = results
        self.loop = loop
        self.members = members
        self.registrar = registrar
        self.mesh = mesh
        self._invalid_health = invalid_health  # health entries `matrix` skipped
        self.summaries = summaries
        self.local_health: LocalHealthMonitor | None = None  # the agent's own health

    def healthz(self) -> HealthzDocument:
        doc = build_healthz_document(
            started_at=self.identity.started_at,
            now=time.time(),
            etcd=etcd_state(self.members.etcd),
        )
        doc["registered"] = self.registrar.registered
        return doc

    def _status_inputs(self) -> StatusInputs:
        report = self.loop.progress.last_report
        now = time.time()
        if report is not None:
            targets, plan = report.targets, report.plan
        else:  # before the first round: what it will probe
            chosen = self.members.for_round(now)
            targets, plan = chosen.targets, chosen.plan
        return StatusInputs(
            local=self.identity.local,
            targets=targets,
            summaries=self.results.summaries,
            probe_time=report.started_at if report is not None else None,
            probe_interval_s=self.identity.interval_s,
            etcd=etcd_state(self.members.etcd),
            round=RoundState(
                running=self.loop.progress.running,
                last_started_at=report.started_at if report is not None else None,
                last_duration_s=report.duration_s if report is not None else None,
                completed=self.loop.progress.rounds_finished,
            ),
            now=now,
            clusters=cluster_states(self.mesh),
            verdicts=self.results.verdict_states(),
            local_health=(
                None
                if self.local_health is None or self.loop.progress.last_report is None
                else self.local_health.document()
            ),
            cluster_summaries=self.summaries.summaries() if self.summaries else {},
            verdict_clusters=self.summaries.clusters() if self.summaries else (),
            plan=plan,
        )

    def status_document(self) -> StatusDocument:
        """The status document (docs/status.md); its `nodes` are shared: read-only."""
        inputs = self._status_inputs()
        return build_status_document(inputs, self.results.status_nodes(inputs.targets))

    def status(self) -> EncodedJson:
        """GET /v1/status: the document as JSON, the cached `nodes` spliced in."""
        inputs = self._status_inputs()
        nodes = self.results.status_nodes(inputs.targets)
        return EncodedJson(encode_status_document(inputs, nodes))

    async def matrix(self) -> MatrixDocument:
        """GET /v1/matrix: read on request (no background watch: zero etcd load when
        nobody asks) from this cluster's etcd and every admitted remote's."""
        return matrix_document(await self.read_matrix())

    async def read_matrix(self) -> Matrix:
        """The matrix from this cluster's etcd and every admitted remote's (the web page
        reads it too)."""
        sources = [MatrixSource(cluster, etcd) for cluster, etcd in self.members.etcd_sources()]
        extra_nodes = [(t.cluster, t.node) for t in self.members.nodes()]
        matrix, skipped = await read_matrix(sources, now=time.time(), extra_nodes=extra_nodes)
        if skipped:
            self._invalid_health.inc(skipped)
        return matrix

    async def probe_now(self) -> EncodedJson:
        """PUT /v1/status/probe: a round that starts now; the document once it ended."""
        await self.loop.probe_now()
        return self.status()
