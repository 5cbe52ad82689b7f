"""The registered Node entries (with their CIDRs) of this and meshed clusters.

The probe set comes from the ip -> identity entries (Discovery); routes to peers' CIDRs
need the node entries, which carry the CIDRs. They change only when a node registers or
leaves, which Discovery notices at once (the same etcd transaction), so the node entries
are re-read when Discovery's version moves, and every `poll_s` as a safety net (meshed
clusters, lost events). A cluster whose etcd does not answer keeps its last known nodes:
an etcd outage must not tear down the routes of a healthy fabric.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import trio

from meshhealth import codec, defaults, keys
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.kvstore import Etcd, EtcdError
from meshhealth.metrics import CounterSeries
from meshhealth.model import Node

log = logging.getLogger(__name__)


def decode_nodes(items: Iterable[tuple[str, bytes]]) -> tuple[list[Node], list[str]]:
    """(key, value) pairs -> the valid Node entries, and one error line per bad value."""
    return codec.decode_entries(items, Node)


class PeerNodes:
    """Follows the node entries; calls `on_nodes(all_nodes)` whenever they are re-read."""

    def __init__(
        self,
        sources: Callable[[], Sequence[tuple[str, Etcd]]],
        discovery: Discovery,
        on_nodes: Callable[[list[Node]], None],
        *,
        poll_s: float = defaults.PEER_NODES_POLL_S,
        invalid_metric: CounterSeries | None = None,
    ) -> None:
        self._sources = sources
        self._discovery = discovery
        self._on_nodes = on_nodes
        self._poll_s = poll_s
        self.by_cluster: dict[str, list[Node]] = {}
        self.invalid_values = 0
        self._invalid_metric = invalid_metric if invalid_metric is not None else CounterSeries()
        self._warned: set[str] = set()

    async def refresh(self) -> None:
        for cluster, etcd in self._sources():
            try:
                kvs, _ = await etcd.get_prefix(keys.nodes_prefix(cluster))
            except EtcdError as error:
                log.debug("node entries of %s not read: %s", cluster, error)
                continue
            nodes, errors = decode_nodes((kv.key, kv.value) for kv in kvs)
            for line in errors:
                if line not in self._warned:
                    self._warned.add(line)
                    self.invalid_values += 1
                    self._invalid_metric.inc()
                    log.warning("skipping invalid node entry %s", line)
            self.by_cluster[cluster] = nodes
        self._on_nodes([node for nodes in self.by_cluster.values() for node in nodes])

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        seen = -1
        while True:
            await self.refresh()
            with trio.move_on_after(self._poll_s):
                seen = await self._discovery.wait_changed(seen)
