"""Fixtures: a real etcd server (the Debian binary) on free loopback ports.

`etcd_server` (function scope): a fresh etcd with a temporary data dir, owned by the
test (it may kill, stop or restart it). Always stopped by PID on teardown.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from meshhealth.kvstore.local_server import LocalEtcd


class EtcdServer(LocalEtcd):
    """LocalEtcd plus `etcdctl(*args)`: the real etcdctl (API v3) against this server."""

    def etcdctl(
        self, *args: str, input_bytes: bytes | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        env = dict(os.environ, ETCDCTL_API="3")
        env.pop("http_proxy", None)
        env.pop("HTTP_PROXY", None)
        return subprocess.run(
            ["etcdctl", "--endpoints", self.endpoint, "--dial-timeout", "2s", *args],
            input=input_bytes,
            capture_output=True,
            env=env,
            timeout=10,
            check=check,
        )


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    server = EtcdServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
