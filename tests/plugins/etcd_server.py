"""Fixtures: a real etcd server (the Debian binary) on free loopback ports.

`etcd_server` (function scope): a fresh etcd with a temporary data dir, owned by the
test (it may kill, stop or restart it). Always stopped by PID on teardown.
`second_etcd_server`: another one, independent of the first (a second cluster's etcd).
`tls_etcd_server`: https with client certificates (`server.tls_files()`).
`running_etcd(server)`: the same life cycle for a server a test builds itself
(`EtcdServer(tls=True, extra_args=(...))`, then `server.enable_auth(password)`).
The run's header says where their data goes and why (meshhealth.lab.ram_disk), e.g.
"etcd data in /tmp (disk): /dev/shm has 64 MiB free, less than the 512 MiB wanted ...".
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import TypeVar

import pytest

from tests.plugins.local_etcd import LocalEtcd, tests_data_root

E = TypeVar("E", bound=LocalEtcd)


def pytest_report_header() -> str:
    return tests_data_root().line()


class EtcdServer(LocalEtcd):
    """LocalEtcd plus `etcdctl(*args)`: the real etcdctl (API v3) against this server
    (with its client certificate when TLS, as root once `enable_auth` ran)."""

    root_password: str | None = None

    def etcdctl_argv(self) -> list[str]:
        """The command that runs etcdctl (subclasses prefix `ip netns exec NS`)."""
        return ["etcdctl"]

    def etcdctl_auth_args(self) -> list[str]:
        args: list[str] = []
        if self.tls:
            files = self.tls_files()
            args += [f"--cacert={files.ca_file}", f"--cert={files.cert_file}"]
            args += [f"--key={files.key_file}"]
        if self.root_password is not None:
            args.append(f"--user=root:{self.root_password}")
        return args

    def enable_auth(self, root_password: str) -> None:
        """Create user root (role root) and turn etcd authentication on."""
        self.etcdctl("user", "add", f"root:{root_password}")
        self.etcdctl("auth", "enable")
        self.root_password = root_password

    def add_user(self, user: str, password: str, *, prefix: str = "meshhealth/") -> None:
        """A user with read-write access to `prefix` (and the liveness key under it)."""
        self.etcdctl("user", "add", f"{user}:{password}")
        self.etcdctl("role", "add", user)
        self.etcdctl("role", "grant-permission", user, "--prefix=true", "readwrite", prefix)
        self.etcdctl("user", "grant-role", user, user)

    def etcdctl(
        self, *args: str, input_bytes: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        env = dict(os.environ, ETCDCTL_API="3")
        env.pop("http_proxy", None)
        env.pop("HTTP_PROXY", None)
        return subprocess.run(
            [
                *self.etcdctl_argv(),
                "--endpoints",
                self.endpoint,
                "--dial-timeout",
                "2s",
                *self.etcdctl_auth_args(),
                *args,
            ],
            input=input_bytes,
            capture_output=True,
            env=env,
            timeout=10,
            check=check,
        )


@contextlib.contextmanager
def running_etcd(server: E) -> Iterator[E]:
    """Start `server`; close it (stop by PID, remove its data) however the block ends,
    also when it failed to start."""
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    with running_etcd(EtcdServer()) as server:
        yield server


@pytest.fixture
def second_etcd_server() -> Iterator[EtcdServer]:
    with running_etcd(EtcdServer()) as server:
        yield server


@pytest.fixture
def tls_etcd_server() -> Iterator[EtcdServer]:
    """An etcd on https that requires a client certificate of its own CA."""
    with running_etcd(EtcdServer(tls=True)) as server:
        yield server
