"""Roll-ups in etcd (agent/reporting/rollup_publisher.py) against a real etcd: written
when a 10-minute window closes and at most then, read back by the next run and
continued; and a real agent keeps them across restarts."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.path_rollups import PathRollups
from meshhealth.agent.reporting.rollup_publisher import RollupPublisher
from meshhealth.kvstore import open_etcd
from meshhealth.model import (
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
    TargetType,
)
from meshhealth.wire import keys
from meshhealth.wire.rollup import NodeRollups, PathRollup, Window, decode_rollups, encode_rollups
from tests.agent_cluster import AgentCluster, wait_for
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer

T0 = 1_700_000_400.0  # a 10-minute boundary
N2 = Target("c1", "n2", "127.0.0.2")
ICMP = PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP)
KEY = keys.rollup_key("c1", "n1")
START_S = 60.0  # an agent's start on a loaded test machine (a second when idle)


def round_at(at: float, ok: bool = True) -> RoundReport:
    status = ProbeStatus.OK if ok else ProbeStatus.TIMEOUT
    result = ProbeResult(status, at, (0.002,) if ok else (), 1, 1 if ok else 0)
    return RoundReport(at, 0.1, (N2,), (PathReport(ICMP, "127.0.0.2", result),))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def run_rounds(publisher: RollupPublisher, clock: Clock, start: float, count: int) -> None:
    """`count` rounds 60 s apart from `start`, every fifth failing."""
    for i in range(count):
        clock.now = start + i * 60 + 1
        publisher.note_round(round_at(start + i * 60, ok=i % 5 != 4))


async def test_written_when_a_window_closes_and_continued_after_a_restart(
    etcd_server: EtcdServer,
) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        clock = Clock(T0)
        metrics = WriteCounters()
        first = RollupPublisher(
            etcd, PathRollups("c1", "n1"), metrics=metrics, spread_s=0, clock=clock
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await first.restored.wait()
            await run_rounds(first, clock, T0, 10)  # T0 .. T0 + 540: one window, open
            await trio.testing.wait_all_tasks_blocked()
            assert first.writes == 0
            await run_rounds(first, clock, T0 + 600, 10)  # the first round closes it
            await poll_until(lambda: first.writes == 1, 5, what="the first window written")
            await trio.testing.wait_all_tasks_blocked()
            assert first.writes == 1  # nine more rounds in the next window: no write
            nursery.cancel_scope.cancel()
        kv, _ = await etcd.get(KEY)
        assert kv is not None and kv.lease_id == 0  # no lease: it outlives the agent
        assert (metrics.writes.value, metrics.write_bytes.value) == (1, len(kv.value))
        (path,) = decode_rollups(kv.value).paths
        assert [(w.start, w.probes, w.failures) for w in path.minutes10] == [(T0, 10, 2)]

        # The agent restarts 30 minutes later: the next run reads the value back first.
        clock.now = T0 + 1800
        second = RollupPublisher(etcd, PathRollups("c1", "n1"), spread_s=0, clock=clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(second.run)
            await second.restored.wait()
            await run_rounds(second, clock, T0 + 1800, 11)  # closes T0 + 1800's window
            await poll_until(lambda: second.writes == 1, 5, what="written after the restart")
            nursery.cancel_scope.cancel()
        kv, _ = await etcd.get(KEY)
        assert kv is not None
        (path,) = decode_rollups(kv.value).paths
        assert [(w.start, w.probes) for w in path.minutes10] == [(T0, 10), (T0 + 1800, 10)]


async def test_a_value_that_does_not_decode_is_counted_and_replaced(
    etcd_server: EtcdServer,
) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await etcd.put(KEY, b"garbage")
        clock = Clock(T0)
        publisher = RollupPublisher(etcd, PathRollups("c1", "n1"), spread_s=0, clock=clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            await publisher.restored.wait()
            assert publisher.invalid_metric.value == 1
            await run_rounds(publisher, clock, T0, 11)
            await poll_until(lambda: publisher.writes == 1, 5, what="replaced")
            nursery.cancel_scope.cancel()
        kv, _ = await etcd.get(KEY)
        assert kv is not None and decode_rollups(kv.value).paths[0].node == "n2"


def test_a_real_agent_reads_its_roll_ups_back_and_they_survive_its_restarts(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    import time

    now = time.time()
    hour = now - now % 3600 - 3600
    earlier = NodeRollups(
        "c1",
        "n1",
        hour + 3000,
        (
            PathRollup(
                "c1",
                "n9",  # a node that is gone by now: its windows stay
                "node/icmp",
                (Window(hour + 600, 60, 6, 0.001, 0.002, 0.003),),
                (Window(hour - 3600, 360, 0, 0.001, 0.002, 0.004),),
            ),
        ),
    )
    value = encode_rollups(earlier)
    stored(etcd_server, value)
    read_back = "read back 1 paths of roll-ups"
    with AgentCluster(tmp_path, etcd_server.endpoint, cluster="c1", interval_s=1) as cluster:
        n1 = cluster.start("n1", wait=False)
        cluster.wait_admin(n1, timeout_s=START_S)
        wait_for(n1.log_text, lambda log: read_back in log, START_S, what="read back")
        assert cluster.stop(n1, signal.SIGTERM) == 0
        assert stored(etcd_server) == value  # a clean stop leaves it (no lease)
        cluster.spawn(n1)
        cluster.wait_admin(n1, timeout_s=START_S)
        wait_for(
            n1.log_text, lambda log: log.count(read_back) == 2, START_S, what="read back again"
        )
        assert "roll-ups" not in n1.log_text().replace(read_back, "")  # no warning


def stored(server: EtcdServer, value: bytes | None = None) -> bytes | None:
    """Put `value` under KEY (when given); what KEY holds."""

    async def io() -> bytes | None:
        async with open_etcd(server.endpoint, **FAST_ETCD) as etcd:
            if value is not None:
                await etcd.put(KEY, value)
            kv, _ = await etcd.get(KEY)
            return None if kv is None else kv.value

    return trio.run(io)


def test_nodes_write_at_their_own_place_in_the_spread() -> None:
    from meshhealth.agent.reporting.rollup_publisher import write_phase

    phases = [write_phase("c1", f"node-{i}") for i in range(600)]
    assert all(0 <= phase < 1 for phase in phases)
    assert write_phase("c1", "node-1") == phases[1]  # the same on every start
    per_minute = [0] * 5  # 600 nodes over a 300 s spread: about 120 a minute
    for phase in phases:
        per_minute[int(phase * 5)] += 1
    assert all(80 <= count <= 160 for count in per_minute), per_minute
