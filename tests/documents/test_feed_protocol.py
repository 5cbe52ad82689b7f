"""The feed's messages and the coalescing queue (pure)."""

from __future__ import annotations

import json

import pytest

from meshhealth.documents.feed import (
    FEED_VERSION,
    ROUND_KEY,
    SNAPSHOT_KEY,
    CoalescingQueue,
    feed_socket_path,
    path_changes,
    round_message,
    rtt_bucket,
)
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    build_status_document,
)
from meshhealth.model import (
    ProbeResult,
    ProbeStatus,
    Target,
)


@pytest.mark.parametrize(
    ("rtt_s", "bucket"),
    [(None, None), (0.0, 0), (99e-6, 0), (100e-6, 1), (0.5e-3, 2), (2e-3, 3), (0.5, 8), (5.0, 9)],
)
def test_rtt_bucket(rtt_s: float | None, bucket: int | None) -> None:
    assert rtt_bucket(rtt_s) == bucket


def ok(rtt_s: float, at: float = 1000.0) -> ProbeResult:
    return ProbeResult(ProbeStatus.OK, at, rtts_s=(rtt_s,), received=1)


def failed(status: ProbeStatus = ProbeStatus.TIMEOUT, at: float = 1000.0) -> ProbeResult:
    return ProbeResult(status, at)


@pytest.mark.parametrize(
    ("previous", "current", "changed"),
    [
        (None, ok(1e-3), ["status", "rtt_bucket"]),
        (ok(1.1e-3), ok(1.2e-3), []),
        (ok(1.1e-3), ok(5e-3), ["rtt_bucket"]),
        (ok(1e-3), failed(), ["status", "rtt_bucket"]),
        (failed(), failed(ProbeStatus.REFUSED), ["status"]),
        (failed(), failed(), []),
    ],
)
def test_path_changes(
    previous: ProbeResult | None, current: ProbeResult, changed: list[str]
) -> None:
    assert path_changes(previous, current) == changed


@pytest.mark.parametrize(
    ("admin", "feed"),
    [
        ("/run/meshhealth/health.sock", "/run/meshhealth/health.feed.sock"),
        ("/tmp/node1.sock", "/tmp/node1.feed.sock"),
        ("/tmp/admin", "/tmp/admin.feed"),
        ("/tmp/node1.feed.sock", "/tmp/node1.feed.sock"),
    ],
)
def test_feed_socket_path(admin: str, feed: str) -> None:
    assert feed_socket_path(admin) == feed


def drain(queue: CoalescingQueue) -> list[str]:
    out = []
    while (message := queue.pop()) is not None:
        out.append(message)
    return out


def test_queue_keeps_newest_per_key_in_order_of_last_update() -> None:
    queue = CoalescingQueue(max_pending=10, max_rounds_behind=3)
    for key, message in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("c", "c1")]:
        assert queue.put(key, message)
    assert len(queue) == 3
    assert drain(queue) == ["b1", "a2", "c1"]
    assert queue.coalesced == 1
    assert not queue.finished


def test_queue_lags_after_too_many_rounds_and_says_so_once() -> None:
    queue = CoalescingQueue(max_pending=10, max_rounds_behind=2)
    assert queue.put("p", "x")
    assert queue.put(ROUND_KEY, "r1", is_round=True)
    assert queue.put(ROUND_KEY, "r2", is_round=True)
    assert not queue.put(ROUND_KEY, "r3", is_round=True)
    assert queue.lagging
    assert not queue.put("p", "y")  # nothing more is queued
    messages = drain(queue)
    assert len(messages) == 1
    lagging = json.loads(messages[0])
    assert lagging["type"] == "lagging" and lagging["v"] == FEED_VERSION
    assert "2 rounds" in lagging["reason"]
    assert queue.finished


def test_queue_round_delivered_resets_the_count() -> None:
    queue = CoalescingQueue(max_pending=10, max_rounds_behind=1)
    for number in range(5):  # a client that keeps up never lags
        assert queue.put(ROUND_KEY, f"r{number}", is_round=True)
        assert drain(queue) == [f"r{number}"]


def test_queue_lags_when_too_many_keys_pend() -> None:
    queue = CoalescingQueue(max_pending=3, max_rounds_behind=5)
    assert queue.put(SNAPSHOT_KEY, "s")
    assert all(queue.put(key, key) for key in ("a", "b"))
    assert not queue.put("c", "c")
    assert json.loads(drain(queue)[0])["dropped"] == 4


def test_queue_rejects_silly_bounds() -> None:
    with pytest.raises(ValueError):
        CoalescingQueue(max_pending=1, max_rounds_behind=1)


def test_round_message_carries_the_probe_set_without_paths() -> None:
    status = build_status_document(
        StatusInputs(
            local=LocalNode("c1", "n1", "127.0.0.1", "127.0.1.1"),
            targets=[Target("c1", "n1", "127.0.0.1", "127.0.1.1"), Target("c1", "n2", "127.0.0.2")],
            summaries={},
            probe_time=100.0,
            probe_interval_s=1.0,
            etcd=EtcdState(up=True),
            round=RoundState(running=False, completed=3),
            now=101.0,
        )
    )
    message = round_message(status, 0.25, seq=7)
    assert message["type"] == "round" and message["seq"] == 7
    assert message["probe_time"] == "1970-01-01T00:01:40Z"
    assert message["summary"]["total"] == 2
    assert [(n["name"], n["node_ip"], n["health_ip"]) for n in message["nodes"]] == [
        ("n1", "127.0.0.1", "127.0.1.1"),
        ("n2", "127.0.0.2", None),
    ]
    json.dumps(message)  # plain JSON types only
