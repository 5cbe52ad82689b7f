"""Who aggregates this cluster: one agent holds `state/aggregator/v1/<cluster>`.

    election = AggregatorElection(etcd, registrar, cluster="lab1", node="node1")
    nursery.start_soon(election.run)
    election.leading            # this agent holds the claim
    election.holder             # the holder's node name (None: nobody known)
    seen = await election.wait_changed(seen)

The claim is written with a put-if-absent transaction under this node's lease (the
registrar's), so it vanishes with the holder: a clean shutdown revokes the lease (the
key goes at once), a crash lets it expire (within the lease TTL). Every agent that does
not hold it watches that one key and tries again when it is deleted; the holder watches
it too, and tries again with its new lease when the registrar re-registers. An agent
that stays unwell (its local health: degraded) for AGGREGATOR_UNFIT_GRACE_S deletes its
claim (a shorter blip does not move it), and an unwell agent waits as long before it
claims a free key, so a healthy one aggregates.
Nothing is polled: the watch, the registrar's and the local health's `wait_changed` and
etcd's health say when to act.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

import trio

from meshhealth import defaults
from meshhealth.agent.membership.lease_holder import LeaseHolder
from meshhealth.change_count import ChangeCount
from meshhealth.kvstore import (
    Backoff,
    Delete,
    Etcd,
    EtcdError,
    EventKind,
    Get,
    KeyAbsent,
    LeaseIs,
    Put,
    ResyncNeeded,
    WatchEvent,
)
from meshhealth.wire import keys
from meshhealth.wire.claim import AggregatorClaim, decode_claim, encode_claim
from meshhealth.wire.fields import DecodeError

log = logging.getLogger(__name__)


class Fitness(Protocol):
    """What the election needs of the agent's own health: whether it may aggregate (it is
    not degraded), and word when that changes."""

    @property
    def fit(self) -> bool: ...

    @property
    def changes(self) -> int: ...

    async def wait_changed(self, seen: int) -> int:
        """Return (the new change count) once `fit` may have changed."""
        ...


class AggregatorElection:
    """Campaigns for this cluster's aggregator claim as long as it runs.

    `leading`, `holder`, `holder_since` (unix s) describe the claim as last seen;
    `terms` counts the times this agent took it; `changes` moves (and `wait_changed`
    returns) whenever `leading` or `holder` changed.
    """

    def __init__(
        self,
        etcd: Etcd,
        registrar: LeaseHolder,
        fitness: Fitness,
        *,
        cluster: str,
        node: str,
        clock: Callable[[], float] = time.time,
        unfit_grace_s: float = defaults.AGGREGATOR_UNFIT_GRACE_S,
    ) -> None:
        self.etcd = etcd
        self.registrar = registrar
        self.fitness = fitness
        self.unfit_grace_s = unfit_grace_s
        self.cluster = cluster
        self.node = node
        self.key = keys.aggregator_key(cluster)
        self._clock = clock
        self.leading = False
        self.lease_id: int | None = None  # the lease our claim is under, while leading
        self.holder: str | None = None
        self.holder_since: float | None = None
        self.terms = 0
        self.resignations = 0  # claims given up because this agent became unwell
        self._changes = ChangeCount()

    @property
    def changes(self) -> int:
        return self._changes.value

    async def wait_changed(self, seen: int) -> int:
        """Wait until `changes` differs from `seen`; return the new count."""
        return await self._changes.wait_changed(seen)

    def _set(self, *, leading: bool, holder: str | None, since: float | None) -> None:
        if (leading, holder, since) == (self.leading, self.holder, self.holder_since):
            return
        if leading and not self.leading:
            self.terms += 1
            log.info("aggregating cluster %s (claim %s)", self.cluster, self.key)
        elif self.leading and not leading:
            log.info("no longer aggregating cluster %s", self.cluster)
        self.leading, self.holder, self.holder_since = leading, holder, since
        if not leading:
            self.lease_id = None
        self._changes.bump()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Campaign until cancelled; etcd errors are retried with back-off."""
        task_status.started()
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        seen = -1
        try:
            while True:
                lease_id = self.registrar.lease_id
                if lease_id is None:  # not registered (yet, or lost): nothing to claim with
                    self._set(leading=False, holder=self.holder, since=self.holder_since)
                    seen = await self.registrar.wait_changed(seen)
                    continue
                seen = self.registrar.changes
                fitness_seen = self.fitness.changes
                try:
                    if not self.fitness.fit:
                        if self.leading:  # unwell now: a healthy agent takes over
                            await self._resign(lease_id)
                        with trio.move_on_after(self.unfit_grace_s):
                            await self.fitness.wait_changed(fitness_seen)
                        fitness_seen = self.fitness.changes
                    revision = await self._campaign(lease_id)
                    backoff.reset()
                    await self._hold_or_watch(revision, seen, fitness_seen)
                except (EtcdError, ResyncNeeded) as error:
                    log.warning("aggregator claim of %s: %s (retrying)", self.cluster, error)
                    with trio.move_on_after(backoff.next_delay_s()):
                        await self.etcd.health.wait_changed()
        finally:
            self._set(leading=False, holder=None, since=None)

    async def _campaign(self, lease_id: int) -> int:
        """Claim the key if nobody holds it; learn who does. Returns the revision."""
        claim = AggregatorClaim(self.cluster, self.node, self._clock())
        result = await self.etcd.txn(
            [KeyAbsent(self.key)],
            [Put(self.key, encode_claim(claim), lease_id)],
            [Get(self.key)],
        )
        if result.succeeded:
            self.lease_id = lease_id
            self._set(leading=True, holder=self.node, since=claim.since)
            return result.revision
        found = result.gets[0][0] if result.gets and result.gets[0] else None
        if found is None:  # deleted between compare and read: try again at once
            self._set(leading=False, holder=None, since=None)
            return result.revision
        holder = self._decode(found.value)
        if found.lease_id == lease_id:  # our own claim, from before
            self.lease_id = lease_id
            self._set(leading=True, holder=self.node, since=holder.since if holder else None)
        else:
            self._set(
                leading=False,
                holder=holder.node if holder else None,
                since=holder.since if holder else None,
            )
        return result.revision

    def _decode(self, value: bytes) -> AggregatorClaim | None:
        try:
            return decode_claim(value)
        except DecodeError as error:
            log.warning("aggregator claim %s does not decode: %s", self.key, error)
            return None

    async def _hold_or_watch(self, revision: int, registrar_seen: int, fitness_seen: int) -> None:
        """Return when the claim is deleted (or nobody held it), our lease changed, or
        (while we hold it) our health changed."""
        if self.holder is None and not self.leading:
            return
        failed: list[EtcdError | ResyncNeeded] = []
        async with trio.open_nursery() as nursery:

            async def until_deleted() -> None:
                # The watch's errors leave the nursery as themselves, for `run` to retry
                # (a quiet claim's watch resumed after compaction is `Compacted`).
                try:
                    await self._watch_claim(revision)
                except (EtcdError, ResyncNeeded) as error:
                    failed.append(error)
                nursery.cancel_scope.cancel()

            async def until_new_lease() -> None:
                await self.registrar.wait_changed(registrar_seen)
                nursery.cancel_scope.cancel()

            async def until_unwell() -> None:  # unwell for a grace while holding the claim
                seen, was_fit = fitness_seen, self.fitness.fit
                while True:
                    while not (self.leading and was_fit and not self.fitness.fit):
                        was_fit = self.fitness.fit
                        seen = await self.fitness.wait_changed(seen)
                    # A holder unwell for a moment (a busy second under load) keeps the
                    # claim: handing it round on every blip would flap the aggregator.
                    with trio.move_on_after(self.unfit_grace_s):
                        while not self.fitness.fit:
                            seen = await self.fitness.wait_changed(seen)
                    if not self.fitness.fit:
                        break
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_deleted)
            nursery.start_soon(until_new_lease)
            nursery.start_soon(until_unwell)
        if failed:
            raise failed[0]

    async def _resign(self, lease_id: int) -> None:
        """Delete our claim (only while it is still under our lease)."""
        result = await self.etcd.txn([LeaseIs(self.key, lease_id)], [Delete(self.key)])
        if result.succeeded:
            self.resignations += 1
            log.info("giving up the aggregator claim of %s: this agent is unwell", self.cluster)
        self._set(leading=False, holder=None, since=None)

    async def _watch_claim(self, revision: int) -> None:
        async with self.etcd.watch_prefix(self.key, start_revision=revision + 1) as watch:
            async for batch in watch:
                for event in batch.events:
                    if event.key == self.key and self._apply(event):
                        return

    def _apply(self, event: WatchEvent) -> bool:
        """Note a change of the claim; True when it is gone (time to campaign)."""
        if event.kind is EventKind.DELETE:
            self._set(leading=False, holder=None, since=None)
            return True
        claim = self._decode(event.value)
        if claim is not None and claim.node != self.node:
            self._set(leading=False, holder=claim.node, since=claim.since)
        return False
