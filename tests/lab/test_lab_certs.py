"""meshhealth.lab.certs's `make_pki` and its command line (the compose lab's `certs`
service): a CA, server and client certificates, made once and then kept."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from meshhealth.lab import certs


def _verify(ca: Path, cert: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), str(cert)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def _san(cert: Path) -> str:
    return subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def test_make_pki_signs_servers_and_clients_and_keeps_them(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    assert certs.make_pki(pki, [("etcd1", "10.79.0.2"), ("etcd2", "10.79.0.3")], ["meshhealth"])
    ca = pki / "meshhealth-lab-ca.crt"
    names = sorted(p.name for p in pki.iterdir())
    assert names == sorted(
        ["meshhealth-lab-ca.crt", "meshhealth-lab-ca.key"]
        + [f"{n}.{ext}" for n in ("etcd1", "etcd2", "meshhealth") for ext in ("crt", "key")]
    )
    for name in ("etcd1", "etcd2", "meshhealth"):
        done = _verify(ca, pki / f"{name}.crt")
        assert done.returncode == 0, done.stderr
        assert (pki / f"{name}.key").stat().st_mode & 0o077 == 0
    assert "DNS:etcd2" in _san(pki / "etcd2.crt")
    assert "IP Address:10.79.0.3" in _san(pki / "etcd2.crt")
    before = (pki / "etcd1.crt").read_bytes()
    assert not certs.make_pki(pki, [("etcd1", "10.79.0.2")], ["meshhealth"])  # kept
    assert (pki / "etcd1.crt").read_bytes() == before


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = tmp_path / "pki"
    assert certs.main([str(pki), "--server", "etcd1=10.79.0.2", "--client", "meshhealth"]) == 0
    assert "made the CA" in capsys.readouterr().out
    assert certs.main([str(pki), "--server", "etcd1=10.79.0.2"]) == 0
    assert "kept the CA" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        certs.main([str(tmp_path / "other"), "--server", "etcd1"])
    assert exit_info.value.code == 2
    assert "expected NAME=IP" in capsys.readouterr().err
