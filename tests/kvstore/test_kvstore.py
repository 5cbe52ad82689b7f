"""The kvstore layer against a real etcd: requests, leases, liveness, watch resume."""

from __future__ import annotations

import pytest
import trio

from meshhealth.kvstore import (
    Compacted,
    Delete,
    EtcdUnavailable,
    EventKind,
    Get,
    KeyAbsent,
    LeaseIs,
    PrefixWatch,
    Put,
    StoreReset,
    WatchBatch,
    open_etcd,
)
from tests.etcd_helpers import FAST_ETCD, etcdctl_get_prefix_async, poll_until
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import EtcdNotFound, LocalEtcd, free_loopback_port

P = "meshhealth/test/"


async def test_requests_and_transactions(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        assert await etcd.get(P + "missing") == (None, 1)
        revision = await etcd.put(P + "a", b"1")
        kv, read_revision = await etcd.get(P + "a")
        assert kv is not None
        assert (kv.key, kv.value, kv.mod_revision, kv.lease_id) == (P + "a", b"1", revision, 0)
        assert read_revision == revision
        await etcd.put("meshhealth/other", b"x")
        await etcd.put(P + "b", b"2")
        kvs, _ = await etcd.get_prefix(P)
        assert [(k.key, k.value) for k in kvs] == [(P + "a", b"1"), (P + "b", b"2")]
        assert await etcd.put_if_absent(P + "a", b"again") is False
        assert await etcd.put_if_absent(P + "c", b"3") is True
        assert await etcd.delete(P + "c") is True
        assert await etcd.delete(P + "c") is False

        lease_id = await etcd.lease_grant(30)
        result = await etcd.txn(
            [KeyAbsent(P + "d")], [Put(P + "d", b"4", lease_id), Get(P + "a")], [Get(P + "d")]
        )
        assert result.succeeded
        assert [kv.value for kv in result.gets[0]] == [b"1"]
        failed = await etcd.txn([KeyAbsent(P + "d")], [Delete(P + "d")], [Get(P + "d")])
        assert not failed.succeeded
        assert failed.gets[0][0].lease_id == lease_id
        assert (await etcd.txn([LeaseIs(P + "d", lease_id)], [Delete(P + "d")])).succeeded
        assert not (await etcd.txn([LeaseIs(P + "a", lease_id)], [Delete(P + "a")])).succeeded
        # etcdctl sees what we wrote
        seen = await etcdctl_get_prefix_async(etcd_server, P)
        assert seen == {P + "a": b"1", P + "b": b"2"}
        assert etcd.stats.requests > 10
        assert etcd.stats.errors == 0


async def test_lease_expiry_removes_keys(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        lease_id = await etcd.lease_grant(2)
        await etcd.put(P + "leased", b"x", lease_id=lease_id)
        assert await etcd.lease_keepalive_once(lease_id) == 2
        remaining, granted = await etcd.lease_time_to_live(lease_id)
        assert granted == 2
        assert 0 < remaining <= 2

        async def gone() -> bool:
            return P + "leased" not in await etcdctl_get_prefix_async(etcd_server, P)

        took = await poll_until(gone, 6.0, interval_s=0.2, what="leased key expired")
        print(f"lease of 2 s expired after {took:.2f} s")
        assert await etcd.lease_keepalive_once(lease_id) == 0
        assert (await etcd.lease_time_to_live(lease_id))[0] == -1
        assert await etcd.lease_revoke(lease_id) is False


async def test_revoke_deletes_keys_at_once(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        lease_id = await etcd.lease_grant(30)
        await etcd.put(P + "leased", b"x", lease_id=lease_id)
        assert await etcd.lease_revoke(lease_id) is True
        kv, _ = await etcd.get(P + "leased")
        assert kv is None


async def test_unreachable_etcd_is_one_line_naming_the_endpoint() -> None:
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    async with open_etcd(url, **FAST_ETCD) as etcd:
        with pytest.raises(EtcdUnavailable) as caught:
            await etcd.get("meshhealth/x")
        assert str(caught.value) == f"etcd {url} unreachable: connection refused"
        await poll_until(lambda: etcd.health.last_error.startswith(f"etcd {url}"), 3.0)
        assert not etcd.health.up
        assert etcd.stats.errors == 1


async def test_open_etcd_lets_body_errors_through_unwrapped() -> None:
    with pytest.raises(KeyError):
        async with open_etcd(f"http://127.0.0.1:{free_loopback_port()}", **FAST_ETCD):
            raise KeyError("body")


def test_missing_etcd_binary_says_how_to_install() -> None:
    with pytest.raises(EtcdNotFound, match="etcd-does-not-exist not found: apt-get install"):
        LocalEtcd(binary="etcd-does-not-exist")


async def collect(watch: PrefixWatch, into: list[WatchBatch], stop_key: str) -> None:
    async for batch in watch:
        into.append(batch)
        if any(e.key == stop_key for e in batch.events):
            return


async def test_watch_resumes_after_kill_and_restart(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        start = await etcd.put(P + "before", b"0")
        batches: list[WatchBatch] = []
        async with (
            etcd.watch_prefix(P, start_revision=start + 1) as watch,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(collect, watch, batches, P + "after")
            await etcd.put(P + "k1", b"1")
            await poll_until(lambda: len(batches) == 1, 5.0, what="first event")
            await trio.to_thread.run_sync(etcd_server.kill)
            await poll_until(lambda: not etcd.health.up, 5.0, what="etcd down")
            await trio.to_thread.run_sync(etcd_server.restart)
            restarted = trio.current_time()
            await poll_until(lambda: etcd.health.up, 10.0, what="etcd up again")
            await etcd.put(P + "after", b"2")
            await poll_until(lambda: len(batches) == 2, 5.0, what="event after restart")
            recovered_s = trio.current_time() - restarted
        print(f"watch delivered a new event {recovered_s:.2f} s after etcd restarted")
        events = [(e.kind, e.key) for b in batches for e in b.events]
        assert events == [(EventKind.PUT, P + "k1"), (EventKind.PUT, P + "after")]
        assert watch.restarts >= 1
        assert recovered_s < 5.0


async def test_watch_from_compacted_revision_raises(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        for i in range(5):
            revision = await etcd.put(P + "k", str(i).encode())
        await trio.to_thread.run_sync(etcd_server.etcdctl, "compact", str(revision))
        async with etcd.watch_prefix(P, start_revision=2) as watch:
            with pytest.raises(Compacted) as caught, trio.fail_after(5):
                await watch.__anext__()
        assert caught.value.revision == revision


async def test_watch_detects_a_wiped_etcd(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        for i in range(5):
            revision = await etcd.put(P + "k", str(i).encode())
        async with (
            etcd.watch_prefix(P, start_revision=revision + 1) as watch,
            trio.open_nursery() as nursery,
        ):

            async def wipe() -> None:
                await trio.sleep(0.2)
                await trio.to_thread.run_sync(lambda: etcd_server.restart(wipe_data=True))

            nursery.start_soon(wipe)
            with pytest.raises(StoreReset), trio.fail_after(10):
                await watch.__anext__()


async def test_stopped_etcd_is_reported_down_and_recovers(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await poll_until(lambda: etcd.health.up, 3.0, what="etcd up")
        start = await etcd.put(P + "k0", b"0")
        batches: list[WatchBatch] = []
        async with (
            etcd.watch_prefix(P, start_revision=start + 1) as watch,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(collect, watch, batches, P + "k2")
            await etcd.put(P + "k1", b"1")
            await poll_until(lambda: len(batches) == 1, 5.0, what="first event")
            etcd_server.stop_process()
            try:
                down_s = await poll_until(
                    lambda: not etcd.health.up, 5.0, interval_s=0.02, what="reported down"
                )
                print(f"SIGSTOPped etcd reported down after {down_s:.2f} s")
                # liveness interval + timeout + the trio margin, with slack
                assert down_s < 0.3 + 0.5 + 1.0 + 1.0
                assert "no answer within" in etcd.health.last_error
                with pytest.raises(EtcdUnavailable, match="unreachable"):
                    await etcd.get(P + "k0")
            finally:
                etcd_server.cont()
            up_s = await poll_until(lambda: etcd.health.up, 5.0, what="up after SIGCONT")
            print(f"etcd reported up {up_s:.2f} s after SIGCONT")
            await etcd.put(P + "k2", b"2")
        assert [e.key for b in batches for e in b.events] == [P + "k1", P + "k2"]


async def test_cancelled_watch_leaves_no_thread_reading(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        async with etcd.watch_prefix(P, start_revision=1) as watch:
            with trio.move_on_after(0.3) as scope:
                await watch.__anext__()  # nothing to read: blocks until cancelled
            assert scope.cancelled_caught
        await poll_until(lambda: etcd.stats.watch_threads_busy == 0, 3.0, what="watch thread ended")
        assert etcd.stats.watch_streams == 1


async def test_fails_over_to_a_live_endpoint(etcd_server: EtcdServer) -> None:
    dead = f"http://127.0.0.1:{free_loopback_port()}"
    async with open_etcd(f"{dead},{etcd_server.endpoint}", **FAST_ETCD) as etcd:
        for i in range(6):  # the first endpoint tried is random: each call must work
            await etcd.put(P + "k", str(i).encode())
        kv, _ = await etcd.get(P + "k")
        assert kv is not None
        assert kv.value == b"5"
        await poll_until(lambda: etcd.health.up, 3.0, what="up with one live endpoint")


async def test_every_endpoint_down_names_them() -> None:
    urls = [f"http://127.0.0.1:{free_loopback_port()}" for _ in range(2)]
    async with open_etcd(",".join(urls), **FAST_ETCD) as etcd:
        with pytest.raises(EtcdUnavailable) as caught:
            await etcd.get(P + "k")
        # the liveness check may have marked both failed before this first request
        all_failed = f"etcd {','.join(urls)} unreachable: all endpoints failed in the last 1s"
        refused = {f"etcd {url} unreachable: connection refused" for url in urls}
        assert str(caught.value) in refused | {all_failed}
        with pytest.raises(EtcdUnavailable) as again:
            await etcd.get(P + "k")
        assert str(again.value).startswith(
            f"etcd {','.join(urls)} unreachable: all endpoints failed in the last 1s"
        )
        # and it says why they failed
        assert "connection refused" in str(again.value)


async def test_watch_works_without_the_liveness_task(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, liveness=False, **FAST_ETCD) as etcd:
        assert not etcd.health.up  # nobody checked yet
        async with etcd.watch_prefix(P, start_revision=1) as watch:
            await etcd.put(P + "k", b"1")
            assert etcd.health.up  # a request that succeeds proves etcd answers
            with trio.fail_after(5):
                batch = await watch.__anext__()
        assert [e.key for e in batch.events] == [P + "k"]
