"""Every agent follows one key per cluster: the summary its aggregator publishes.

    follower = SummaryFollower(probe_targets.etcd_sources, on_change=metrics_sync)
    nursery.start_soon(follower.run)
    follower.summary("lab1")                     # ClusterSummary | None
    follower.failing_observers("lab1", "node3")  # observers that fail to reach it

The sources are this cluster's etcd and each admitted clustermesh remote's
(ProbeTargets.etcd_sources): per cluster one get, then a watch of that one key (from the
get's revision + 1; resumed by the watch itself, read again after a compaction). A
cluster that leaves the sources is dropped with its summary. The list of sources is a
local call, looked at every `SUMMARY_SOURCES_RECHECK_S` (the mesh has no event for an
admitted remote): no etcd request unless it changed.

`failing_observers(cluster, node)` is what the suspicion of a path reads as independent
confirmations: how many observers, in all the followed clusters' summaries, currently
fail to reach that node (each summary counts its own cluster's observers, so the sum
counts none twice). A node no summary names has 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from meshhealth import defaults
from meshhealth.change_count import ChangeCount
from meshhealth.kvstore import Backoff, Etcd, EtcdError, EventKind, ResyncNeeded
from meshhealth.metrics import CounterSeries
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.summary import ClusterSummary, node_label
from meshhealth.wire.values import decode_cluster_value

log = logging.getLogger(__name__)

Sources = Callable[[], Sequence[tuple[str, Etcd]]]


def _nothing() -> None:
    pass


class SummaryFollower:
    """The newest summary of each followed cluster (see the module docstring).

    `on_change()` runs in the trio thread after a summary arrived, changed or went;
    `changes` counts those; `invalid_values` counts summaries that did not decode.
    """

    def __init__(
        self,
        sources: Sources,
        *,
        on_change: Callable[[], None] = _nothing,
        recheck_s: float = defaults.SUMMARY_SOURCES_RECHECK_S,
        invalid_metric: CounterSeries | None = None,
    ) -> None:
        self._sources = sources
        self.on_change = on_change
        self.recheck_s = recheck_s
        self._summaries: dict[str, ClusterSummary] = {}
        self._tasks: dict[tuple[str, int], trio.CancelScope] = {}
        self._invalid_metric = invalid_metric if invalid_metric is not None else CounterSeries()
        self._changes = ChangeCount()

    # --- what readers ask ------------------------------------------------------------

    @property
    def invalid_values(self) -> int:
        """Values skipped as invalid: read from its metric series, the one count."""
        return int(self._invalid_metric.value)

    def summary(self, cluster: str) -> ClusterSummary | None:
        return self._summaries.get(cluster)

    def summaries(self) -> dict[str, ClusterSummary]:
        """cluster -> its summary, for the clusters that have one."""
        return dict(self._summaries)

    def clusters(self) -> list[str]:
        """The clusters followed (with a summary or not), this cluster's first."""
        return list(dict.fromkeys(cluster for cluster, _ in self._sources()))

    def failing_observers(self, cluster: str, node: str) -> int:
        """Observers (of every followed cluster) that fail to reach `cluster/node` now."""
        label = node_label(cluster, node)
        return sum(s.failing_observers.get(label, 0) for s in self._summaries.values())

    @property
    def changes(self) -> int:
        return self._changes.value

    async def wait_changed(self, seen: int) -> int:
        """Wait until `changes` differs from `seen`; return the new count."""
        return await self._changes.wait_changed(seen)

    # --- following -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                self._reconcile(nursery)
                await trio.sleep(self.recheck_s)

    def _reconcile(self, nursery: trio.Nursery) -> None:
        wanted = {(cluster, id(etcd)): (cluster, etcd) for cluster, etcd in self._sources()}
        for task_key in list(self._tasks):
            if task_key not in wanted:
                self._tasks.pop(task_key).cancel()
                if task_key[0] not in {c for c, _ in wanted}:
                    self._set(task_key[0], None)
        for task_key, (cluster, etcd) in wanted.items():
            if task_key not in self._tasks:
                scope = trio.CancelScope()
                self._tasks[task_key] = scope
                nursery.start_soon(self._follow, cluster, etcd, scope)

    def _set(self, cluster: str, summary: ClusterSummary | None) -> None:
        old = self._summaries.get(cluster)
        if summary is None:
            if old is None:
                return
            del self._summaries[cluster]
        else:
            if old == summary:
                return
            self._summaries[cluster] = summary
        self._changes.bump()
        self.on_change()

    def _decode(self, cluster: str, key: str, value: bytes) -> ClusterSummary | None:
        try:
            decoded = decode_cluster_value(key, value)
        except DecodeError as error:
            self._invalid_metric.inc()
            log.warning("skipping invalid cluster summary %s: %s", key, error)
            return None
        return decoded if isinstance(decoded, ClusterSummary) else None

    async def _follow(self, cluster: str, etcd: Etcd, scope: trio.CancelScope) -> None:
        key = keys.summary_key(cluster)
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        with scope:
            while True:
                try:
                    kv, revision = await etcd.get(key)
                    self._set(cluster, None if kv is None else self._decode(cluster, key, kv.value))
                    backoff.reset()
                    async with etcd.watch_prefix(key, start_revision=revision + 1) as watch:
                        async for batch in watch:
                            for event in batch.events:
                                if event.key != key:  # the prefix of a longer cluster name
                                    continue
                                if event.kind is EventKind.DELETE:
                                    self._set(cluster, None)
                                else:
                                    self._set(cluster, self._decode(cluster, key, event.value))
                except ResyncNeeded as error:
                    log.info("summary of %s: %s; reading it again", cluster, error)
                except EtcdError as error:
                    log.debug("summary of %s not read: %s", cluster, error)
                    with trio.move_on_after(backoff.next_delay_s()):
                        await etcd.health.wait_changed()
