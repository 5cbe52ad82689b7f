"""Fixtures: a real etcd server (the Debian binary) on free loopback ports.

`etcd_server` (function scope): a fresh etcd with a temporary data dir, owned by the
test (it may kill, stop or restart it). Always stopped by PID on teardown.
`second_etcd_server`: another one, independent of the first (a second cluster's etcd).
`running_etcd(server)`: the same life cycle for a server a test builds itself.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import TypeVar

import pytest

from tests.plugins.local_etcd import LocalEtcd

E = TypeVar("E", bound=LocalEtcd)


class EtcdServer(LocalEtcd):
    """LocalEtcd plus `etcdctl(*args)`: the real etcdctl (API v3) against this server."""

    def etcdctl_argv(self) -> list[str]:
        """The command that runs etcdctl (subclasses prefix `ip netns exec NS`)."""
        return ["etcdctl"]

    def etcdctl(
        self, *args: str, input_bytes: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        env = dict(os.environ, ETCDCTL_API="3")
        env.pop("http_proxy", None)
        env.pop("HTTP_PROXY", None)
        return subprocess.run(
            [*self.etcdctl_argv(), "--endpoints", self.endpoint, "--dial-timeout", "2s", *args],
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
