"""Discovery against a real etcd: list + watch, bad values, etcd restarts, resync."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.registrar import Registrar, registration_entries
from meshhealth.kvstore import Etcd, open_etcd
from meshhealth.metrics import Registry
from meshhealth.model import IPEntry, Node, Target
from meshhealth.probe_set import ProbeSetDiff, TargetKey
from meshhealth.wire import keys
from meshhealth.wire.ip_entry import encode_ip_entry
from meshhealth.wire.node import encode_node
from tests.etcd_helpers import FAST_ETCD, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer

TTL_S = 2
N1 = make_node("n1", "10.0.0.1", "10.1.0.2")
N2 = make_node("n2", "10.0.0.2")
T1 = Target("c1", "n1", "10.0.0.1", "10.1.0.2")
T2 = Target("c1", "n2", "10.0.0.2", None)


def replay(diffs: list[ProbeSetDiff]) -> dict[TargetKey, Target]:
    """Apply diffs in order, failing on any lost or duplicated target."""
    state: dict[TargetKey, Target] = {}
    for diff in diffs:
        for target in diff.removed:
            assert state.pop((target.cluster, target.node)) == target, f"unknown {target}"
        for target in diff.added:
            key = (target.cluster, target.node)
            assert key not in state, f"duplicated {target}"
            state[key] = target
        for old, new in diff.changed:
            assert state[(old.cluster, old.node)] == old
            state[(new.cluster, new.node)] = new
    return state


class Recorder:
    """Collects every diff a discovery publishes."""

    def __init__(self, discovery: Discovery) -> None:
        self.discovery = discovery
        self.diffs: list[ProbeSetDiff] = []
        self._receive = discovery.subscribe()

    async def run(self) -> None:
        async for diff in self._receive:
            self.diffs.append(diff)

    def sees(self, *targets: Target) -> bool:
        return replay(self.diffs) == {(t.cluster, t.node): t for t in targets}


@asynccontextmanager
async def services(
    etcd: Etcd, *registrars: Registrar
) -> AsyncIterator[tuple[Discovery, Recorder, trio.Nursery]]:
    discovery = Discovery({"c1": etcd})
    recorder = Recorder(discovery)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(recorder.run)
        for registrar in registrars:
            await nursery.start(registrar.run)
        await nursery.start(discovery.run)
        yield discovery, recorder, nursery
        nursery.cancel_scope.cancel()


async def etcdctl_put(server: EtcdServer, key: str, value: bytes) -> None:
    # etcdctl reads the value from stdin when it is not an argument
    await trio.to_thread.run_sync(lambda: server.etcdctl("put", key, input_bytes=value))


async def put_node_entry(server: EtcdServer, node: Node) -> None:
    """The node entry alone (what vouches for the node's ip entries)."""
    await etcdctl_put(server, keys.node_key(node.cluster, node.name), encode_node(node))


async def test_lists_then_follows_registrations(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        r1 = Registrar(etcd, N1, ttl_s=TTL_S)
        async with services(etcd, r1) as (discovery, recorder, nursery):
            await r1.first_registered.wait()
            with trio.fail_after(5):
                await discovery.synced.wait()
            await poll_until(lambda: recorder.sees(T1), 5.0, what="n1 listed")
            assert discovery.targets() == [T1]

            r2 = Registrar(etcd, N2, ttl_s=TTL_S)
            scope = trio.CancelScope()

            async def run_r2() -> None:
                with scope:
                    await r2.run()

            nursery.start_soon(run_r2)
            await poll_until(lambda: recorder.sees(T1, T2), 5.0, what="n2 added")
            version = discovery.version
            scope.cancel()  # clean shutdown: revoked, so removed at once
            with trio.fail_after(3):
                await discovery.wait_changed(version)
            assert discovery.probe_set() == {("c1", "n1"): T1}
            await poll_until(lambda: recorder.sees(T1), 3.0, what="n2 removed")
            # one registration is one transaction: one diff adds the whole target
            assert [len(d.added) + len(d.removed) + len(d.changed) for d in recorder.diffs] == [
                1,
                1,
                1,
            ]
            assert discovery.invalid_values == 0
            assert discovery.resyncs == 0


async def test_garbage_is_skipped_counted_and_replaced_by_a_valid_value(
    etcd_server: EtcdServer,
) -> None:
    garbage_key = "meshhealth/state/ip/v1/c1/10.0.0.9"
    await trio.to_thread.run_sync(lambda: etcd_server.etcdctl("put", garbage_key, "garbage"))
    await trio.to_thread.run_sync(
        lambda: etcd_server.etcdctl("put", "meshhealth/state/ip/v1/c1/not-an-ip", "x")
    )
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        r1 = Registrar(etcd, N1, ttl_s=TTL_S)
        async with services(etcd, r1) as (discovery, recorder, _):
            await r1.first_registered.wait()
            await poll_until(lambda: recorder.sees(T1), 5.0, what="n1 listed")
            assert discovery.invalid_values == 2  # both bad values seen at list time

            # more garbage through the watch: a new revision is a new warning and count
            await etcdctl_put(etcd_server, garbage_key, b"\x81\xa1v\x02")  # {"v": 2}
            await poll_until(lambda: discovery.invalid_values == 3, 5.0)
            # an entry whose key and value disagree is invalid too
            wrong_ip = IPEntry("10.0.0.8", "10.0.0.9", "n9", 6, ("reserved:remote-node",))
            await etcdctl_put(etcd_server, garbage_key, encode_ip_entry(wrong_ip))
            await poll_until(lambda: discovery.invalid_values == 4, 5.0)
            assert discovery.targets() == [T1]

            # a valid value for the same key is taken (n9's node entry lists it)
            valid = IPEntry("10.0.0.9", "10.0.0.9", "n9", 6, ("reserved:remote-node",))
            await put_node_entry(etcd_server, make_node("n9", "10.0.0.9"))
            await etcdctl_put(etcd_server, garbage_key, encode_ip_entry(valid))
            t9 = Target("c1", "n9", "10.0.0.9", None)
            await poll_until(lambda: recorder.sees(T1, t9), 5.0, what="valid value taken")
            # and garbage again makes the key count as absent
            await etcdctl_put(etcd_server, garbage_key, b"garbage again")
            await poll_until(lambda: recorder.sees(T1), 5.0, what="garbage drops n9")
            assert discovery.invalid_values == 5


async def test_survives_etcd_kill_and_restart_without_lost_or_duplicated_targets(
    etcd_server: EtcdServer,
) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        r1 = Registrar(etcd, N1, ttl_s=TTL_S)
        async with services(etcd, r1) as (discovery, recorder, nursery):
            await poll_until(lambda: recorder.sees(T1), 5.0, what="n1 listed")
            await trio.to_thread.run_sync(etcd_server.kill)
            await poll_until(lambda: not etcd.health.up, 3.0, what="etcd down")
            await trio.sleep(0.5)
            await trio.to_thread.run_sync(etcd_server.start)
            restarted = trio.current_time()
            # a node that registers after the restart must show up
            r2 = Registrar(etcd, N2, ttl_s=TTL_S)
            await nursery.start(r2.run)
            await poll_until(lambda: recorder.sees(T1, T2), 10.0, what="n2 after restart")
            took = trio.current_time() - restarted
            print(f"discovery saw a new node {took:.2f} s after etcd restarted (kill -9)")
            assert len(recorder.diffs) == 2  # +n1, +n2: nothing removed or re-added
            assert discovery.resyncs == 0  # resumed from the last revision, no re-list


async def test_resyncs_after_etcd_lost_its_data(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        r1 = Registrar(etcd, N1, ttl_s=TTL_S)
        async with services(etcd, r1) as (discovery, recorder, _):
            await poll_until(lambda: recorder.sees(T1), 5.0, what="n1 listed")
            for i in range(3):  # move the old revision past what the new etcd will have
                await etcd.put(f"meshhealth/test/{i}", b"")
            await trio.to_thread.run_sync(lambda: etcd_server.restart(wipe_data=True))
            restarted = trio.current_time()
            await poll_until(lambda: discovery.resyncs == 1, 10.0, what="resync")
            await poll_until(lambda: r1.registrations == 2, 10.0, what="re-registered")
            await poll_until(lambda: recorder.sees(T1), 5.0, what="n1 back")
            took = trio.current_time() - restarted
            print(f"probe set whole again {took:.2f} s after a wiped etcd came back")
            assert discovery.probe_set() == {("c1", "n1"): T1}


async def test_exclude_and_several_clusters(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        other = make_node("n1", "10.9.0.1", cluster="c2")
        for node in (N1, N2, other):
            for entry_key, value in registration_entries(node):
                await etcd.put(entry_key, value)
        discovery = Discovery([("c1", etcd), ("c2", etcd)], exclude=[("c1", "n1")])
        async with trio.open_nursery() as nursery:
            await nursery.start(discovery.run)
            with trio.fail_after(5):
                await discovery.synced.wait()
            assert discovery.targets() == [T2, Target("c2", "n1", "10.9.0.1", None)]
            nursery.cancel_scope.cancel()


async def test_a_forged_loopback_or_link_local_node_is_not_a_target(
    etcd_server: EtcdServer,
) -> None:
    """A node entry written by someone with etcd access, naming this host's loopback or
    the link's metadata address: refused, logged once, counted by reason."""
    registry = Registry()
    refused = registry.counter("refused_total", "test", ("reason",))
    forged = [
        IPEntry("127.0.0.1", "127.0.0.1", "evil", 6, ("reserved:remote-node",)),
        IPEntry("10.0.0.7", "10.0.0.7", "sly", 6, ("reserved:remote-node",)),
        IPEntry("169.254.169.254", "10.0.0.7", "sly", 4, ("reserved:health",)),
    ]
    for entry in forged:
        key = f"meshhealth/state/ip/v1/c1/{entry.ip}"
        await etcdctl_put(etcd_server, key, encode_ip_entry(entry))
    for node in (
        make_node("evil", "127.0.0.1"),
        make_node("sly", "10.0.0.7", "169.254.169.254"),
        make_node("n8", "10.0.0.8"),
    ):
        await put_node_entry(etcd_server, node)
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        r1 = Registrar(etcd, N1, ttl_s=TTL_S)
        discovery = Discovery({"c1": etcd}, refused_metric=refused)
        async with trio.open_nursery() as nursery:
            await nursery.start(r1.run)
            await nursery.start(discovery.run)
            await poll_until(lambda: discovery.targets() == [T1], 5.0, what="n1 only")
            assert {(r.node, r.address, r.code) for r in discovery.refused} == {
                ("evil", "127.0.0.1", "loopback"),
                ("sly", "169.254.169.254", "link-local"),
            }
            assert refused.labels(reason="loopback").value == 1
            assert refused.labels(reason="link-local").value == 1
            # another write of the same forged entry is not a new refusal
            await etcdctl_put(
                etcd_server,
                "meshhealth/state/ip/v1/c1/127.0.0.1",
                encode_ip_entry(forged[0]),
            )
            version = discovery.version
            await etcdctl_put(
                etcd_server,
                "meshhealth/state/ip/v1/c1/10.0.0.8",
                encode_ip_entry(
                    IPEntry("10.0.0.8", "10.0.0.8", "n8", 6, ("reserved:remote-node",))
                ),
            )
            with trio.fail_after(5):
                await discovery.wait_changed(version)
            assert refused.labels(reason="loopback").value == 1
            nursery.cancel_scope.cancel()


async def test_an_ip_entry_its_node_entry_does_not_list_is_not_believed(
    etcd_server: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """n2 may write the ip entries of its own addresses only (per-node etcd users), but
    it can name another node in them: n1's node entry does not list the address, so the
    entry does not count (without this rule n1's HealthIP would turn 10.0.0.66)."""
    caplog.set_level(logging.WARNING)
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        r1, r2 = Registrar(etcd, N1, ttl_s=TTL_S), Registrar(etcd, N2, ttl_s=TTL_S)
        async with services(etcd, r1, r2) as (discovery, recorder, _):
            await poll_until(lambda: recorder.sees(T1, T2), 5.0, what="n1 and n2")
            forged = IPEntry("10.0.0.66", "10.0.0.1", "n1", 4, ("reserved:health",))
            version = discovery.version
            await etcdctl_put(etcd_server, keys.ip_key("c1", "10.0.0.66"), encode_ip_entry(forged))
            await poll_until(lambda: discovery.unvouched == (("c1", forged),), 5.0)
            assert discovery.version == version and discovery.targets() == [T1, T2]
            # an entry naming a node with no node entry at all does not count either
            ghost = IPEntry("10.0.0.77", "10.0.0.77", "ghost", 6, ("reserved:remote-node",))
            await etcdctl_put(etcd_server, keys.ip_key("c1", "10.0.0.77"), encode_ip_entry(ghost))
            await poll_until(lambda: len(discovery.unvouched) == 2, 5.0)
            assert discovery.targets() == [T1, T2]
    said = [r.getMessage() for r in caplog.records if "ignoring the ip entry" in r.getMessage()]
    assert said == [
        "discovery: ignoring the ip entry c1/10.0.0.66 of node n1: that node's entry does not "
        "list it (NodeIP 10.0.0.1)"
    ]
