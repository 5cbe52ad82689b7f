"""Registrar: this node's entries in etcd, bound to one lease, kept alive.

    registrar = Registrar(etcd, node, ttl_s=15)
    await nursery.start(registrar.run)      # returns at once, even when etcd is down
    await registrar.first_registered.wait()

One transaction puts the node entry and its ip entries under one lease, and (unless
`retain=False`) a retained entry without a lease that keeps a crashed node visible as
agent-down (retained_nodes.py). It only succeeds when the node key does not exist, so
two agents cannot both take one name (NodeNameTaken; a crashed agent's leftover is
waited out). A lost lease means registering again; a clean shutdown deletes the
retained entry and revokes the lease. docs/kvstore.md lists the keys.
"""

from __future__ import annotations

import contextlib
import logging

import trio

from meshhealth import defaults
from meshhealth.change_count import ChangeCount
from meshhealth.kvstore import KV, Backoff, Etcd, EtcdError, Get, KeyAbsent, Put
from meshhealth.model import (
    IDENTITY_HEALTH,
    IDENTITY_REMOTE_NODE,
    LABEL_HEALTH,
    LABEL_REMOTE_NODE,
    IPEntry,
    Node,
    RetainedNode,
)
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.ip_entry import encode_ip_entry
from meshhealth.wire.node import decode_node, encode_node
from meshhealth.wire.retained import encode_retained

log = logging.getLogger(__name__)


class NodeNameTaken(Exception):
    """Another live agent holds this node's name."""


def node_ip_entries(node: Node) -> list[IPEntry]:
    """The ip -> identity entries of `node`: NodeIP (remote-node) and HealthIP (health),
    then the secondary NodeIP and HealthIP of a dual-stack node. All carry the primary
    NodeIP as `host_ip`; readers tell a secondary address by its family
    (meshhealth.probe_set)."""
    remote = [node.node_ip, node.node_ip_secondary]
    health = [node.health_ip, node.health_ip_secondary]
    entries: list[IPEntry] = []
    for node_ip, health_ip in zip(remote, health, strict=True):
        if node_ip is not None:
            entries.append(
                IPEntry(
                    ip=node_ip,
                    host_ip=node.node_ip,
                    node=node.name,
                    identity=IDENTITY_REMOTE_NODE,
                    labels=(LABEL_REMOTE_NODE,),
                )
            )
        if health_ip is not None:
            entries.append(
                IPEntry(
                    ip=health_ip,
                    host_ip=node.node_ip,
                    node=node.name,
                    identity=IDENTITY_HEALTH,
                    labels=(LABEL_HEALTH,),
                )
            )
    return entries


def registration_entries(node: Node) -> list[tuple[str, bytes]]:
    """(key, value) of everything the registrar puts for `node`, node entry first."""
    items = [(keys.node_key(node.cluster, node.name), encode_node(node))]
    for entry in node_ip_entries(node):
        items.append((keys.ip_key(node.cluster, entry.ip), encode_ip_entry(entry)))
    return items


class Registrar:
    """Keeps `node` registered in etcd under a lease of `ttl_s` seconds.

    State for the admin API and metrics: `registered`, `lease_id`, `registrations`
    (successful registrations), `re_registrations` (after a lost lease or lost
    entries), `lease_losses`, `last_error`, `refreshed_at` (trio clock of the last
    confirmed keepalive), `refreshes` (confirmed keepalives); `first_registered` is set
    after the first registration.
    `wait_changed(seen)` returns when `lease_id` or `registrations` changed since the
    `changes` count `seen` (the publisher writes under the new lease at once).
    """

    def __init__(
        self, etcd: Etcd, node: Node, *, ttl_s: int = defaults.LEASE_TTL_S, retain: bool = True
    ) -> None:
        if ttl_s < 1:
            raise ValueError(f"lease TTL must be >= 1 s, got {ttl_s}")
        self.etcd = etcd
        self.node = node
        self.ttl_s = ttl_s
        self.node_key = keys.node_key(node.cluster, node.name)
        self._entries = registration_entries(node)
        self.retained_key = keys.retained_key(node.cluster, node.name)
        self._retained = encode_retained(RetainedNode(node)) if retain else None
        self.first_registered = trio.Event()
        self.lease_id: int | None = None
        self.registrations = 0
        self.lease_losses = 0
        self.last_error = ""
        self.refreshed_at = 0.0  # trio.current_time() of the last confirmed refresh
        self.refreshes = 0
        self._changes = ChangeCount()  # changes of lease_id or registrations

    def _note_change(self) -> None:
        self._changes.bump()

    @property
    def changes(self) -> int:
        return self._changes.value

    async def wait_changed(self, seen: int) -> int:
        """Wait until `changes` differs from `seen`; return the new count."""
        return await self._changes.wait_changed(seen)

    @property
    def name(self) -> str:
        return f"{self.node.cluster}/{self.node.name}"

    @property
    def re_registrations(self) -> int:
        return max(0, self.registrations - 1)

    @property
    def registered(self) -> bool:
        """True while our lease was confirmed alive within the last TTL."""
        if self.lease_id is None:
            return False
        return trio.current_time() - self.refreshed_at < self.ttl_s

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, keep alive, re-register; revoke on cancellation. Raises only
        NodeNameTaken (etcd errors are retried with back-off)."""
        task_status.started()
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        try:
            while True:
                try:
                    if self.lease_id is None:
                        await self._register()
                        backoff.reset()
                    await self._keep_alive()
                except EtcdError as error:
                    self._note_error(f"registration of {self.name}", error)
                    with trio.move_on_after(backoff.next_delay_s()):
                        await self.etcd.health.wait_changed()
        finally:
            await self._revoke()

    def _note_error(self, what: str, error: Exception) -> None:
        message = f"{what}: {error}"
        if message != self.last_error:
            log.warning("%s (retrying)", message)
        self.last_error = message

    async def _register(self) -> None:
        lease_id = await self.etcd.lease_grant(self.ttl_s)
        try:
            await self._claim(lease_id)
        except BaseException:
            # If this fails the lease expires by itself within the TTL.
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(defaults.REGISTRAR_REVOKE_TIMEOUT_S),
                contextlib.suppress(EtcdError),
            ):
                await self.etcd.lease_revoke(lease_id)
            raise
        self.lease_id = lease_id
        self.refreshed_at = trio.current_time()
        self.registrations += 1
        self.last_error = ""
        self._note_change()
        if self.registrations == 1:
            log.info("registered %s (lease %x, TTL %d s)", self.name, lease_id, self.ttl_s)
        else:
            log.warning("registered %s again (lease %x)", self.name, lease_id)
        self.first_registered.set()

    def _puts(self, lease_id: int) -> list[Put]:
        puts = [Put(key, value, lease_id) for key, value in self._entries]
        if self._retained is not None:
            puts.append(Put(self.retained_key, self._retained))  # no lease: outlives a crash
        return puts

    async def _claim(self, lease_id: int) -> None:
        """Put our entries under `lease_id` unless a live agent holds the name."""
        while True:
            result = await self.etcd.txn(
                [KeyAbsent(self.node_key)], self._puts(lease_id), [Get(self.node_key)]
            )
            if result.succeeded:
                return
            holder = result.gets[0][0] if result.gets and result.gets[0] else None
            if holder is None or holder.lease_id == lease_id:
                continue  # gone in between: try again
            if await self._holder_is_live(holder):
                raise NodeNameTaken(self._taken_message(holder))
            log.info("waiting for the stale entry of %s to expire", self.name)

    async def _holder_is_live(self, holder: KV) -> bool:
        """Whether someone keeps `holder`'s lease alive. False once the entry is gone.

        A lease nobody refreshes is gone within its granted TTL; a live agent refreshes
        it (its remaining TTL goes up). So we watch the remaining TTL for at most the
        granted TTL (+ slack): an increase, or the entry outliving it, means live.
        """
        if holder.lease_id == 0:
            return True  # a permanent entry (written by hand): never expires
        remaining, granted = await self.etcd.lease_time_to_live(holder.lease_id)
        if remaining < 0:
            return False
        poll_s = min(
            defaults.REGISTRAR_HOLDER_CHECK_MAX_S,
            max(defaults.REGISTRAR_HOLDER_CHECK_MIN_S, granted / 10),
        )
        deadline = trio.current_time() + granted + defaults.REGISTRAR_HOLDER_SLACK_S
        while trio.current_time() < deadline:
            await trio.sleep(poll_s)
            current, _ = await self.etcd.get(self.node_key)
            if current is None or current.lease_id != holder.lease_id:
                return False
            now_remaining, _ = await self.etcd.lease_time_to_live(holder.lease_id)
            if now_remaining < 0:
                return False
            if now_remaining > remaining:
                return True
            remaining = now_remaining
        return True

    def _taken_message(self, holder: KV) -> str:
        try:
            other = decode_node(holder.value)
            where = f"node_ip {other.node_ip}"
        except DecodeError:
            where = "entry does not decode"
        if holder.lease_id == 0:
            return (
                f"node {self.name} is already registered by an entry without lease ({where}); "
                f"remove it with: etcdctl del {self.node_key}"
            )
        return f"node {self.name} is already registered by a live agent ({where})"

    async def _keep_alive(self) -> None:
        """Refresh the lease every ttl/3 until it is lost (then return)."""
        lease_id = self.lease_id
        assert lease_id is not None
        interval_s = self.ttl_s / 3
        retry = Backoff(min(defaults.ETCD_RECONNECT_MIN_S, interval_s), interval_s)
        delay_s = interval_s
        while True:
            await trio.sleep(delay_s)
            try:
                ttl = await self.etcd.lease_keepalive_once(lease_id)
                if ttl > 0:
                    self.refreshed_at = trio.current_time()
                    self.refreshes += 1
                    await self._check_entries(lease_id)
            except EtcdError as error:
                # The lease may well survive (etcd keeps leases across restarts): keep
                # trying; etcd tells us when it is gone.
                self._note_error(f"lease keepalive of {self.name}", error)
                delay_s = retry.next_delay_s()
                continue
            if ttl <= 0:
                log.warning("lease of %s lost (expired or etcd reset)", self.name)
                self.lease_id = None
                self.lease_losses += 1
                self._note_change()
                return
            retry.reset()
            delay_s = interval_s
            self.last_error = ""

    async def _check_entries(self, lease_id: int) -> None:
        """Put our entries back if someone deleted them while our lease lives on."""
        current, _ = await self.etcd.get(self.node_key)
        if current is not None and current.lease_id == lease_id:
            return
        if current is None:
            result = await self.etcd.txn(
                [KeyAbsent(self.node_key)], self._puts(lease_id), [Get(self.node_key)]
            )
            if result.succeeded:
                self.registrations += 1
                self._note_change()
                log.warning("entries of %s were deleted; put them back", self.name)
                return
            current = result.gets[0][0] if result.gets and result.gets[0] else None
        if current is not None and current.lease_id != lease_id:
            raise NodeNameTaken(self._taken_message(current))

    async def _revoke(self) -> None:
        lease_id, self.lease_id = self.lease_id, None
        if lease_id is None:
            return
        self._note_change()
        with trio.CancelScope(shield=True), trio.move_on_after(defaults.REGISTRAR_REVOKE_TIMEOUT_S):
            try:
                if self._retained is not None:
                    await self.etcd.delete(self.retained_key)  # a clean leave: not retained
                await self.etcd.lease_revoke(lease_id)
                log.info("unregistered %s (lease %x revoked)", self.name, lease_id)
            except EtcdError as error:
                log.warning("could not revoke the lease of %s: %s", self.name, error)
