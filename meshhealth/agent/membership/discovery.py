"""Discovery: the probe set, from the ip -> identity entries of one or more clusters.

    discovery = Discovery({"lab1": etcd})           # cluster name -> its Etcd
    await nursery.start(discovery.run)              # returns at once, etcd up or not
    await discovery.synced.wait()                   # every cluster listed once
    targets = discovery.targets()
    diffs = discovery.subscribe()                   # ProbeSetDiff per change

For each cluster the ip and node entries are listed, then watched (a resuming watch,
listed again when it cannot resume, replacing the probe set by the diff). Entries are
untrusted: an ip entry counts only when its node entry vouches for it
(meshhealth.probe_set), a value that does not decode is skipped and counted, and a node
whose addresses the `address_policy` refuses is left out; each is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import trio

from meshhealth import defaults
from meshhealth.change_count import ChangeCount
from meshhealth.kvstore import KV, Etcd, EventKind, WatchEvent
from meshhealth.kvstore.follow import follow_prefix
from meshhealth.metrics import Counter, CounterSeries
from meshhealth.model import IPEntry, Node, Target
from meshhealth.node_address_policy import NodeAddressPolicy, RefusedAddress, screen_targets
from meshhealth.probe_set import (
    ProbeSetDiff,
    TargetKey,
    build_probe_set,
    diff_probe_sets,
    vouched_entries,
)
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.values import decode_value

log = logging.getLogger(__name__)


class Discovery:
    """The current probe set of the given clusters, kept up to date by `run`.

    Counters: `invalid_values` (distinct key+revision values skipped), `resyncs` (full
    re-lists after the first one), `updates` (non-empty diffs published), `version`
    (increments with each update). `synced` is set once every cluster was listed.
    """

    def __init__(
        self,
        sources: Mapping[str, Etcd] | Sequence[tuple[str, Etcd]],
        *,
        exclude: Iterable[TargetKey] = (),
        invalid_metric: CounterSeries | None = None,
        address_policy: NodeAddressPolicy | None = None,
        refused_metric: Counter | None = None,
    ) -> None:
        items = list(sources.items()) if isinstance(sources, Mapping) else list(sources)
        if not items:
            raise ValueError("discovery needs at least one cluster")
        self._sources = [(keys.validate_cluster_name(c), etcd) for c, etcd in items]
        self.exclude = frozenset(exclude)
        self._entries: dict[str, dict[str, IPEntry]] = {c: {} for c, _ in self._sources}
        self._invalid: dict[str, dict[str, int]] = {c: {} for c, _ in self._sources}
        self._listed: set[str] = set()
        self._nodes: dict[str, dict[str, Node]] = {c: {} for c, _ in self._sources}
        self._nodes_listed: set[str] = set()
        self.unvouched: tuple[tuple[str, IPEntry], ...] = ()  # of the last probe set built
        self._unvouched_said: set[tuple[str, IPEntry]] = set()
        self._probe_set: dict[TargetKey, Target] = {}
        self._subscribers: list[trio.MemorySendChannel[ProbeSetDiff]] = []
        self.synced = trio.Event()
        self._versions = ChangeCount()
        self.updates = 0
        self._invalid_metric = invalid_metric if invalid_metric is not None else CounterSeries()
        self.resyncs = 0
        self.dropped_subscribers = 0
        self.address_policy = address_policy if address_policy is not None else NodeAddressPolicy()
        self._refused_metric = refused_metric
        self.refused: tuple[RefusedAddress, ...] = ()  # of the last probe set built
        self._refusals_said: set[RefusedAddress] = set()

    # --- reading ---------------------------------------------------------------------

    @property
    def invalid_values(self) -> int:
        """Values skipped as invalid: read from its metric series, the one count."""
        return int(self._invalid_metric.value)

    def probe_set(self) -> dict[TargetKey, Target]:
        """A copy of the current probe set, keyed by (cluster, node)."""
        return dict(self._probe_set)

    def targets(self) -> list[Target]:
        """The current targets, sorted (what the prober probes)."""
        return sorted(self._probe_set.values())

    @property
    def version(self) -> int:
        """Moves by one with every change of the probe set."""
        return self._versions.value

    async def wait_changed(self, seen_version: int) -> int:
        """Wait until `version` differs from `seen_version`; return the new version."""
        return await self._versions.wait_changed(seen_version)

    def subscribe(
        self, max_buffer: int = defaults.DISCOVERY_SUBSCRIBER_BUFFER
    ) -> trio.MemoryReceiveChannel[ProbeSetDiff]:
        """A channel of every future ProbeSetDiff (start from `probe_set()`).

        A subscriber that falls `max_buffer` diffs behind is dropped: its channel ends
        (reads raise EndOfChannel) and it should read `probe_set()` and subscribe again.
        """
        send, receive = trio.open_memory_channel[ProbeSetDiff](max_buffer)
        self._subscribers.append(send)
        return receive

    # --- running ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow every cluster until cancelled. Never raises on etcd errors or bad
        values."""
        try:
            async with trio.open_nursery() as nursery:
                for cluster, etcd in self._sources:
                    nursery.start_soon(self._follow, cluster, etcd)
                    nursery.start_soon(self._follow_nodes, cluster, etcd)
                task_status.started()
        finally:
            for send in self._subscribers:
                send.close()
            self._subscribers.clear()

    async def _follow(self, cluster: str, etcd: Etcd) -> None:
        def listed(kvs: Sequence[KV]) -> None:
            if cluster in self._listed:
                self.resyncs += 1
            self._replace(cluster, kvs)

        def failed(reason: str) -> None:
            log.warning("discovery of cluster %s: %s (retrying)", cluster, reason)

        await follow_prefix(
            etcd,
            keys.ip_prefix(cluster),
            what=f"discovery of cluster {cluster}",
            on_list=listed,
            on_events=lambda events: self._apply(cluster, events),
            on_error=failed,
        )

    async def _follow_nodes(self, cluster: str, etcd: Etcd) -> None:
        held = self._nodes[cluster]

        def node_of(key: str, value: bytes) -> Node | None:
            try:
                node = decode_value(key, value)
            except DecodeError:
                return None  # peer nodes warns about it (meshhealth_kvstore_invalid_values)
            return node if isinstance(node, Node) else None

        def listed(kvs: Sequence[KV]) -> None:
            held.clear()
            for kv in kvs:
                node = node_of(kv.key, kv.value)
                if node is not None:
                    held[kv.key] = node
            self._nodes_listed.add(cluster)
            self._publish()
            self._note_synced()

        def changed(events: Sequence[WatchEvent]) -> None:
            for event in events:
                held.pop(event.key, None)
                node = None if event.kind is EventKind.DELETE else node_of(event.key, event.value)
                if node is not None:
                    held[event.key] = node
            self._publish()

        await follow_prefix(
            etcd,
            keys.nodes_prefix(cluster),
            what=f"discovery of the nodes of cluster {cluster}",
            on_list=listed,
            on_events=changed,
        )

    def _note_synced(self) -> None:
        every = {c for c, _ in self._sources}
        if self._listed == every and self._nodes_listed == every:
            self.synced.set()

    # --- state changes (trio thread only) ----------------------------------------------

    def _decode(self, cluster: str, key: str, value: bytes, revision: int) -> IPEntry | None:
        try:
            entry = decode_value(key, value)
            if not isinstance(entry, IPEntry):
                raise DecodeError(f"not an ip entry: {type(entry).__name__}")
        except DecodeError as error:
            invalid = self._invalid[cluster]
            if invalid.get(key) != revision:
                invalid[key] = revision
                self._invalid_metric.inc()
                log.warning("skipping invalid value of %s (revision %d): %s", key, revision, error)
            return None
        self._invalid[cluster].pop(key, None)
        return entry

    def _replace(self, cluster: str, kvs: Iterable[KV]) -> None:
        entries: dict[str, IPEntry] = {}
        seen: set[str] = set()
        for kv in kvs:
            seen.add(kv.key)
            entry = self._decode(cluster, kv.key, kv.value, kv.mod_revision)
            if entry is not None:
                entries[kv.key] = entry
        invalid = self._invalid[cluster]
        for key in list(invalid):
            if key not in seen:
                del invalid[key]
        self._entries[cluster] = entries
        self._listed.add(cluster)
        self._publish()
        self._note_synced()

    def _apply(self, cluster: str, events: Iterable[WatchEvent]) -> None:
        entries = self._entries[cluster]
        for event in events:
            if event.kind is EventKind.DELETE:
                entries.pop(event.key, None)
                self._invalid[cluster].pop(event.key, None)
                continue
            entry = self._decode(cluster, event.key, event.value, event.mod_revision)
            if entry is None:
                entries.pop(event.key, None)
            else:
                entries[event.key] = entry
        self._publish()

    def _note_refused(self) -> None:
        for item in self.refused:
            if item in self._refusals_said:
                continue
            self._refusals_said.add(item)
            log.warning(
                "discovery: not probing %s/%s, nor taking its indirect-probe requests: %s",
                item.cluster,
                item.node,
                item.why,
            )
            if self._refused_metric is not None:
                self._refused_metric.labels(reason=item.code).inc()

    def _note_unvouched(self) -> None:
        """Warn once per entry whose node entry exists but does not list it (an entry
        whose node entry is not there yet may be a registration half seen: its node
        entry comes in the same transaction, on the other watch)."""
        nodes = {(c, n.name): n for c, held in self._nodes.items() for n in held.values()}
        for cluster, entry in self.unvouched:
            if (cluster, entry.node) not in nodes or (cluster, entry) in self._unvouched_said:
                continue
            self._unvouched_said.add((cluster, entry))
            log.warning(
                "discovery: ignoring the ip entry %s/%s of node %s: that node's entry does "
                "not list it (NodeIP %s)",
                cluster,
                entry.ip,
                entry.node,
                nodes[(cluster, entry.node)].node_ip,
            )

    def _publish(self) -> None:
        believed, unvouched = vouched_entries(
            (
                (cluster, entry)
                for cluster, entries in self._entries.items()
                for entry in entries.values()
            ),
            (node for nodes in self._nodes.values() for node in nodes.values()),
        )
        self.unvouched = tuple(unvouched)
        self._note_unvouched()
        new = build_probe_set(believed)
        for key in self.exclude:
            new.pop(key, None)
        new, self.refused = screen_targets(new, self.address_policy)
        self._note_refused()
        diff = diff_probe_sets(self._probe_set, new)
        if diff.empty:
            return
        self._probe_set = new
        self.updates += 1
        self._versions.bump()
        for send in list(self._subscribers):
            try:
                send.send_nowait(diff)
            except trio.WouldBlock:
                log.warning("a probe-set subscriber fell behind; dropping it")
                self.dropped_subscribers += 1
                send.close()
                self._subscribers.remove(send)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(send)
