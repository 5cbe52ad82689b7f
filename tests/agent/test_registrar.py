"""The registrar against a real etcd (and real agent processes for crash and races)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio

from meshhealth.agent.membership.registrar import NodeNameTaken, Registrar, registration_entries
from meshhealth.kvstore import Etcd, open_etcd
from meshhealth.model import IPEntry, RetainedNode
from meshhealth.wire import keys
from meshhealth.wire.node import decode_node
from meshhealth.wire.values import decode_value
from tests.etcd_helpers import FAST_ETCD, etcdctl_get_prefix_async, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

TTL_S = 2
NODE = make_node("n1", "10.0.0.1", "10.1.0.2")


@contextmanager
def child_agent(endpoint: str, name: str, node_ip: str) -> Iterator[subprocess.Popen[str]]:
    """Another agent, in its own process, registered when this yields; killed by PID."""
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.registrar_child", endpoint, name, node_ip, str(TTL_S)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "registered", f"child agent did not register: {line!r}"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


@asynccontextmanager
async def running(registrar: Registrar) -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        await nursery.start(registrar.run)
        yield nursery
        nursery.cancel_scope.cancel()


async def entries_in_etcd(server: EtcdServer) -> dict[str, bytes]:
    return await etcdctl_get_prefix_async(server, keys.PREFIX)


def test_registration_entries() -> None:
    items = dict(registration_entries(NODE))
    assert list(items) == [
        "meshhealth/state/nodes/v1/c1/n1",
        "meshhealth/state/ip/v1/c1/10.0.0.1",
        "meshhealth/state/ip/v1/c1/10.1.0.2",
    ]
    no_health = dict(registration_entries(make_node("n2", "10.0.0.2")))
    assert list(no_health) == [
        "meshhealth/state/nodes/v1/c1/n2",
        "meshhealth/state/ip/v1/c1/10.0.0.2",
    ]


async def test_register_is_visible_with_etcdctl_and_revoked_on_shutdown(
    etcd_server: EtcdServer,
) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
        async with running(registrar):
            with trio.fail_after(5):
                await registrar.first_registered.wait()
            assert registrar.registered
            seen = await entries_in_etcd(etcd_server)
            decoded = {key: decode_value(key, value) for key, value in seen.items()}
            assert decoded == {
                "meshhealth/state/nodes/v1/c1/n1": NODE,
                "meshhealth/state/ip/v1/c1/10.0.0.1": IPEntry(
                    "10.0.0.1", "10.0.0.1", "n1", 6, ("reserved:remote-node",)
                ),
                "meshhealth/state/ip/v1/c1/10.1.0.2": IPEntry(
                    "10.1.0.2", "10.0.0.1", "n1", 4, ("reserved:health",)
                ),
                # no lease: a crash leaves it behind (agent-down), a clean leave deletes it
                "meshhealth/state/retained/v1/c1/n1": RetainedNode(NODE, None),
            }
            # Outlives its TTL: the keepalive works (a refresh every TTL/3; five of them
            # span more than the TTL after the registration).
            registered_at = trio.current_time()
            await poll_until(lambda: registrar.refreshes >= 5, TTL_S * 4, what="5 keepalives")
            assert trio.current_time() - registered_at > TTL_S
            assert len(await entries_in_etcd(etcd_server)) == 4
            assert registrar.registered
        # Clean shutdown: the retained entry is deleted and the lease revoked: every entry
        # is gone at once (no polling).
        assert await entries_in_etcd(etcd_server) == {}
        assert not registrar.registered
        assert registrar.registrations == 1


async def test_killed_agent_expires_and_its_name_can_be_reused(etcd_server: EtcdServer) -> None:
    with child_agent(etcd_server.endpoint, "n1", "10.0.0.1") as child:
        assert "meshhealth/state/nodes/v1/c1/n1" in await entries_in_etcd(etcd_server)
        child.kill()
    took = await poll_until(lambda: only_retained_left(etcd_server), TTL_S + 4.0, interval_s=0.2)
    print(f"killed agent's entries expired after {took:.2f} s (TTL {TTL_S} s)")

    # A crashed agent restarted at once waits its own stale entry out: no NodeNameTaken.
    with child_agent(etcd_server.endpoint, "n1", "10.0.0.1") as child:
        child.kill()
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
        async with running(registrar):
            with trio.fail_after(TTL_S + 4.0):
                await registrar.first_registered.wait()
            kv, _ = await etcd.get("meshhealth/state/nodes/v1/c1/n1")
            assert kv is not None
            assert kv.lease_id == registrar.lease_id


async def only_retained_left(server: EtcdServer) -> bool:
    """The lease's entries expired; the retained one (no lease) stays after a crash."""
    return list(await entries_in_etcd(server)) == ["meshhealth/state/retained/v1/c1/n1"]


async def test_live_agent_holding_the_name_is_refused(etcd_server: EtcdServer) -> None:
    with child_agent(etcd_server.endpoint, "n1", "10.0.0.7"):
        async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
            registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
            with pytest.raises(NodeNameTaken) as caught, trio.fail_after(TTL_S + 5.0):
                await registrar.run()
            assert str(caught.value) == (
                "node c1/n1 is already registered by a live agent (node_ip 10.0.0.7)"
            )
            assert not registrar.first_registered.is_set()
            # The other agent's entries are untouched.
            kv, _ = await etcd.get("meshhealth/state/nodes/v1/c1/n1")
            assert kv is not None
            assert decode_node(kv.value).node_ip == "10.0.0.7"


async def test_two_agents_racing_for_a_name_one_wins(etcd_server: EtcdServer) -> None:
    outcomes: list[str] = []

    async def agent(etcd: Etcd, node_ip: str, nursery: trio.Nursery) -> None:
        registrar = Registrar(etcd, make_node("n1", node_ip), ttl_s=TTL_S)

        async def report() -> None:
            await registrar.first_registered.wait()
            outcomes.append(f"registered {node_ip}")

        nursery.start_soon(report)
        try:
            await registrar.run()
        except NodeNameTaken:
            outcomes.append(f"refused {node_ip}")
            nursery.cancel_scope.cancel()

    async with (
        open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd1,
        open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd2,
    ):
        with trio.fail_after(TTL_S + 6.0):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent, etcd1, "10.0.0.1", nursery)
                nursery.start_soon(agent, etcd2, "10.0.0.2", nursery)
    assert sorted(o.split()[0] for o in outcomes) == ["refused", "registered"]


async def test_entries_deleted_by_hand_are_put_back(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
        async with running(registrar):
            with trio.fail_after(5):
                await registrar.first_registered.wait()
            await trio.to_thread.run_sync(
                etcd_server.etcdctl, "del", "--prefix", "meshhealth/state/"
            )
            await poll_until(
                lambda: entries_count_is(etcd_server, 4), TTL_S + 2.0, what="entries back"
            )
            assert registrar.registrations == 2


async def entries_count_is(server: EtcdServer, count: int) -> bool:
    return len(await entries_in_etcd(server)) == count


async def test_starts_while_etcd_is_down_and_registers_when_it_comes_up(
    etcd_server: EtcdServer,
) -> None:
    await trio.to_thread.run_sync(etcd_server.kill)
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
        entered = trio.current_time()
        async with running(registrar):
            assert trio.current_time() - entered < 1.0  # started() at once, etcd down
            await poll_until(lambda: "unreachable" in registrar.last_error, 5.0, what="a try")
            assert not registrar.first_registered.is_set()
            await trio.to_thread.run_sync(etcd_server.start)
            took = await poll_until(lambda: registrar.registered, 8.0, what="registered")
            print(f"registered {took:.2f} s after etcd started")


async def test_survives_etcd_kill_and_restart(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
        async with running(registrar):
            with trio.fail_after(5):
                await registrar.first_registered.wait()
            await trio.to_thread.run_sync(etcd_server.kill)
            await trio.sleep(TTL_S)  # the outage under test: etcd down for a whole TTL
            await trio.to_thread.run_sync(etcd_server.start)
            restarted = trio.current_time()
            # etcd keeps leases across restarts: the keepalive resumes on the same lease.
            await poll_until(lambda: registrar.refreshed_at > restarted, 8.0)
            took = trio.current_time() - restarted
            print(f"registrar kept alive again {took:.2f} s after etcd restart")
            assert registrar.registered
            assert registrar.registrations == 1  # same lease, no re-registration needed
            assert await entries_count_is(etcd_server, 4)


async def test_reregisters_after_etcd_lost_its_data(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, NODE, ttl_s=TTL_S)
        async with running(registrar):
            with trio.fail_after(5):
                await registrar.first_registered.wait()
            first_lease, seen = registrar.lease_id, registrar.changes
            await trio.to_thread.run_sync(lambda: etcd_server.restart(wipe_data=True))
            restarted = trio.current_time()
            with trio.fail_after(TTL_S + 5.0):  # the events the publisher waits on
                seen = await registrar.wait_changed(seen)  # the lease is lost...
                assert registrar.lease_id is None
                while registrar.registrations < 2:  # ... and a new one taken
                    seen = await registrar.wait_changed(seen)
            took = trio.current_time() - restarted
            print(f"re-registered {took:.2f} s after a wiped etcd came back")
            assert registrar.lease_id != first_lease
            assert registrar.lease_losses == 1
            assert registrar.re_registrations == 1
            assert await entries_count_is(etcd_server, 4)
