"""The matrix as this agent reads it: every published report of its cluster and of each
admitted remote, read on request (no background watch: zero etcd load when nobody asks).

    matrix = await MatrixReader(probe_targets, invalid_health).read()

The admin API's `GET /v1/matrix`, the web page and indirect probes (who reaches a
failing target now) read it; a health entry that does not decode is skipped and counted,
and a report of a node no ip entry registers is left out (the aggregator's rule,
meshhealth.matrix_source.registered_reports).
"""

from __future__ import annotations

import time

from meshhealth.agent.membership.probe_targets import ProbeTargets
from meshhealth.documents.matrix import Matrix
from meshhealth.matrix_source import MatrixSource, read_matrix
from meshhealth.metrics import CounterSeries


class MatrixReader:
    """Reads the matrix from the etcd of each cluster this agent follows."""

    def __init__(self, probe_targets: ProbeTargets, invalid_health: CounterSeries) -> None:
        self.probe_targets = probe_targets
        self._invalid_health = invalid_health  # health entries skipped

    async def read(self) -> Matrix:
        """The matrix from this cluster's etcd and every admitted remote's."""
        sources = [
            MatrixSource(cluster, etcd) for cluster, etcd in self.probe_targets.etcd_sources()
        ]
        extra_nodes = [(t.cluster, t.node) for t in self.probe_targets.nodes()]
        read = await read_matrix(
            sources, now=time.time(), extra_nodes=extra_nodes, registered_only=True
        )
        if read.skipped:
            self._invalid_health.inc(read.skipped)
        return read.matrix
