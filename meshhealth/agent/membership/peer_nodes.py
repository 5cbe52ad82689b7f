"""The registered Node entries (with their CIDRs) of this and meshed clusters.

The probe set comes from the ip -> identity entries (Discovery); routes to peers' CIDRs
need the node entries, which carry the CIDRs. Each cluster's node prefix is followed
(list, then a resuming watch: kvstore/follow.py), so a join or a leave costs one event
per agent, not a re-read of every node entry. The clusters to follow are this one and
every admitted remote (`sources()`); they are compared every `sources_check_s`, a look
at local state that reads nothing from etcd. A cluster whose etcd does not answer keeps
its last known nodes: an etcd outage must not tear down the routes of a healthy fabric.
A remote that leaves the mesh takes its nodes with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

import trio

from meshhealth import defaults
from meshhealth.kvstore import KV, Etcd, EventKind, WatchEvent
from meshhealth.kvstore.follow import follow_prefix
from meshhealth.metrics import CounterSeries
from meshhealth.model import Node
from meshhealth.wire import keys
from meshhealth.wire.values import decode_entries

log = logging.getLogger(__name__)


def decode_nodes(items: Iterable[tuple[str, bytes]]) -> tuple[list[Node], list[str]]:
    """(key, value) pairs -> the valid Node entries, and one error line per bad value."""
    return decode_entries(items, Node)


class PeerNodes:
    """Follows the node entries; calls `on_nodes(all_nodes)` after every change (changes
    that arrive together are delivered once)."""

    def __init__(
        self,
        sources: Callable[[], Sequence[tuple[str, Etcd]]],
        on_nodes: Callable[[list[Node]], None],
        *,
        sources_check_s: float = defaults.PEER_NODES_SOURCES_CHECK_S,
        invalid_metric: CounterSeries | None = None,
    ) -> None:
        self._sources = sources
        self._on_nodes = on_nodes
        self._sources_check_s = sources_check_s
        self.by_cluster: dict[str, dict[str, Node]] = {}
        self.lists = 0  # whole-prefix reads (one per cluster, again only to resync)
        self._invalid_metric = invalid_metric if invalid_metric is not None else CounterSeries()
        self._warned: set[str] = set()
        self._dirty = trio.Event()

    @property
    def invalid_values(self) -> int:
        """Values skipped as invalid: read from its metric series, the one count."""
        return int(self._invalid_metric.value)

    def nodes(self) -> list[Node]:
        return [node for nodes in self.by_cluster.values() for node in nodes.values()]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        followed: dict[str, tuple[Etcd, trio.CancelScope]] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._deliver)
            task_status.started()
            while True:
                wanted = dict(self._sources())
                for cluster, (etcd, scope) in list(followed.items()):
                    if wanted.get(cluster) is not etcd:
                        scope.cancel()
                        del followed[cluster]
                        if cluster not in wanted:
                            self.by_cluster.pop(cluster, None)
                            self._dirty.set()
                for cluster, etcd in wanted.items():
                    if cluster not in followed:
                        followed[cluster] = (etcd, await nursery.start(self._follow, cluster, etcd))
                await trio.sleep(self._sources_check_s)

    async def _follow(
        self, cluster: str, etcd: Etcd, *, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)

            def listed(kvs: Sequence[KV]) -> None:
                self.lists += 1
                self.by_cluster[cluster] = {
                    node.name: node for node in self._decode((kv.key, kv.value) for kv in kvs)
                }
                self._dirty.set()

            def changed(events: Sequence[WatchEvent]) -> None:
                held = self.by_cluster.setdefault(cluster, {})
                for event in events:
                    try:
                        name = keys.parse_key(event.key).name
                    except keys.InvalidKey:
                        continue
                    if name is None:
                        continue
                    held.pop(name, None)
                    if event.kind is not EventKind.DELETE:
                        for node in self._decode([(event.key, event.value)]):
                            held[node.name] = node
                self._dirty.set()

            await follow_prefix(
                etcd,
                keys.nodes_prefix(cluster),
                what=f"node entries of cluster {cluster}",
                on_list=listed,
                on_events=changed,
            )

    def _decode(self, items: Iterable[tuple[str, bytes]]) -> list[Node]:
        nodes, errors = decode_nodes(items)
        for line in errors:
            if line not in self._warned:
                self._warned.add(line)
                self._invalid_metric.inc()
                log.warning("skipping invalid node entry %s", line)
        return nodes

    async def _deliver(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            self._on_nodes(self.nodes())
