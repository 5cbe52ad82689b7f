"""Clustermesh: remote cluster configuration (pure), id checks (pure), and admission
against real etcd servers (the local cluster's and a remote one's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from meshhealth.agent.membership.clustermesh import (
    ClusterMesh,
    MeshConfigError,
    RemoteSpec,
    check_remote,
    default_cluster_id,
    remote_specs,
)
from meshhealth.agent.membership.mesh_dir import (
    load_remote_specs,
    parse_endpoints_text,
    read_mesh_dir,
)
from meshhealth.agent.membership.mesh_status import cluster_states
from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.kvstore import open_etcd
from meshhealth.model import ClusterConfig
from meshhealth.node_address_policy import NodeAddressPolicy
from meshhealth.wire import keys
from meshhealth.wire.cluster_config import decode_cluster_config, encode_cluster_config
from tests.etcd_helpers import FAST_ETCD, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer

# nodes on 127.x: a single-host mesh, whose peers may be loopback
LOOPBACK_MESH = NodeAddressPolicy(allow_loopback=True)

# --- the mesh dir's files (pure) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://10.0.0.1:2379\n", ("http://10.0.0.1:2379",)),
        ("http://a:2379,http://b:2379", ("http://a:2379", "http://b:2379")),
        ("http://a:2379\nhttp://b:2379\n\n", ("http://a:2379", "http://b:2379")),
        ("# lab2's etcd\n10.0.0.1:2379  # the only member\n", ("http://10.0.0.1:2379",)),
        ("10.0.0.1", ("http://10.0.0.1:2379",)),
        # Cilium's clustermesh config
        ("endpoints:\n- https://lab2.mesh.cilium.io:2379\n".replace("https", "http"),
         ("http://lab2.mesh.cilium.io:2379",)),
        ("endpoints:\n  - 'https://a:2379'\n  - \"https://b:2379\"\ntrusted-ca-file: /x/ca.crt\n",
         ("https://a:2379", "https://b:2379")),
        ("trusted-ca-file: /x\nendpoints:\n- a:2379\ncert-file: /y\nkey-file: /z\n",
         ("https://a:2379",)),
        ("endpoints: [http://a:2379, 'http://b:2379']\n", ("http://a:2379", "http://b:2379")),
        ("endpoints: http://a:2379\n", ("http://a:2379",)),
    ],
)  # fmt: skip
def test_parse_endpoints_text(text: str, expected: tuple[str, ...]) -> None:
    assert parse_endpoints_text(text) == expected


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no etcd endpoint"),
        ("# nothing\n", "no etcd endpoint"),
        ("endpoints:\n", "no etcd endpoint"),
        ("endpoints:\n  http://a:2379\n", "expected '- value' under 'endpoints:'"),
        ("endpoints: [http://a:2379]\ntrusted-ca-file: /x\n", "TLS files are given but"),
        ("endpoints: [https://a:2379]\ncert-file: /x\n", "certificate and key go together"),
        ("trusted-ca-file: /x/ca.crt\n", "without an 'endpoints:' key"),
        ("https://a:2379,http://b:2379\n", "mix http:// and https://"),
        ("ftp://a:2379\n", "unknown scheme"),
    ],
)
def test_parse_endpoints_text_errors(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_endpoints_text(text)


def test_read_mesh_dir(tmp_path: Path) -> None:
    (tmp_path / "lab2").write_text("endpoints:\n- http://10.0.0.2:2379\n")
    (tmp_path / "lab3").write_text("http://10.0.0.3:2379,http://10.0.0.4:2379\n")
    (tmp_path / "lab1").write_text("http://10.0.0.1:2379\n")  # our own: skipped
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")  # not a cluster name
    (tmp_path / "..data").mkdir()  # a Kubernetes secret mount's inner dir
    specs = read_mesh_dir(str(tmp_path), "lab1")
    assert [(s.name, s.endpoints) for s in specs] == [
        ("lab2", ("http://10.0.0.2:2379",)),
        ("lab3", ("http://10.0.0.3:2379", "http://10.0.0.4:2379")),
    ]
    assert specs[0].source == f"--mesh-dir file {tmp_path / 'lab2'}"


def test_read_mesh_dir_errors(tmp_path: Path) -> None:
    assert read_mesh_dir(None, "lab1") == []
    with pytest.raises(MeshConfigError, match=r"--mesh-dir .*/missing: No such file"):
        read_mesh_dir(str(tmp_path / "missing"), "lab1")
    (tmp_path / "lab2").write_text("endpoints:\n")
    with pytest.raises(MeshConfigError, match=r"--mesh-dir file .*/lab2: no etcd endpoint"):
        read_mesh_dir(str(tmp_path), "lab1")


def test_remote_specs_merge_and_refuse_duplicates(tmp_path: Path) -> None:
    (tmp_path / "lab3").write_text("http://10.0.0.3:2379\n")
    specs = load_remote_specs([("lab2", ("10.0.0.2:2379",))], str(tmp_path), "lab1")
    assert [(s.name, s.endpoints, s.source) for s in specs] == [
        ("lab2", ("http://10.0.0.2:2379",), "--mesh"),
        ("lab3", ("http://10.0.0.3:2379",), f"--mesh-dir file {tmp_path / 'lab3'}"),
    ]
    with pytest.raises(MeshConfigError, match="lab3 is also given by --mesh"):
        load_remote_specs([("lab3", ("10.0.0.9:2379",))], str(tmp_path), "lab1")
    with pytest.raises(MeshConfigError, match="lab1 is this agent's own cluster"):
        remote_specs([("lab1", ("10.0.0.9:2379",))], local_cluster="lab1")


# --- cluster ids (pure) ---------------------------------------------------------------------


def test_default_cluster_id_is_stable_and_in_range() -> None:
    ids = {name: default_cluster_id(name) for name in ("default", "lab1", "lab2", "lab3")}
    assert ids["lab1"] == 195 and ids["lab2"] == 200  # documented in docs/clustermesh.md
    assert len(set(ids.values())) == len(ids)
    assert all(1 <= default_cluster_id(f"c{i}") <= 255 for i in range(1000))


LOCAL = ClusterConfig("lab1", 1)


@pytest.mark.parametrize(
    ("name", "config", "admitted", "error"),
    [
        ("lab2", ClusterConfig("lab2", 2), {}, None),
        ("lab2", ClusterConfig("lab2", 2), {"lab2": 2}, None),  # itself, checked again
        ("lab2", ClusterConfig("lab9", 2), {}, "names cluster 'lab9', not 'lab2'"),
        ("lab2", ClusterConfig("lab2", 1), {}, "id 1 is also the id of lab1 (this cluster)"),
        ("lab3", ClusterConfig("lab3", 2), {"lab2": 2},
         "id 2 is also the id of meshed cluster lab2"),
    ],
)  # fmt: skip
def test_check_remote(
    name: str, config: ClusterConfig, admitted: dict[str, int], error: str | None
) -> None:
    found = check_remote(name, config, local=LOCAL, admitted=admitted)
    if error is None:
        assert found is None
    else:
        assert found is not None and error in found


# --- against real etcd servers ----------------------------------------------------------------


async def _put_config(endpoint: str, config: ClusterConfig) -> None:
    async with open_etcd(endpoint, liveness=False) as etcd:
        await etcd.put(keys.cluster_config_key(config.name), encode_cluster_config(config))


async def test_local_config_is_written_once_and_read_back(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        first = ClusterMesh(etcd, ClusterConfig("lab1", 5), [])
        second = ClusterMesh(etcd, ClusterConfig("lab1", 9), [])  # another agent, other id
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await first.config_read.wait()
            await nursery.start(second.run)
            await second.config_read.wait()
            nursery.cancel_scope.cancel()
        assert (first.config_written, first.config_writes) == (True, 1)
        assert (second.config_written, second.local) == (False, ClusterConfig("lab1", 5))
        kv, _ = await etcd.get("meshhealth/cluster-config/lab1")
        assert kv is not None and kv.lease_id == 0  # no lease: it outlives the agents
        assert decode_cluster_config(kv.value) == ClusterConfig("lab1", 5)


async def test_remote_admitted_refused_and_degraded(
    etcd_server: EtcdServer, second_etcd_server: EtcdServer
) -> None:
    """lab2 has no cluster-config yet (waiting), then one with our id (refused, the agent
    goes on), then a good one (admitted: its nodes are found); its etcd dies: etcd_down,
    its nodes stay in the probe set."""
    node = make_node("n1", "127.0.0.5", "127.0.0.6", cluster="lab2")
    async with open_etcd(second_etcd_server.endpoint, liveness=False) as remote:
        for key, value in registration_entries(node):
            await remote.put(key, value)
    spec = RemoteSpec("lab2", (second_etcd_server.endpoint,), "--mesh")
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        mesh = ClusterMesh(etcd, ClusterConfig("lab1", 1), [spec], recheck_s=0.2,
                           etcd_options=FAST_ETCD,
                           address_policy=LOOPBACK_MESH)  # fmt: skip
        (lab2,) = mesh.remotes
        async with trio.open_nursery() as nursery:
            await nursery.start(mesh.run)
            await poll_until(lambda: lab2.error is not None, 10, what="lab2 checked")
            assert lab2.state == "waiting"
            assert "no meshhealth/cluster-config/lab2 entry yet" in (lab2.error or "")

            await _put_config(second_etcd_server.endpoint, ClusterConfig("lab2", 1))
            await poll_until(lambda: lab2.state == "refused", 10, what="lab2 refused")
            assert "cluster id 1 is also the id of lab1" in (lab2.error or "")
            assert mesh.targets() == []
            states = {s.name: s for s in cluster_states(mesh)}
            assert states["lab2"].state == "refused" and states["lab2"].id == 1

            await _put_config(second_etcd_server.endpoint, ClusterConfig("lab2", 2))
            await poll_until(lambda: lab2.state == "ok", 10, what="lab2 admitted")
            await poll_until(lambda: len(mesh.targets()) == 1, 10, what="lab2's node found")
            (target,) = mesh.targets()
            assert (target.cluster, target.node, target.node_ip, target.health_ip) == (
                "lab2", "n1", "127.0.0.5", "127.0.0.6",
            )  # fmt: skip

            await trio.to_thread.run_sync(second_etcd_server.kill)
            await poll_until(lambda: lab2.state == "etcd_down", 10, what="lab2 etcd_down")
            assert [t.node for t in mesh.targets()] == ["n1"]  # still probed
            states = {s.name: s for s in cluster_states(mesh)}
            assert states["lab1"].state == "ok" and states["lab2"].etcd.up is False
            nursery.cancel_scope.cancel()
