"""The admin handler: answers the admin API (meshhealth.agent.serving.admin_api).

    handler = AgentAdminHandler(status, loop=loop, registrar=registrar, matrix=reader)
    handler.healthz()          # GET /v1/healthz
    handler.status()           # GET /v1/status, as JSON with the cached `nodes` spliced in
    await handler.matrix()     # GET /v1/matrix, read from etcd on request
    await handler.probe_now()  # PUT /v1/status/probe

Reading never waits on etcd or on a round (`matrix` and `probe_now` excepted, which
are asked for that): the status comes from meshhealth.agent.status_source.
"""

from __future__ import annotations

import time

from meshhealth.agent.matrix_reader import MatrixReader
from meshhealth.agent.membership.registrar import Registrar
from meshhealth.agent.prober_loop import ProberLoop
from meshhealth.agent.serving.admin_api import EncodedJson
from meshhealth.agent.status_source import StatusSource, etcd_state
from meshhealth.documents.matrix_json import MatrixDocument, matrix_document
from meshhealth.documents.status import build_healthz_document
from meshhealth.documents.status_schema import HealthzDocument


class AgentAdminHandler:
    """The agent's AdminHandler (meshhealth.agent.serving.admin_api.AdminHandler)."""

    def __init__(
        self,
        status: StatusSource,
        *,
        loop: ProberLoop,
        registrar: Registrar,
        matrix: MatrixReader,
    ) -> None:
        self._status = status
        self.loop = loop
        self.registrar = registrar
        self._matrix = matrix

    def healthz(self) -> HealthzDocument:
        doc = build_healthz_document(
            started_at=self._status.identity.started_at,
            now=time.time(),
            etcd=etcd_state(self._status.probe_targets.etcd),
        )
        doc["registered"] = self.registrar.registered
        return doc

    def status(self) -> EncodedJson:
        """GET /v1/status: the document as JSON, the cached `nodes` spliced in."""
        return EncodedJson(self._status.encoded())

    async def matrix(self) -> MatrixDocument:
        """GET /v1/matrix: read on request from this cluster's etcd and every admitted
        remote's."""
        return matrix_document(await self._matrix.read())

    async def probe_now(self) -> EncodedJson:
        """PUT /v1/status/probe: a round that starts now; the document once it ended."""
        await self.loop.probe_now()
        return self.status()
