"""follow_prefix against a real etcd: list, events, a list that fails is told once and
retried, a list that comes back is a fresh whole prefix."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from meshhealth.kvstore import KV, EventKind, WatchEvent, open_etcd
from meshhealth.kvstore.follow import follow_prefix
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer

PREFIX = "meshhealth/test/follow/"


class Copy:
    def __init__(self) -> None:
        self.held: dict[str, bytes] = {}
        self.lists = 0
        self.errors: list[str] = []

    def listed(self, kvs: Sequence[KV]) -> None:
        self.lists += 1
        self.held = {kv.key: kv.value for kv in kvs}

    def changed(self, events: Sequence[WatchEvent]) -> None:
        for event in events:
            if event.kind is EventKind.DELETE:
                self.held.pop(event.key, None)
            else:
                self.held[event.key] = event.value


async def test_lists_then_applies_events(etcd_server: EtcdServer) -> None:
    copy = Copy()
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await etcd.put(PREFIX + "a", b"1")
        await etcd.put("meshhealth/test/other", b"x")  # outside the prefix
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: follow_prefix(
                    etcd, PREFIX, what="test", on_list=copy.listed, on_events=copy.changed
                )
            )
            await poll_until(lambda: copy.held == {PREFIX + "a": b"1"}, 5.0, what="listed")
            await etcd.put(PREFIX + "b", b"2")
            await etcd.delete(PREFIX + "a")
            await poll_until(lambda: copy.held == {PREFIX + "b": b"2"}, 5.0, what="events")
            assert copy.lists == 1
            nursery.cancel_scope.cancel()


async def test_a_failing_list_is_told_once_and_retried() -> None:
    copy = Copy()
    # Nothing listens on port 1 of loopback: every list fails the same way.
    async with open_etcd("http://127.0.0.1:1", **FAST_ETCD) as etcd:
        with trio.move_on_after(3.0):
            await follow_prefix(
                etcd,
                PREFIX,
                what="test",
                on_list=copy.listed,
                on_events=copy.changed,
                on_error=copy.errors.append,
                list_timeout_s=0.5,
            )
    assert copy.lists == 0
    assert len(copy.errors) == 1, copy.errors  # retried for 3 s, told once
    assert "127.0.0.1:1" in copy.errors[0]
