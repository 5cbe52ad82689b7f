"""Helpers for tests against a real etcd (see tests/plugins/etcd_server.py)."""

from __future__ import annotations

import base64
import inspect
import json
import zlib
from collections.abc import Awaitable, Callable

import trio

from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.model import Node
from tests.plugins.etcd_server import EtcdServer

# Short timeouts so failures are noticed fast in tests.
FAST_ETCD = {"request_timeout_s": 2.0, "liveness_interval_s": 0.3, "liveness_timeout_s": 0.5}


async def poll_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    timeout_s: float,
    *,
    interval_s: float = 0.05,
    what: str = "condition",
) -> float:
    """Poll `predicate` until true; returns the seconds it took, fails after timeout_s."""
    start = trio.current_time()
    with trio.move_on_after(timeout_s):
        while True:
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return trio.current_time() - start
            await trio.sleep(interval_s)
    raise AssertionError(f"{what} not reached within {timeout_s}s")


def make_node(
    name: str, node_ip: str, health_ip: str | None = None, *, cluster: str = "c1"
) -> Node:
    return Node(
        name=name,
        cluster=cluster,
        node_ip=node_ip,
        health_ip=health_ip,
        cidrs=("10.200.0.0/24",),
        health_port=4240,
        version="test",
        started_at=1_700_000_000.0,
    )


def etcdctl_get_prefix(server: EtcdServer, prefix: str) -> dict[str, bytes]:
    """Every key under `prefix` as the real etcdctl sees it."""
    out = server.etcdctl("get", "--prefix", prefix, "-w", "json").stdout
    kvs = json.loads(out).get("kvs", [])
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")) for kv in kvs
    }


async def etcdctl_get_prefix_async(server: EtcdServer, prefix: str) -> dict[str, bytes]:
    return await trio.to_thread.run_sync(etcdctl_get_prefix, server, prefix)


def registration(cluster: str, node: str) -> list[tuple[str, bytes]]:
    """(key, value) of the node entry and ip entry that register `node` (a NodeIP
    derived from its name), as its registrar writes them: the commands show only
    registered nodes' health reports."""
    digest = zlib.crc32(f"{cluster}/{node}".encode())
    ip = f"10.{digest >> 16 & 255}.{digest >> 8 & 255}.{digest & 255 or 1}"
    return registration_entries(make_node(node, ip, cluster=cluster))
