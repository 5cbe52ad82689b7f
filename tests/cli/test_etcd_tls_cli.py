"""Commands that read etcd, over TLS and with a user: the shared options
(`--etcd-ca/--etcd-cert/--etcd-key`, `--etcd-config`, `--etcd-user`, their
environment variables) and their one-line errors with exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from meshhealth.lab.certs import make_ca
from tests.plugins.etcd_server import EtcdServer, running_etcd
from tests.repo_paths import REPO_ROOT


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k.lower() != "http_proxy" and not k.startswith("MESHHEALTH_")
    }
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", *args],
        cwd=REPO_ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_commands_read_etcd_over_tls(tls_etcd_server: EtcdServer, tmp_path: Path) -> None:
    server = tls_etcd_server
    files = server.tls_files()
    server.etcdctl("put", "meshhealth/cluster-config/lab1", "garbage")
    flags = [f"--etcd-ca={files.ca_file}", f"--etcd-cert={files.cert_file}"]
    flags.append(f"--etcd-key={files.key_file}")
    result = cli("inspect", "--etcd", server.endpoint, *flags)
    assert result.returncode == 0, result.stderr
    assert "meshhealth/cluster-config/lab1" in result.stdout
    # the same from the environment, endpoints without a scheme (https with TLS files)
    env = {
        "MESHHEALTH_ETCD": server.endpoint.removeprefix("https://"),
        "MESHHEALTH_ETCD_CA": str(files.ca_file),
        "MESHHEALTH_ETCD_CERT": str(files.cert_file),
        "MESHHEALTH_ETCD_KEY": str(files.key_file),
    }
    result = cli("inspect", env=env)
    assert result.returncode == 0, result.stderr
    assert "meshhealth/cluster-config/lab1" in result.stdout
    # and from Cilium's etcd configuration file
    config = tmp_path / "etcd-config.yml"
    config.write_text(
        f"endpoints:\n- {server.endpoint}\ntrusted-ca-file: {files.ca_file}\n"
        f"cert-file: {files.cert_file}\nkey-file: {files.key_file}\n"
    )
    for command in (
        ["inspect"],
        ["matrix", "-o", "json"],
        ["diagnose", "-o", "json"],
        ["watch", "--etcd", server.endpoint, "--once", "--plain"],
    ):
        result = cli(*command, "--etcd-config", str(config))
        assert result.returncode == 0, (command, result.stderr)


def test_tls_errors_are_one_line_exit_2(tls_etcd_server: EtcdServer, tmp_path: Path) -> None:
    server = tls_etcd_server
    files = server.tls_files()
    other = make_ca(tmp_path, "other-ca")
    cases = [
        (
            [
                f"--etcd-ca={other.cert}",
                f"--etcd-cert={files.cert_file}",
                f"--etcd-key={files.key_file}",
            ],
            f"etcd {server.endpoint}: certificate verify failed: unable to get local issuer "
            "certificate",
        ),
        (
            [f"--etcd-ca={tmp_path / 'missing.crt'}"],
            f"etcd {server.endpoint}: CA file {tmp_path / 'missing.crt'}: No such file or "
            "directory",
        ),
        (
            [f"--etcd-cert={files.cert_file}"],
            "etcd client certificate and key go together",
        ),
        (
            [f"--etcd-config={tmp_path / 'nope.yml'}"],
            f"etcd config {tmp_path / 'nope.yml'}: No such file or directory",
        ),
    ]
    for flags, message in cases:
        for command in (["inspect"], ["matrix"]):
            result = cli(*command, "--etcd", server.endpoint, *flags)
            assert result.returncode == 2, (command, flags, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1, (command, result.stderr)
            assert message in lines[0], (command, lines[0])


def test_user_and_password_from_environment(tmp_path: Path) -> None:
    with running_etcd(EtcdServer()) as server:
        server.enable_auth("rootpw")
        server.etcdctl("put", "meshhealth/x", "1")
        good = cli(
            "inspect",
            "--etcd",
            server.endpoint,
            "--etcd-user",
            "root",
            env={"MESHHEALTH_ETCD_PASSWORD": "rootpw"},
        )
        assert good.returncode == 0, good.stderr
        assert "meshhealth/x" in good.stdout
        password_file = tmp_path / "pw"
        password_file.write_text("wrong\n")
        password_file.chmod(0o600)
        bad = cli(
            "inspect",
            "--etcd",
            server.endpoint,
            "--etcd-user",
            "root",
            "--etcd-password-file",
            str(password_file),
        )
        assert bad.returncode == 2
        assert bad.stderr.strip() == (
            f"meshhealth inspect: etcd {server.endpoint}: authentication failed for user "
            "'root': invalid user or password"
        )
        # no user at all: etcd wants one
        anonymous = cli("inspect", "--etcd", server.endpoint)
        assert anonymous.returncode == 2
        assert anonymous.stderr.strip() == (
            f"meshhealth inspect: etcd {server.endpoint}: etcd requires authentication: "
            "give an etcd user and its password"
        )
        # there is no password flag (and no abbreviation of --etcd-password-file)
        flag = cli("inspect", "--etcd", server.endpoint, "--etcd-password", "rootpw")
        assert flag.returncode == 2
        assert "a password on the command line is visible to every user" in flag.stderr
