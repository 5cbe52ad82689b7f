"""The mesh directory: one file per remote cluster, read at start and watched after.

    specs = load_remote_specs(config.mesh, config.mesh_dir, config.cluster)
    await nursery.start(watch_mesh_dir, mesh, config.mesh_dir)   # ClusterMesh.run does

A file is named after its cluster and holds that cluster's etcd either as a plain list
of endpoints (one per line or comma-separated, `#` comments) or in Cilium's etcd
configuration shape (`endpoints:`, `trusted-ca-file:`, `cert-file:`, `key-file:`; see
meshhealth.kvstore.etcd_config), as Cilium's clustermesh secrets are. Files whose name
is not a cluster name (`ca.crt`, `..data`) and the file of the local cluster are
skipped, as Cilium does.

Watching: every MESH_DIR_POLL_S the directory's listing and each file's inode, mtime
and size are compared with the last ones (a poll: no inotify binding among our
dependencies; a Kubernetes secret update swaps a symlink, which a poll sees). On a
change the files are read again: a new file starts following that cluster, a removed
one stops it (its nodes leave the probe set), a changed one restarts it with the new
endpoints and files. A file that does not parse is logged and the clusters stay as
they were until it is fixed. The TLS files a remote names are watched by its own etcd
connection (meshhealth.kvstore.reload).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import trio

from meshhealth import defaults
from meshhealth.agent.membership.clustermesh import MeshConfigError, RemoteSpec, remote_specs
from meshhealth.kvstore.etcd_config import (
    EtcdConfigError,
    TlsFiles,
    etcd_access,
    parse_etcd_config,
)
from meshhealth.kvstore.tls import Fingerprint, files_fingerprint
from meshhealth.wire import keys

if TYPE_CHECKING:
    from meshhealth.agent.membership.clustermesh import ClusterMesh

log = logging.getLogger(__name__)

_YAML_KEY_RE = re.compile(r"^\s*[A-Za-z][\w-]*\s*:(\s|$)")  # `key: ...`, not `host:port`


def parse_mesh_file(
    text: str, *, source: str = "mesh file", base_dir: str = ""
) -> tuple[tuple[str, ...], TlsFiles | None]:
    """(endpoints, TLS files) of one mesh-dir file; ValueError when none or bad."""
    lines = [line.split("#", 1)[0].rstrip() for line in text.splitlines()]
    if any(_YAML_KEY_RE.match(line) for line in lines):
        config = parse_etcd_config(text, source=source, base_dir=base_dir)
        if not config.endpoints:
            raise ValueError(
                "no etcd endpoint under 'endpoints:'"
                if re.search(r"^endpoints\s*:", text, re.M)
                else "YAML without an 'endpoints:' key"
            )
        access = etcd_access(list(config.endpoints), config=config)
    else:
        items = [part.strip("'\"") for line in lines for part in re.split(r"[,\s]+", line)]
        access = etcd_access([item for item in items if item] or None)
    return tuple(e.url for e in access.endpoints), access.tls


def parse_endpoints_text(text: str) -> tuple[str, ...]:
    """The endpoints of one mesh-dir file (see `parse_mesh_file`)."""
    return parse_mesh_file(text)[0]


def _cluster_files(path: str, local_cluster: str) -> list[tuple[str, str]]:
    """(cluster name, file path) of the files that stand for a remote cluster."""
    try:
        names = sorted(os.listdir(path))
    except OSError as error:
        raise MeshConfigError(f"--mesh-dir {path}: {error.strerror or error}") from None
    files = []
    for name in names:
        file_path = os.path.join(path, name)
        try:
            keys.validate_cluster_name(name)
        except ValueError:
            log.debug("mesh dir: skipping %s (not a cluster name)", file_path)
            continue
        if name != local_cluster and os.path.isfile(file_path):
            files.append((name, file_path))
    return files


def read_mesh_dir(path: str | None, local_cluster: str) -> list[RemoteSpec]:
    """Specs from the files of `path`. MeshConfigError when the directory cannot be
    read or a cluster's file is malformed."""
    if path is None:
        return []
    specs = []
    for name, file_path in _cluster_files(path, local_cluster):
        try:
            with open(file_path, "rb") as handle:
                data = handle.read(defaults.MESH_FILE_MAX_BYTES + 1)
            if len(data) > defaults.MESH_FILE_MAX_BYTES:
                raise ValueError(f"larger than {defaults.MESH_FILE_MAX_BYTES} bytes")
            endpoints, tls = parse_mesh_file(
                data.decode("utf-8"), source=file_path, base_dir=os.path.dirname(file_path)
            )
        except (OSError, UnicodeDecodeError, ValueError) as error:
            detail = error.strerror if isinstance(error, OSError) else str(error)
            raise MeshConfigError(f"--mesh-dir file {file_path}: {detail}") from None
        specs.append(RemoteSpec(name, endpoints, f"--mesh-dir file {file_path}", tls))
    return specs


def load_remote_specs(
    mesh: Iterable[tuple[str, Sequence[str]]], mesh_dir: str | None, local_cluster: str
) -> list[RemoteSpec]:
    """Every remote cluster of the agent's options; MeshConfigError names what is wrong."""
    return remote_specs(mesh, read_mesh_dir(mesh_dir, local_cluster), local_cluster=local_cluster)


def dir_fingerprint(path: str) -> Fingerprint:
    """What changes when a file of `path` is added, removed, replaced or rewritten."""
    try:
        names = sorted(os.listdir(path))
    except OSError as error:
        return ((path, error.strerror or "unreadable"),)
    return files_fingerprint(tuple(os.path.join(path, name) for name in names))


async def watch_mesh_dir(
    mesh: ClusterMesh,
    path: str,
    *,
    poll_s: float = defaults.MESH_DIR_POLL_S,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Apply changes of the mesh dir to `mesh` until cancelled."""
    seen = dir_fingerprint(path)
    task_status.started()
    while True:
        await trio.sleep(poll_s)
        now = dir_fingerprint(path)
        if now == seen:
            continue
        seen = now
        try:
            specs = read_mesh_dir(path, mesh.configured.name)
        except (MeshConfigError, EtcdConfigError) as error:
            if str(error) != mesh.mesh_dir_error:
                log.warning("%s (the mesh dir changed; keeping the clusters as they were)", error)
            mesh.mesh_dir_error = str(error)
            continue
        mesh.mesh_dir_error = None
        apply_specs(mesh, specs)


def apply_specs(mesh: ClusterMesh, from_dir: Sequence[RemoteSpec]) -> None:
    """Make `mesh` follow `from_dir` (plus its `--mesh` clusters, which stay)."""
    current = {r.name: r.spec for r in mesh.remotes if r.spec.source != "--mesh"}
    flags = {r.name for r in mesh.remotes if r.spec.source == "--mesh"}
    wanted = {spec.name: spec for spec in from_dir}
    for name, spec in current.items():
        if wanted.get(name) != spec:
            log.info("mesh dir: %s %s", "removed" if name not in wanted else "changed", name)
            mesh.remove_remote(name)
    for name, spec in sorted(wanted.items()):
        if name in flags:
            log.error("%s: cluster %s is also given by --mesh; ignored", spec.source, name)
        elif current.get(name) != spec:
            log.info("mesh dir: following %s (etcd %s)", name, ",".join(spec.endpoints))
            mesh.add_remote(spec)
