"""The findings timeline against a real etcd: the aggregator writes one event per
opening and closing, a finding gone before it settles writes nothing, a takeover and a
restart of the aggregator neither reopen nor lose an event, and `meshhealth events` /
`diagnose --at` read them as users do (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import trio

from meshhealth.kvstore import Etcd
from meshhealth.timefmt import iso_time
from meshhealth.wire import keys
from meshhealth.wire.event import FindingEvent
from meshhealth.wire.values import decode_event_value
from tests import matrix_stories as S
from tests.agent.test_cluster_view import (
    TAKEOVER_BOUND_S,
    Agent,
    _put_fresh_reports,
    agent,
    leaders,
)
from tests.etcd_helpers import poll_until
from tests.plugins.etcd_server import EtcdServer


async def stored_events(etcd: Etcd) -> dict[str, FindingEvent]:
    kvs, _ = await etcd.get_prefix(keys.events_prefix("lab1"))
    return {e.id: e for e in (decode_event_value(kv.key, kv.value) for kv in kvs)}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def open_of(events: dict[str, FindingEvent]) -> dict[str, FindingEvent]:
    return {i: e for i, e in events.items() if e.closed_at is None}


async def settled(a: Agent) -> bool:
    """The holder's last summary is of every report (one of some of them has other
    findings first: path, node-down) and has node3's own finding, and the open events
    are its findings."""
    written = a.aggregator.written
    if written is None or not any(f.nodes == ("lab1/node3",) for f in written.findings):
        return False
    if written.failing_observers.get("lab1/node3") != 2 or "lab1/node3" not in written.discounted:
        return False  # not every report is in yet
    wanted = sorted((f.kind, f.nodes) for f in written.findings)
    return sorted(e.identity for e in open_of(await stored_events(a.etcd)).values()) == wanted


# The reports of a round are written one by one here; a summary of some of them has
# other findings for a moment (path, node-down). As in an agent, those are not events.
SETTLE_S = 1.0


async def test_takeover_and_restart_keep_one_event_per_finding(etcd_server: EtcdServer) -> None:
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1", events_settle_s=SETTLE_S) as a1,
        agent(nursery, etcd_server.endpoint, "node2", events_settle_s=SETTLE_S) as a2,
    ):
        await poll_until(lambda: len(leaders([a1, a2])) == 1, 20, what="a holder")
        first, other = (a1, a2) if a1.election.leading else (a2, a1)
        await _put_fresh_reports(a1.etcd, S.node_unreachable_by_all())
        await poll_until(lambda: settled(first), 20, what="node3's finding opens an event")
        # Settled: another round of the same reports writes nothing.
        before = await stored_events(a1.etcd)
        evaluations = first.aggregator.evaluations
        await _put_fresh_reports(a1.etcd, S.node_unreachable_by_all())
        await poll_until(
            lambda: first.aggregator.evaluations > evaluations, 10, what="re-evaluated"
        )
        assert await stored_events(a1.etcd) == before
        still_open = open_of(before)
        assert still_open and all(e.opened_by == first.name for e in before.values())
        assert first.aggregator.timeline.opened == len(before)  # one write per opening

        # The holder crashes; the other agent takes over and reads the open events.
        first.lease.crash()
        first.scope.cancel()
        await poll_until(lambda: other.election.leading, TAKEOVER_BOUND_S, what="takeover")
        await poll_until(
            lambda: other.aggregator.evaluations > 0, 10, what="the new holder evaluates"
        )
        await _put_fresh_reports(other.etcd, S.node_unreachable_by_all())
        evaluations = other.aggregator.evaluations
        await poll_until(
            lambda: other.aggregator.evaluations > evaluations, 10, what="re-evaluated"
        )
        assert await settled(other)
        after = await stored_events(other.etcd)
        assert after == before, [
            (after.get(k), before.get(k))
            for k in after.keys() | before.keys()
            if after.get(k) != before.get(k)
        ]
        assert other.aggregator.timeline.opened == 0

        # The node recovers: each open event is closed once, by the new holder.
        await _put_fresh_reports(other.etcd, S.healthy())

        async def all_closed() -> bool:
            return not open_of(await stored_events(other.etcd))

        await poll_until(all_closed, 20, what="the events close")
        closed = await stored_events(other.etcd)
        assert closed.keys() == before.keys()
        for event_id, event in closed.items():
            assert event.opened_by == first.name
            assert event.closed_by == (other.name if event_id in still_open else first.name)
            assert event.closed_at is not None and event.closed_at >= event.opened_at
        assert other.aggregator.timeline.closed == len(still_open)

        # A restart of the aggregator: same name, new process (a new lease and state).
        other.scope.cancel()
        await other.lease.leave()
        async with agent(nursery, etcd_server.endpoint, other.name) as again:
            await poll_until(lambda: again.election.leading, 20, what="the restarted holder")
            await _put_fresh_reports(again.etcd, S.node_unreachable_by_all())
            await poll_until(lambda: settled(again), 20, what="the finding is back")
            # The old events stay closed; new ones open after them, one per finding.
            now = await stored_events(again.etcd)
            assert {k: now[k] for k in before} == closed
            new = [e for e in now.values() if e.id not in before]
            assert new and all(e.opened_by == again.name for e in new)
            now_open = open_of(now)
            assert len({e.identity for e in now_open.values()}) == len(now_open)  # no twins
            for event in new:
                earlier = [
                    e.closed_at or 0 for e in closed.values() if e.identity == event.identity
                ]
                assert event.opened_at >= max(earlier, default=0)

            # What users read, as they run it.
            shown = cli("events", "--etcd", etcd_server.endpoint, "--since", "1h")
            assert shown.returncode == 0, shown.stderr
            print(shown.stdout)
            lines = shown.stdout.splitlines()
            assert lines[0].startswith("Events since ") and lines[0].endswith(
                f": {len(now)} ({len(now_open)} open)"
            )
            assert lines[1].split()[:5] == ["OPENED", "CLOSED", "DURATION", "KIND", "CULPRIT"]
            assert sum("lab1/node3" in line for line in lines) >= 2
            assert sum(" open " in line for line in lines[2:]) == len(now_open)
            doc = json.loads(
                cli(
                    "events", "--etcd", etcd_server.endpoint, "--node", "node3", "-o", "json"
                ).stdout
            )
            assert doc["events"] and all("lab1/node3" in e["nodes"] for e in doc["events"])

            # watch --etcd: the last few events under the view.
            view = cli("watch", "--etcd", etcd_server.endpoint, "--once")
            print(view.stdout)
            assert view.returncode == 0, view.stderr
            assert "Recent events (meshhealth events):" in view.stdout
            assert "-> open " in view.stdout and "lab1/node3" in view.stdout

            # diagnose --at: what was known while the first events were open, and after.
            node3 = next(closed[i] for i, e in still_open.items() if e.nodes == ("lab1/node3",))
            during = node3.opened_at + 1  # whole seconds
            assert during < (node3.closed_at or 0)
            at = cli("diagnose", "--etcd", etcd_server.endpoint, "--at", iso_time(during) or "")
            print(at.stdout)
            assert at.returncode == 1, at.stderr
            assert "lab1/node3" in at.stdout
            gap = max(e.closed_at or 0 for e in closed.values()) + 0.001
            quiet_at = min(e.opened_at for e in new)
            if quiet_at - gap >= 1.0:  # a whole second between: nothing was open then
                at = cli("diagnose", "--etcd", etcd_server.endpoint, "--at", iso_time(gap + 1))
                assert at.returncode == 0 and at.stdout.startswith("No findings at")
            bad = cli("diagnose", "--etcd", etcd_server.endpoint, "--at", "yesterday")
            assert bad.returncode == 2 and "--at: invalid time 'yesterday'" in bad.stderr
        nursery.cancel_scope.cancel()


async def test_a_transient_finding_writes_nothing_a_settled_one_opens(
    etcd_server: EtcdServer,
) -> None:
    """With a settle time of 10 s: a finding in one summary only (a fault's onset seen
    by one observer first) leaves no key under the events prefix; one still there 10 s
    after it was first seen is written, opened at its `since`."""
    from meshhealth.agent.cluster_view.timeline import FindingTimeline
    from meshhealth.wire.summary import SummaryFinding

    now = time.time()
    transient = SummaryFinding("path", ("lab1/node2", "lab1/node8"), 0.5, now - 31, "x")
    lasting = SummaryFinding("node-down", ("lab1/node8",), 0.9, now - 30, "4 of 4 fail")
    async with trio.open_nursery() as nursery, agent(nursery, etcd_server.endpoint, "node1") as a1:
        await poll_until(lambda: a1.election.leading, 20, what="a holder")
        timeline = FindingTimeline(a1.etcd, a1.election, cluster="lab1", node="node1", settle_s=10)
        await timeline.load()
        assert await timeline.record([transient], now=now)
        assert timeline.wake_at() == now + 10
        assert await timeline.record([lasting], now=now + 1.5)  # the node's finding
        assert timeline.wake_at() == now + 11.5
        assert await timeline.record([lasting], now=now + 11)
        assert await stored_events(a1.etcd) == {} and timeline.opened == 0
        assert await timeline.record([lasting], now=now + 11.5)
        (event,) = (await stored_events(a1.etcd)).values()
        assert (event.identity, event.opened_at) == (("node-down", ("lab1/node8",)), now - 30)
        assert timeline.opened == 1 and timeline.wake_at() is None
        nursery.cancel_scope.cancel()


async def test_the_aggregator_wakes_to_open_a_settled_finding(etcd_server: EtcdServer) -> None:
    """The reports are written once: the finding's event opens when it settles (2 s),
    without another report, long before a report turns stale (95 s), the next time the
    aggregator would otherwise look."""
    async with trio.open_nursery() as nursery:
        async with agent(nursery, etcd_server.endpoint, "node1", events_settle_s=2.0) as a1:
            await poll_until(lambda: a1.election.leading, 20, what="a holder")
            await _put_fresh_reports(a1.etcd, S.node_unreachable_by_all())
            written_at = time.time()

            def node3_found() -> bool:
                written = a1.aggregator.written
                return written is not None and any(
                    f.nodes == ("lab1/node3",) for f in written.findings
                )

            await poll_until(node3_found, 20, what="node3's finding in the summary")
            await poll_until(lambda: settled(a1), 20, what="its event opens")
            assert time.time() - written_at >= 2.0  # not before it settled
            written = a1.aggregator.written
            assert written is not None
            events = await stored_events(a1.etcd)
            assert {e.identity: e.opened_at for e in events.values()} == {
                (f.kind, f.nodes): f.since for f in written.findings
            }
        nursery.cancel_scope.cancel()


async def test_the_events_command_says_when_etcd_is_not_there() -> None:
    shown = await trio.to_thread.run_sync(
        lambda: cli("events", "--etcd", "http://127.0.0.1:9", "--timeout", "1")
    )
    assert shown.returncode == 2
    assert shown.stderr.startswith("meshhealth events: ") and len(shown.stderr.splitlines()) == 1
    shown = await trio.to_thread.run_sync(lambda: cli("events", "--since", "soon"))
    assert shown.returncode == 2 and "--since: invalid time 'soon'" in shown.stderr


async def test_watch_follows_the_timeline_as_it_changes(etcd_server: EtcdServer) -> None:
    """`watch --etcd` (live): an event written or deleted reaches the view's state
    through the prefix watch, without a new listing."""
    from meshhealth.cli.watch_etcd import run_etcd
    from meshhealth.cli.watch_state import WatchState
    from meshhealth.kvstore import open_etcd
    from meshhealth.wire.event import encode_event, event_id

    state = WatchState(source="etcd")
    notified: list[int] = []
    opened = FindingEvent(
        "lab1", event_id(("node-down", ("lab1/n3",)), 1e9), "node-down", ("lab1/n3",), 1, "x", 1e9
    )
    key = keys.event_key("lab1", opened.id)
    async with open_etcd(etcd_server.endpoint) as etcd, trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_etcd(
                state,
                etcd_server.endpoint,
                lambda changes: notified.append(len(changes)),
                lambda text: None,
                once=False,
                rebuild_s=60,
            )
        )
        await poll_until(lambda: state.connection == "connected", 10, what="listed")
        await etcd.put(key, encode_event(opened))
        await poll_until(lambda: key in state.events, 10, what="the new event is shown")
        assert state.events[key] == opened
        await etcd.delete(key)
        await poll_until(lambda: not state.events, 10, what="the deleted event goes")
        nursery.cancel_scope.cancel()


async def test_old_events_are_deleted_from_etcd_and_only_by_the_holder(
    etcd_server: EtcdServer,
) -> None:
    from meshhealth.agent.cluster_view.timeline import FindingTimeline
    from meshhealth.wire.event import encode_event

    now = time.time()
    day = 86400.0
    async with trio.open_nursery() as nursery, agent(nursery, etcd_server.endpoint, "node1") as a1:
        await poll_until(lambda: a1.election.leading, 20, what="a holder")
        # a1's own aggregator read the (empty) timeline first: it leaves these alone.
        await poll_until(lambda: a1.aggregator.timeline.loaded, 20, what="timeline read")
        # 6 closed events, one of them 8 days old; and one still open, 30 days old.
        for i in range(6):
            closed_at = now - (8 * day if i == 0 else i * 60)
            event = FindingEvent(
                "lab1", f"{int((closed_at - 10) * 1000):013d}-{i:012x}", "path",
                ("lab1/a", "lab1/b"), 0.5, "x", closed_at - 10, closed_at,
            )  # fmt: skip
            await a1.etcd.put(keys.event_key("lab1", event.id), encode_event(event))
        still = FindingEvent(
            "lab1", f"{int((now - 30 * day) * 1000):013d}-{'f' * 12}", "node-down",
            ("lab1/c",), 0.9, "y", now - 30 * day,
        )  # fmt: skip
        await a1.etcd.put(keys.event_key("lab1", still.id), encode_event(still))

        timeline = FindingTimeline(
            a1.etcd, a1.election, cluster="lab1", node="node1", max_age_s=7 * day, max_count=4
        )
        await timeline.load()
        assert len(timeline.stored) == 7
        assert await timeline.record([still.as_finding()], now=now)
        left = await stored_events(a1.etcd)
        # the 8-day-old one by age, then the two oldest closed by count; the open one stays
        assert len(left) == 4 and still.id in left and timeline.deleted == 3
        assert sorted(e.closed_at or 0 for e in left.values() if e.closed_at) == [
            now - 3 * 60, now - 2 * 60, now - 60
        ]  # fmt: skip
        assert timeline.opened == 0 and timeline.closed == 0  # the open one went on

        # Another agent that does not hold the claim cannot write or delete.
        async with agent(nursery, etcd_server.endpoint, "node2") as a2:
            await poll_until(lambda: a2.election.holder == "node1", 20, what="node2 sees node1")
            other = FindingTimeline(a2.etcd, a2.election, cluster="lab1", node="node2")
            await other.load()
            assert not await other.record([], now=now)  # it would close `still`
            assert (await stored_events(a1.etcd))[still.id].closed_at is None
        nursery.cancel_scope.cancel()


async def test_an_event_that_does_not_decode_is_counted_and_left(
    etcd_server: EtcdServer,
) -> None:
    """A junk value under the events prefix: the loading aggregator skips it with one
    warning and counts it in meshhealth_kvstore_invalid_values_total{kind=events}."""
    from typing import cast

    from meshhealth.agent.agent_metrics import agent_metrics
    from meshhealth.agent.cluster_view.election import AggregatorElection
    from meshhealth.agent.cluster_view.timeline import FindingTimeline
    from meshhealth.kvstore import open_etcd
    from meshhealth.metrics import Registry

    metrics = agent_metrics(Registry(), source_cluster="lab1", source_node="node1")
    junk = keys.event_key("lab1", "0000000000001-000000000000")
    async with open_etcd(etcd_server.endpoint) as etcd:
        await etcd.put(junk, b"\x81\xa1v\x63")
        timeline = FindingTimeline(
            etcd,
            cast(AggregatorElection, None),  # loading writes nothing
            cluster="lab1",
            node="node1",
            invalid_metric=metrics.invalid_values_of("events"),
        )
        await timeline.load()
        assert timeline.loaded and timeline.stored == {} and timeline.invalid == 1
        assert metrics.invalid_values_of("events").value == 1
        kv, _ = await etcd.get(junk)
        assert kv is not None  # left as it is
