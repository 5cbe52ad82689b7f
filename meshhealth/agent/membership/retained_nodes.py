"""Crashed nodes kept in view as agent-down: the retained entries of this cluster.

    retained = RetainedNodes(etcd, cluster, own, discovery, retention_s=600)
    await nursery.start(retained.run)     # returns at once, etcd up or not
    retained.targets()                    # agent-down nodes to probe (NodeIP only)

Follows `state/retained/v1/<cluster>/` (list, then a resuming watch) and applies
meshhealth.agent.membership.retention's rule whenever the entries, the registered nodes
(discovery) or the clock (the next expiry) change: no polling. The stamps and deletions
this agent makes as the cluster's keeper are transactions that only succeed while the
node is still unregistered and the entry unchanged, so two agents that both believe
they are the keeper cannot disagree, and a node that comes back is never stamped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import trio

from meshhealth import defaults, timefmt
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.retention import HeldEntry, RetentionDecision, decide
from meshhealth.kvstore import (
    KV,
    Backoff,
    Delete,
    Etcd,
    EtcdError,
    EventKind,
    KeyAbsent,
    ModRevisionIs,
    Put,
    WatchEvent,
)
from meshhealth.kvstore.follow import follow_prefix
from meshhealth.metrics import CounterSeries, GaugeSeries
from meshhealth.model import RetainedNode, Target
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.retained import encode_retained
from meshhealth.wire.values import decode_value

log = logging.getLogger(__name__)


class RetainedNodes:
    """The agent-down nodes of one cluster. `own` is this agent's node name in it; None
    for a meshed (remote) cluster, whose entries this agent reads and never writes.
    Counters: `stamped`, `deleted` (writes this agent made as keeper), `dropped` (nodes
    that left this agent's view after their retention), `invalid_values`."""

    def __init__(
        self,
        etcd: Etcd,
        cluster: str,
        own: str | None,
        discovery: Discovery,
        *,
        retention_s: float = defaults.AGENT_DOWN_RETENTION_S,
        down_gauge: GaugeSeries | None = None,
        dropped_counter: CounterSeries | None = None,
    ) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.own = own
        self.discovery = discovery
        self.retention_s = retention_s
        self._held: dict[str, HeldEntry] = {}
        self._shown: dict[str, Target] = {}
        self._wake = trio.Event()
        self._down_gauge = down_gauge if down_gauge is not None else GaugeSeries()
        self._dropped = dropped_counter if dropped_counter is not None else CounterSeries()
        self.stamped = 0
        self.deleted = 0
        self.dropped = 0
        self.invalid_values = 0

    def targets(self) -> list[Target]:
        """The nodes kept in view as agent-down now (sorted)."""
        return sorted(self._shown.values())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow)
            nursery.start_soon(self._follow_discovery)
            nursery.start_soon(self._decide_loop)
            task_status.started()

    # --- inputs ----------------------------------------------------------------------

    def _changed(self) -> None:
        self._wake.set()

    async def _follow_discovery(self) -> None:
        seen = self.discovery.version
        while True:
            seen = await self.discovery.wait_changed(seen)
            self._changed()

    async def _follow(self) -> None:
        def listed(kvs: Sequence[KV]) -> None:
            self._held = {}
            for kv in kvs:
                self._put(kv.key, kv.value, kv.mod_revision)
            self._changed()

        def changed(events: Sequence[WatchEvent]) -> None:
            for event in events:
                self._apply(event)
            self._changed()

        await follow_prefix(
            self.etcd,
            keys.retained_prefix(self.cluster),
            what=f"retained nodes of cluster {self.cluster}",
            on_list=listed,
            on_events=changed,
        )

    def _apply(self, event: WatchEvent) -> None:
        if event.kind is EventKind.DELETE:
            try:
                parsed = keys.parse_key(event.key)
            except keys.InvalidKey:
                return  # never held: a put of it did not decode either
            if parsed.name is not None:
                self._held.pop(parsed.name, None)
            return
        self._put(event.key, event.value, event.mod_revision)

    def _put(self, key: str, value: bytes, mod_revision: int) -> None:
        try:
            entry = decode_value(key, value)
            if not isinstance(entry, RetainedNode):
                raise DecodeError(f"not a retained node: {type(entry).__name__}")
        except DecodeError as error:
            self.invalid_values += 1
            log.warning("skipping invalid value of %s (revision %d): %s", key, mod_revision, error)
            return
        self._held[entry.node.name] = HeldEntry(entry, mod_revision)

    # --- deciding --------------------------------------------------------------------

    async def _decide_loop(self) -> None:
        retry = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        while True:
            self._wake = trio.Event()
            live = {key[1] for key in self.discovery.probe_set() if key[0] == self.cluster}
            now = time.time()
            decision = decide(self._held, live, own=self.own, now=now, retention_s=self.retention_s)
            self._show(decision, live, now)
            wake_at = decision.next_change_at
            try:
                await self._write(decision, now)
                retry.reset()
            except EtcdError as error:
                log.warning("retained nodes of cluster %s: %s (retrying)", self.cluster, error)
                retry_at = now + retry.next_delay_s()
                wake_at = retry_at if wake_at is None else min(wake_at, retry_at)
            deadline = trio.current_time() + (wake_at - time.time()) if wake_at else math.inf
            with trio.move_on_at(deadline):
                await self._wake.wait()

    def _show(self, decision: RetentionDecision, live: set[str], now: float) -> None:
        shown = {t.node: t for t in decision.agent_down}
        for name, target in shown.items():
            if name not in self._shown:
                log.warning(
                    "node %s/%s: its agent's lease expired without a clean leave at %s; "
                    "kept in view as agent-down for %s",
                    self.cluster, name, timefmt.iso_time(target.agent_down_since),
                    timefmt.format_duration(self.retention_s),
                )  # fmt: skip
        for name, target in self._shown.items():
            if name in shown:
                continue
            if name in live:
                log.info("node %s/%s: registered again, no longer agent-down", self.cluster, name)
                continue
            self.dropped += 1
            self._dropped.inc()
            down_for = now - (target.agent_down_since or now)
            log.warning(
                "node %s/%s dropped: agent down for %s (retention %s)",
                self.cluster, name, timefmt.format_duration(down_for),
                timefmt.format_duration(self.retention_s),
            )  # fmt: skip
        self._shown = shown
        self._down_gauge.set(len(shown))

    async def _write(self, decision: RetentionDecision, now: float) -> None:
        for name in decision.to_stamp:
            held = self._held[name]
            stamped = RetainedNode(held.entry.node, down_since=now)
            if await self._txn(name, held, Put(self._key(name), encode_retained(stamped))):
                self.stamped += 1
        for name in decision.to_delete:
            if await self._txn(name, self._held[name], Delete(self._key(name))):
                self.deleted += 1

    def _key(self, name: str) -> str:
        return keys.retained_key(self.cluster, name)

    async def _txn(self, name: str, held: HeldEntry, op: Put | Delete) -> bool:
        """`op` on the retained entry of `name` if it is unchanged and the node still
        unregistered (the watch then brings the change to every agent, this one too)."""
        compares: list[KeyAbsent | ModRevisionIs] = [
            KeyAbsent(keys.node_key(self.cluster, name)),
            ModRevisionIs(self._key(name), held.mod_revision),
        ]
        result = await self.etcd.txn(compares, [op], [])
        return result.succeeded
