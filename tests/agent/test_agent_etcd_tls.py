"""The agent on a TLS etcd with client certificates: a certificate etcd refuses leaves
the agent serving with etcd down and the reason in `status` and `meshhealth_etcd_up`;
replacing the files (no restart) connects it and it registers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from meshhealth.lab.certs import make_ca, make_cert
from tests.agent_cluster import AgentCluster, wait_for
from tests.plugins.etcd_server import EtcdServer


def _replace(source: Path, target: Path) -> None:
    tmp = target.with_suffix(".new")
    shutil.copyfile(source, tmp)
    tmp.chmod(0o600)  # a private key readable by others is refused
    os.replace(tmp, target)


@pytest.mark.slow
def test_agent_reports_tls_failure_then_rotates(
    tls_etcd_server: EtcdServer, tmp_path: Path
) -> None:
    server = tls_etcd_server
    assert server.ca is not None and server.client is not None
    stranger = make_cert(make_ca(tmp_path / "other", "other-ca"), tmp_path / "other", "agent")
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "client.crt", live / "client.key"
    shutil.copyfile(stranger.cert, cert)
    shutil.copyfile(stranger.key, key)
    key.chmod(0o600)
    config = tmp_path / "etcd-config.yml"
    config.write_text(
        f"endpoints:\n- {server.endpoint}\ntrusted-ca-file: {server.ca.cert}\n"
        f"cert-file: {cert}\nkey-file: {key}\n"
    )
    cluster = AgentCluster(tmp_path, server.endpoint, extra_args=["--etcd-config", str(config)])
    with cluster:
        n1 = cluster.start("n1")

        def etcd_state() -> dict[str, object]:
            state: dict[str, object] = n1.status_json()["etcd"]
            return state

        wait_for(
            etcd_state,
            lambda s: "refused our client certificate" in str(s.get("last_error")),
            20,
            what="reason",
        )
        state = etcd_state()
        assert state["up"] is False
        assert str(state["last_error"]).startswith(f"etcd {server.endpoint}: ")
        assert 'meshhealth_etcd_up{cluster="c1"} 0' in n1.metrics_text()
        text = n1.status_cli()
        assert "refused our client certificate" in text.stdout
        assert n1.alive
        # rotate: the right client certificate, written over the files in place
        _replace(server.client.key, key)
        _replace(server.client.cert, cert)
        wait_for(etcd_state, lambda s: s.get("up") is True, 20, what="etcd up after rotation")
        assert 'meshhealth_etcd_up{cluster="c1"} 1' in n1.metrics_text()
        wait_for(
            lambda: (
                server.etcdctl("get", "--prefix", "--keys-only", "meshhealth/state/nodes/").stdout
            ),
            lambda out: b"/c1/n1" in out,
            20,
            what="n1 registered over TLS",
        )
        assert n1.alive
