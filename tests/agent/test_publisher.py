"""The publisher: when to write (pure policy), what is written, and writes to a real etcd."""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import dataclass, field

import pytest
import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.reporting.publisher import (
    Publisher,
    PublishPolicy,
    change_signature,
    health_report,
)
from meshhealth.cli.inspect_cmd import decode_rows
from meshhealth.documents.matrix import stale_after_s
from meshhealth.kvstore import open_etcd
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathHealth,
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    RoundReport,
    Target,
    TargetHealth,
    TargetType,
)
from meshhealth.probe.stats import StatsBook
from meshhealth.wire import keys
from meshhealth.wire.health import CORE_PATH_NAMES, encode_health_report
from meshhealth.wire.values import decode_value
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

OK = ProbeStatus.OK
TIMEOUT = ProbeStatus.TIMEOUT
A = {("c1", "a", "node/icmp"): OK, ("c1", "b", "node/icmp"): OK}
B = {("c1", "a", "node/icmp"): OK, ("c1", "b", "node/icmp"): TIMEOUT}


# --- the policy (pure) ---------------------------------------------------------------------


def _policy(interval_s: float = 10.0, refresh_s: float = 60.0) -> PublishPolicy:
    policy = PublishPolicy(interval_s, refresh_s=refresh_s, debounce_s=0.5)
    policy.note_registration((1, 1))
    return policy


def test_nothing_to_write_before_a_round_or_a_lease() -> None:
    policy = PublishPolicy(10.0)
    assert policy.due_at() is None
    policy.note_report(A, 100.0, now=0.0)
    assert policy.due_at() is None  # no lease yet: wait
    policy.note_registration((7, 1))
    assert policy.reason() == "first" and policy.due_at() == -math.inf


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [
        # (statuses, probe_time, now) per round after a first write of A at t=100
        ([(A, 110.0, 111.0)], None),  # unchanged, 1 interval: nothing
        ([(A, 150.0, 151.0)], None),  # unchanged, 5 intervals: nothing
        ([(A, 150.0, 151.0), (A, 160.0, 161.0)], "refresh"),  # 60 s: the liveness refresh
        ([(A, 159.9, 160.9)], None),  # a round a bit early: not yet (never closer than 60 s)
        ([(A, 159.9, 160.9), (A, 169.9, 170.9)], "refresh"),  # the next round past 60 s
        ([(B, 110.0, 111.0)], "change"),
        ([(B, 110.0, 111.0), (A, 110.2, 111.2)], None),  # flapped back within the debounce
        ([(B, 110.0, 111.0), (B, 111.0, 112.0)], "change"),
    ],
)
def test_when_to_write(rounds: list[tuple[dict, float, float]], expected: str | None) -> None:
    policy = _policy()
    policy.note_report(A, 100.0, now=101.0)
    policy.written(A, 100.0, now=101.0)
    for statuses, probe_time, now in rounds:
        policy.note_report(statuses, probe_time, now)
    assert policy.reason() == expected


def test_changes_are_debounced_from_the_first_one() -> None:
    policy = _policy()
    policy.note_report(A, 100.0, now=101.0)
    policy.written(A, 100.0, now=101.0)
    policy.note_report(B, 110.0, now=111.0)
    assert policy.due_at() == 111.5
    policy.note_report(B, 110.3, now=111.3)  # a probe-now round in between: same deadline
    assert policy.due_at() == 111.5
    policy.written(B, 110.3, now=111.5)
    assert policy.reason() is None


def test_a_new_lease_writes_again_at_once() -> None:
    policy = _policy()
    policy.note_report(A, 100.0, now=101.0)
    policy.written(A, 100.0, now=101.0)
    policy.note_registration((8, 2))  # re-registered: the old entry died with the old lease
    assert policy.reason() == "registration" and policy.due_at() == -math.inf


def test_a_round_during_a_write_is_compared_with_what_was_written() -> None:
    policy = _policy()
    policy.note_report(A, 100.0, now=101.0)
    policy.note_report(B, 101.0, now=101.1)  # arrives while A is being written
    policy.written(A, 100.0, now=101.2)
    assert policy.reason() == "change"


def test_rtt_and_loss_alone_write_nothing() -> None:
    """The signature holds statuses only: a report whose RTTs and losses moved (and
    whose probe_time is newer) is no change."""
    book = StatsBook(10)
    book.record(_round(100.0))
    first = health_report(_round(100.0), book.summaries(), cluster="c1", node="a", interval_s=10)
    slower = _round(110.0)
    slower = RoundReport(slower.started_at, slower.duration_s, slower.targets, tuple(
        PathReport(p.path, p.ip, _result(OK, 0.5)) for p in slower.paths
    ))  # fmt: skip
    book.record(slower)
    second = health_report(slower, book.summaries(), cluster="c1", node="a", interval_s=10)
    assert second.targets != first.targets  # the RTTs moved
    assert change_signature(second) == change_signature(first)
    # ... and a target that leaves is a change
    gone = health_report(
        RoundReport(120.0, 0.5, slower.targets[:1], slower.paths[:4]),
        book.summaries(), cluster="c1", node="a", interval_s=10,
    )  # fmt: skip
    assert change_signature(gone) != change_signature(first)


@pytest.mark.parametrize("interval_s", [1.0, 10.0, 25.0, 120.0])
def test_steady_state_write_rate(interval_s: float) -> None:
    """An hour of rounds without a change: the first write, then a refresh on the first
    round at least a minute after the last write: never more than one a minute, never
    more than a round later (an interval past a minute refreshes every round)."""
    policy = _policy(interval_s=interval_s)
    written_at: list[float] = []
    for i in range(round(3600 / interval_s)):
        jitter = 0.03 * interval_s * (1 if i % 3 else -1)  # jittered starts
        probe_time = 100.0 + interval_s * i + jitter
        policy.note_report(A, probe_time, now=probe_time + 0.15 * interval_s)
        if policy.due_at() is not None:
            policy.written(A, probe_time, now=probe_time + 0.15 * interval_s)
            written_at.append(probe_time)
    gaps = [b - a for a, b in itertools.pairwise(written_at)]
    assert min(gaps) >= min(defaults.PUBLISH_REFRESH_S, interval_s * 0.94)
    assert max(gaps) <= max(defaults.PUBLISH_REFRESH_S, interval_s) + 1.07 * interval_s
    print(f"interval {interval_s:g} s: {len(written_at)} writes in an hour")


@pytest.mark.parametrize("interval_s", [0.5, 1.0, 7.0, 10.0, 25.0, 35.0, 59.0, 61.0, 300.0])
def test_refresh_keeps_readers_below_the_stale_bound(interval_s: float) -> None:
    """The worst case a reader meets: rounds start an interval after the previous one
    plus up to a tenth of one of loop lag (prober_loop.py), each lasts a whole interval
    (the probe timeout is shorter), and just before a refresh lands the entry is at its
    oldest. It stays below the matrix's `stale_after_s`, the one staleness rule."""
    policy = _policy(interval_s)
    last_written = None
    oldest = 0.0
    for i in range(round(2000 / interval_s)):
        probe_time = interval_s * i + (0.1 if i % 2 else 0.0) * interval_s
        landed = probe_time + interval_s  # the round's end, when the write lands
        if last_written is not None:
            oldest = max(oldest, landed - last_written)
        policy.note_report(A, probe_time, now=landed)
        if policy.due_at() is not None:
            policy.written(A, probe_time, now=landed)
            last_written = probe_time
    assert oldest <= max(defaults.PUBLISH_REFRESH_S, interval_s) + 2.1 * interval_s
    assert oldest < stale_after_s(interval_s) - defaults.STALE_MARGIN_S


# --- what is written (pure) ----------------------------------------------------------------


def _result(status: ProbeStatus, rtt_s: float | None = None) -> ProbeResult:
    rtts = (rtt_s,) if rtt_s is not None else ()
    return ProbeResult(status, 100.0, rtts, sent=1, received=len(rtts))


def _round(started_at: float, status_b: ProbeStatus = OK) -> RoundReport:
    a = Target("c1", "a", "127.0.0.1", "127.0.0.2")
    b = Target("c2", "b", "127.0.1.1", None)
    paths = [
        PathReport(PathKey("c1", "a", t, p), "127.0.0.1", _result(OK, 0.001))
        for t in TargetType
        for p in REACHABILITY_PROTOCOLS
    ]
    paths += [
        PathReport(
            PathKey("c2", "b", TargetType.NODE, p),
            "127.0.1.1",
            _result(status_b, 0.002 if status_b is OK else None),
        )
        for p in REACHABILITY_PROTOCOLS
    ]
    return RoundReport(started_at, 0.5, (a, b), tuple(paths))


def test_health_report_has_every_probed_path() -> None:
    book = StatsBook(10)
    book.record(_round(100.0))
    book.record(_round(110.0, TIMEOUT))
    report = health_report(
        _round(110.0, TIMEOUT), book.summaries(), cluster="c1", node="a", interval_s=10.0
    )
    assert (report.cluster, report.node, report.probe_time, report.interval_s) == (
        "c1", "a", 110.0, 10.0,
    )  # fmt: skip
    by_node = {t.node: t for t in report.targets}
    assert sorted(by_node["a"].paths) == sorted(CORE_PATH_NAMES)
    assert sorted(by_node["b"].paths) == ["node/http", "node/icmp"]  # no endpoint
    icmp = by_node["b"].paths["node/icmp"]
    assert (icmp.status, icmp.rtt_s, icmp.loss) == (TIMEOUT, None, 0.5)
    assert by_node["a"].paths["node/icmp"].rtt_s == 0.001
    assert change_signature(report)[("c2", "b", "node/http")] is TIMEOUT
    # it encodes, and `meshhealth inspect` decodes it
    key = keys.health_key("c1", "a")
    (row,) = decode_rows([(key, encode_health_report(report))])
    assert row.error is None and row.value is not None
    assert row.value["targets"][1]["paths"]["node/icmp"]["status"] == "timeout"


# --- against a real etcd -------------------------------------------------------------------


@dataclass
class FakeRegistrar:
    """What the publisher reads of the registrar (its lease is a real etcd lease)."""

    lease_id: int | None = None
    changes: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def new_lease(self, lease_id: int) -> None:
        self.lease_id = lease_id
        self.changes += 1
        self.changed.set()
        self.changed = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        while self.changes == seen:
            await self.changed.wait()
        return self.changes


async def considered(publisher: Publisher, round_: RoundReport, book: StatsBook) -> None:
    """Hand `round_` to the publisher and wait until its writer has looked at it (and,
    if it wrote, finished the write)."""
    settled = publisher.settled
    book.record(round_)
    publisher.note_round(round_, book.summaries())
    await poll_until(lambda: publisher.settled > settled, 5, what="the round considered")


async def test_publishes_under_the_lease_and_again_after_a_new_one(
    etcd_server: EtcdServer,
) -> None:
    key = keys.health_key("c1", "a")
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = FakeRegistrar()
        metrics = WriteCounters()
        publisher = Publisher(
            etcd, registrar, cluster="c1", node="a", interval_s=1.0, debounce_s=0.05,
            metrics=metrics,
        )  # fmt: skip
        book = StatsBook(10)
        async with trio.open_nursery() as nursery:
            await nursery.start(publisher.run)
            await considered(publisher, _round(100.0), book)
            assert publisher.writes == 0  # no lease yet
            registrar.new_lease(await etcd.lease_grant(10))
            await poll_until(lambda: publisher.writes == 1, 5, what="first write")
            kv, _ = await etcd.get(key)
            assert kv is not None and kv.lease_id == registrar.lease_id
            assert decode_value(key, kv.value) == publisher.last_written
            assert (metrics.writes.value, metrics.write_bytes.value) == (1, len(kv.value))

            # the same statuses again: no write
            await considered(publisher, _round(100.5), book)
            assert publisher.writes == 1

            # a status change: one write, after the debounce
            book.record(_round(101.0, TIMEOUT))
            publisher.note_round(_round(101.0, TIMEOUT), book.summaries())
            await poll_until(lambda: publisher.writes == 2, 5, what="change written")
            assert publisher.writes_by_reason == {"first": 1, "change": 1}

            # the lease is lost (its entries go with it); a new one: written again
            await etcd.lease_revoke(registrar.lease_id)
            assert (await etcd.get(key))[0] is None
            registrar.new_lease(await etcd.lease_grant(10))
            await poll_until(lambda: publisher.writes == 3, 5, what="re-published")
            kv, _ = await etcd.get(key)
            assert kv is not None and kv.lease_id == registrar.lease_id
            nursery.cancel_scope.cancel()
    # `meshhealth inspect` decodes the health entry from etcd
    done = await trio.run_process(
        [sys.executable, "-m", "meshhealth", "inspect", key, "--etcd", etcd_server.endpoint],
        capture_stdout=True, capture_stderr=True, check=True, cwd=REPO_ROOT,
    )  # fmt: skip
    shown = json.loads(done.stdout)
    assert shown["key"] == key
    assert shown["value"]["probe_time"] == 101.0
    assert shown["value"]["targets"][1]["paths"]["node/http"]["status"] == "timeout"


async def test_etcd_down_is_retried(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        registrar = FakeRegistrar()
        registrar.new_lease(await etcd.lease_grant(30))
        publisher = Publisher(etcd, registrar, cluster="c1", node="a", interval_s=1.0)
        book = StatsBook(10)
        book.record(_round(100.0))
        await trio.to_thread.run_sync(etcd_server.stop_process)  # SIGSTOP: no answers
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(publisher.run)
                publisher.note_round(_round(100.0), book.summaries())
                await poll_until(lambda: publisher.write_errors >= 1, 10, what="a failed write")
                assert publisher.writes == 0
                await trio.to_thread.run_sync(etcd_server.cont)
                await poll_until(lambda: publisher.writes == 1, 15, what="written after etcd")
                nursery.cancel_scope.cancel()
        finally:
            await trio.to_thread.run_sync(etcd_server.cont)


def test_a_secondary_path_status_is_a_change() -> None:
    """Dual stack: a secondary address's path counts like a primary one, under its own
    name (a primary and a secondary path of the same name never mask each other)."""
    ok = {"node/icmp": PathHealth(OK, 0.001, 0.0)}
    down = {"node/icmp": PathHealth(TIMEOUT, None, 1.0)}

    def report(secondary: dict[str, PathHealth]) -> HealthReport:
        return HealthReport("a", "c1", 100.0, 10.0, (TargetHealth("c1", "b", ok, secondary),))

    assert change_signature(report(ok)) == change_signature(report(dict(ok)))
    assert change_signature(report(down)) != change_signature(report(ok))
    assert change_signature(report({})) != change_signature(report(ok))
