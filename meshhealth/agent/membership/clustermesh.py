"""Clustermesh: remote clusters, each with its own etcd, probed alongside the local one.

    specs = remote_specs(config.mesh, read_mesh_dir(config.mesh_dir, config.cluster))
    mesh = ClusterMesh(etcd, ClusterConfig("lab1", 195), specs)
    await nursery.start(mesh.run)
    mesh.targets()              # nodes of every accepted remote cluster
    mesh.remotes                # per remote: state, error, its Etcd and Discovery

Where remotes come from: `--mesh NAME=URLS` (repeatable) and `--mesh-dir DIR`, one file
per remote cluster named after it (read, and watched for added, changed and removed
files, by meshhealth.agent.membership.mesh_dir).

`run` writes the local cluster's `meshhealth/cluster-config/<cluster>` when absent, then,
for each remote, opens its etcd, reads its cluster-config and admits it only when the
entry's name is the configured name and its id differs from the local id and from every
admitted remote's id. A refused remote is logged, shown (`state` = `refused`, `error`)
and checked again every MESH_RECHECK_S; it never stops the agent. An admitted remote's
ip prefix is followed by a Discovery of its own. A remote etcd that goes down only marks
that cluster `etcd_down`: its last known nodes are still probed, its etcd is retried.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.retained_nodes import RetainedNodes
from meshhealth.kvstore import Backoff, Etcd, EtcdError, open_etcd
from meshhealth.kvstore.endpoints import describe, parse_endpoints
from meshhealth.kvstore.etcd_config import EtcdAccess, TlsFiles
from meshhealth.metrics import Counter, CounterSeries
from meshhealth.model import ClusterConfig, Target
from meshhealth.node_address_policy import NodeAddressPolicy
from meshhealth.wire import keys
from meshhealth.wire.cluster_config import decode_cluster_config, encode_cluster_config
from meshhealth.wire.fields import DecodeError

log = logging.getLogger(__name__)


class MeshConfigError(ValueError):
    """A bad remote cluster configuration; the message names where it comes from."""


@dataclass(frozen=True, slots=True)
class RemoteSpec:
    name: str
    endpoints: tuple[str, ...]  # normalised http(s)://host:port
    source: str  # where it was configured: `--mesh` or the file
    tls: TlsFiles | None = None  # from its mesh-dir file (Cilium's etcd config shape)

    def access(self) -> EtcdAccess:
        return EtcdAccess(parse_endpoints(list(self.endpoints)), self.tls)


# --- pure: parsing and checks ---------------------------------------------------------------


def default_cluster_id(name: str) -> int:
    """The id used when `--cluster-id` is not given: from the name, 1..255, stable.

    Different names may share an id (about 1 in 255 per pair): the clash is refused
    with a message asking for `--cluster-id`.
    """
    return zlib.crc32(keys.validate_cluster_name(name).encode()) % 255 + 1


def remote_specs(
    mesh: Iterable[tuple[str, Sequence[str]]],
    from_dir: Iterable[RemoteSpec] = (),
    *,
    local_cluster: str,
) -> list[RemoteSpec]:
    """`--mesh` pairs and mesh-dir specs as one list; a cluster named twice is an error."""
    specs: dict[str, RemoteSpec] = {}
    for name, urls in mesh:
        try:
            endpoints = tuple(e.url for e in parse_endpoints(list(urls)))
        except ValueError as error:
            raise MeshConfigError(f"--mesh {name}: {error}") from None
        specs[name] = RemoteSpec(name, endpoints, "--mesh")
    for spec in from_dir:
        if spec.name in specs:
            raise MeshConfigError(
                f"{spec.source}: cluster {spec.name} is also given by {specs[spec.name].source}"
            )
        specs[spec.name] = spec
    if local_cluster in specs:
        raise MeshConfigError(
            f"{specs[local_cluster].source}: {local_cluster} is this agent's own cluster"
        )
    return [specs[name] for name in sorted(specs)]


def check_remote(
    name: str,
    config: ClusterConfig,
    *,
    local: ClusterConfig,
    admitted: Mapping[str, int],
) -> str | None:
    """Why the remote cluster `name` with this cluster-config is refused, None when OK."""
    if config.name != name:
        return f"its cluster-config names cluster {config.name!r}, not {name!r}"
    if config.id == local.id:
        return (
            f"cluster id {config.id} is also the id of {local.name} (this cluster): "
            "give one of them another --cluster-id"
        )
    for other, other_id in sorted(admitted.items()):
        if other != name and other_id == config.id:
            return (
                f"cluster id {config.id} is also the id of meshed cluster {other}: "
                "give one of them another --cluster-id"
            )
    return None


# --- I/O: connecting ----------------------------------------------------------------------------


@dataclass(slots=True)
class RemoteCluster:
    """One remote cluster as the agent sees it (read by status and metrics)."""

    spec: RemoteSpec
    config: ClusterConfig | None = None
    admitted: bool = False
    refused: bool = False
    error: str | None = None
    etcd: Etcd | None = None
    discovery: Discovery | None = None
    retained: RetainedNodes | None = None  # its agent-down nodes (read only)
    checks: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def state(self) -> str:
        """`ok`, `etcd_down` (admitted, its etcd does not answer), `waiting` (not
        checked yet: etcd down or no cluster-config) or `refused`."""
        if self.refused:
            return "refused"
        if not self.admitted:
            return "waiting"
        if self.etcd is None or not self.etcd.health.up:
            return "etcd_down"
        return "ok"

    def targets(self) -> list[Target]:
        """Its registered nodes, then its agent-down nodes that are not registered."""
        if self.discovery is None:
            return []
        found = {t.node: t for t in self.discovery.targets()}
        for t in self.retained.targets() if self.retained is not None else ():
            found.setdefault(t.node, t)
        return sorted(found.values())


class ClusterMesh:
    """The local cluster's config entry and every remote cluster."""

    def __init__(
        self,
        etcd: Etcd,
        local: ClusterConfig,
        specs: Sequence[RemoteSpec],
        *,
        etcd_options: Mapping[str, Any] | None = None,
        recheck_s: float = defaults.MESH_RECHECK_S,
        mesh_dir: str | None = None,
        config_write_metrics: WriteCounters | None = None,
        invalid_ip_metric: CounterSeries | None = None,
        agent_down_retention_s: float = defaults.AGENT_DOWN_RETENTION_S,
        address_policy: NodeAddressPolicy | None = None,
        refused_address_metric: Counter | None = None,
    ) -> None:
        self.etcd = etcd
        self.configured = local
        self.local = local  # becomes the stored entry once read
        self.remotes = [RemoteCluster(spec) for spec in specs]
        self.etcd_options = dict(etcd_options or {})
        self.recheck_s = recheck_s
        self.mesh_dir = mesh_dir  # watched: files added, changed, removed take effect
        self.mesh_dir_error: str | None = None  # the mesh dir's files do not parse: why
        self._scopes: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self.config_written = False  # this agent created the local entry
        self.config_read = trio.Event()
        self.config_writes = 0
        self.config_write_bytes = 0
        self._config_write_metrics = config_write_metrics or WriteCounters()
        self._invalid_ip_metric = invalid_ip_metric
        self.agent_down_retention_s = agent_down_retention_s
        # a remote's nodes are held to the same address policy as this cluster's
        self._address_policy = address_policy
        self._refused_address_metric = refused_address_metric

    def targets(self) -> list[Target]:
        """Nodes of every admitted remote cluster."""
        return [t for remote in self.remotes for t in remote.targets()]

    def admitted_ids(self) -> dict[str, int]:
        return {r.name: r.config.id for r in self.remotes if r.admitted and r.config is not None}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from meshhealth.agent.membership.mesh_dir import watch_mesh_dir

        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._local_config)
            for remote in self.remotes:
                self._start_remote(remote)
            if self.mesh_dir is not None:
                await nursery.start(watch_mesh_dir, self, self.mesh_dir)
            task_status.started()

    def add_remote(self, spec: RemoteSpec) -> None:
        """Start following a remote cluster (a file appeared in the mesh dir)."""
        assert self._nursery is not None, "add_remote before run"
        remote = RemoteCluster(spec)
        self.remotes = sorted([*self.remotes, remote], key=lambda r: r.name)
        self._start_remote(remote)

    def remove_remote(self, name: str) -> None:
        """Stop following a remote cluster: its nodes leave the probe set at once."""
        scope = self._scopes.pop(name, None)
        if scope is not None:
            scope.cancel()
        self.remotes = [r for r in self.remotes if r.name != name]

    def _start_remote(self, remote: RemoteCluster) -> None:
        assert self._nursery is not None
        scope = self._scopes[remote.name] = trio.CancelScope()
        self._nursery.start_soon(self._run_remote, remote, scope)

    async def _run_remote(self, remote: RemoteCluster, scope: trio.CancelScope) -> None:
        with scope:
            await self._follow_remote(remote)

    async def _local_config(self) -> None:
        """Create `cluster-config/<local>` when absent, then read what is stored."""
        key = keys.cluster_config_key(self.configured.name)
        value = encode_cluster_config(self.configured)
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        while True:
            try:
                if await self.etcd.put_if_absent(key, value):
                    self.config_written = True
                    self.config_writes += 1
                    self.config_write_bytes += len(value)
                    self._config_write_metrics.count(len(value))
                    log.info("wrote %s (id %d)", key, self.configured.id)
                kv, _ = await self.etcd.get(key)
                break
            except EtcdError as error:
                log.warning("writing %s: %s (retrying)", key, error)
                with trio.move_on_after(backoff.next_delay_s()):
                    await self.etcd.health.wait_changed()
        if kv is not None:
            try:
                stored = decode_cluster_config(kv.value)
            except DecodeError as error:
                log.warning("%s does not decode (%s); using id %d", key, error, self.local.id)
            else:
                if stored.id != self.configured.id:
                    log.warning(
                        "%s says cluster id %d, this agent was given %d: using %d",
                        key,
                        stored.id,
                        self.configured.id,
                        stored.id,
                    )
                self.local = stored
        self.config_read.set()

    async def _follow_remote(self, remote: RemoteCluster) -> None:
        async with open_etcd(remote.spec.access(), **self.etcd_options) as etcd:
            remote.etcd = etcd
            try:
                await self._admit(remote, etcd)
                remote.discovery = Discovery(
                    {remote.name: etcd},
                    invalid_metric=self._invalid_ip_metric,
                    address_policy=self._address_policy,
                    refused_metric=self._refused_address_metric,
                )
                remote.retained = RetainedNodes(
                    etcd,
                    remote.name,
                    None,
                    remote.discovery,
                    retention_s=self.agent_down_retention_s,
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(remote.discovery.run)
                    await nursery.start(remote.retained.run)
            finally:
                remote.etcd = None

    async def _admit(self, remote: RemoteCluster, etcd: Etcd) -> None:
        """Return once the remote's cluster-config is read and accepted."""
        key = keys.cluster_config_key(remote.name)
        where = f"remote cluster {remote.name} (etcd {describe(etcd.endpoints)})"
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, self.recheck_s)
        while True:
            remote.checks += 1
            problem: str | None
            refused = False
            try:
                kv, _ = await etcd.get(key)
            except EtcdError as error:
                problem = str(error)
            else:
                if kv is None:
                    problem = f"no {key} entry yet (has an agent of {remote.name} started?)"
                else:
                    try:
                        remote.config = decode_cluster_config(kv.value)
                    except DecodeError as error:
                        problem, refused = f"{key} does not decode: {error}", True
                    else:
                        problem = check_remote(
                            remote.name,
                            remote.config,
                            local=self.local,
                            admitted=self.admitted_ids(),
                        )
                        refused = problem is not None
            if problem is None:
                remote.admitted, remote.refused, remote.error = True, False, None
                assert remote.config is not None
                log.info("meshed with %s, cluster id %d", where, remote.config.id)
                return
            if problem != remote.error or refused != remote.refused:
                if refused:
                    log.error(
                        "%s refused: %s (checking again every %gs)", where, problem, self.recheck_s
                    )
                else:
                    log.warning("%s: %s (retrying)", where, problem)
            remote.error, remote.refused = problem, refused
            with trio.move_on_after(self.recheck_s if refused else backoff.next_delay_s()):
                await etcd.health.wait_changed()
