"""The mesh dir is watched: a remote cluster's file added (here in Cilium's etcd
configuration shape, over TLS with client certificates), changed and removed takes
effect without a restart; a file that does not parse changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import trio
import trio.lowlevel

from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.kvstore import open_etcd
from meshhealth.kvstore.etcd_config import etcd_access
from meshhealth.model import ClusterConfig
from meshhealth.node_address_policy import NodeAddressPolicy
from meshhealth.wire import keys
from meshhealth.wire.cluster_config import encode_cluster_config
from tests.etcd_helpers import FAST_ETCD, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def test_mesh_dir_changes_take_effect(
    etcd_server: EtcdServer, tls_etcd_server: EtcdServer, tmp_path: Path
) -> None:
    remote = tls_etcd_server
    files = remote.tls_files()
    async with open_etcd(etcd_access(remote.endpoint, tls=files), liveness=False) as etcd2:
        await etcd2.put(
            keys.cluster_config_key("lab2"), encode_cluster_config(ClusterConfig("lab2", 2))
        )
        for key, value in registration_entries(make_node("n9", "127.0.0.9", None, cluster="lab2")):
            await etcd2.put(key, value)
    mesh_dir = tmp_path / "mesh"
    mesh_dir.mkdir()
    (mesh_dir / "lab1").write_text("http://127.0.0.1:1\n")  # the local cluster: skipped
    (mesh_dir / "lab2.ca.crt").write_text("not a cluster name: skipped\n")
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        mesh = ClusterMesh(
            etcd,
            ClusterConfig("lab1", 1),
            [],
            recheck_s=0.2,
            etcd_options=FAST_ETCD,
            address_policy=NodeAddressPolicy(allow_loopback=True),  # nodes on 127.x
            mesh_dir=str(mesh_dir),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(mesh.run)
            assert mesh.remotes == []
            _write(
                mesh_dir / "lab2",
                f"endpoints:\n- {remote.endpoint}\ntrusted-ca-file: {files.ca_file}\n"
                f"cert-file: {files.cert_file}\nkey-file: {files.key_file}\n",
            )
            await poll_until(
                lambda: [r.state for r in mesh.remotes] == ["ok"], 15, what="lab2 admitted"
            )
            await poll_until(
                lambda: [t.node for t in mesh.targets()] == ["n9"], 10, what="n9 probed"
            )
            (lab2,) = mesh.remotes
            assert lab2.spec.tls == files and lab2.spec.endpoints == (remote.endpoint,)
            # a file that does not parse: the clusters stay as they were
            _write(mesh_dir / "lab2", "endpoints:\n  not-a-list\n")
            await poll_until(lambda: mesh.mesh_dir_error is not None, 10, what="bad file seen")
            assert "expected '- value' under 'endpoints:'" in (mesh.mesh_dir_error or "")
            assert mesh.remotes == [lab2] and lab2.state == "ok"
            # removed: its nodes leave the probe set
            os.unlink(mesh_dir / "lab2")
            await poll_until(
                lambda: mesh.remotes == [] and mesh.targets() == [], 10, what="lab2 removed"
            )
            nursery.cancel_scope.cancel()
