"""The cluster view against a real etcd: one aggregator per cluster (its claim under its
lease, taken over when the holder dies), the summary it publishes, and the followers
that read that one key (and nothing of the health prefix)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import pytest
import trio

from meshhealth.agent.cluster_view.aggregator import Aggregator
from meshhealth.agent.cluster_view.election import AggregatorElection
from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.kvstore import Etcd, PrefixWatch, open_etcd
from meshhealth.matrix_source import registered_reports
from meshhealth.model import HealthReport
from meshhealth.wire import keys
from meshhealth.wire.claim import decode_claim
from meshhealth.wire.health import encode_health_report
from tests import matrix_stories as S
from tests.etcd_helpers import FAST_ETCD, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer

TTL_S = 2
# A dead holder's lease expires within its TTL; etcd checks expiry about every 500 ms,
# and the next holder needs a transaction: generous on a loaded machine.
TAKEOVER_BOUND_S = TTL_S + 8.0


@dataclass
class Lease:
    """This node's lease, kept alive like the registrar's (what the election needs of it).

    `crash()` stops the keepalives without revoking: the lease expires as a SIGKILLed
    agent's does; `leave()` revokes it, as a clean shutdown does."""

    etcd: Etcd
    ttl_s: int = TTL_S
    lease_id: int | None = None
    changes: int = 0
    _changed: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    async def wait_changed(self, seen: int) -> int:
        while self.changes == seen:
            await self._changed.wait()
        return self.changes

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.scope:
            self.lease_id = await self.etcd.lease_grant(self.ttl_s)
            self.changes += 1
            self._changed.set()
            task_status.started()
            while True:
                await trio.sleep(self.ttl_s / 4)
                await self.etcd.lease_keepalive_once(self.lease_id)

    def crash(self) -> None:
        self.scope.cancel()

    async def leave(self) -> None:
        self.scope.cancel()
        assert self.lease_id is not None
        await self.etcd.lease_revoke(self.lease_id)


class Health:
    """An agent's own health as the election reads it (the agent's LocalHealthMonitor
    flips `fit` after a round; here the test does)."""

    def __init__(self) -> None:
        self.fit = True
        self.changes = 0
        self._changed = trio.Event()

    def set_fit(self, fit: bool) -> None:
        if fit != self.fit:
            self.fit = fit
            self.changes += 1
            self._changed.set()
            self._changed = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        while self.changes == seen:
            await self._changed.wait()
        return self.changes


@dataclass
class Agent:
    """The cluster view of one agent: its own etcd client, lease, election, aggregator
    and follower, in a cancel scope of their own (cancelled: the process is gone)."""

    name: str
    etcd: Etcd
    lease: Lease
    health: Health
    election: AggregatorElection
    aggregator: Aggregator
    follower: SummaryFollower
    watched: list[str]
    scope: trio.CancelScope


def _record_watches(etcd: Etcd, watched: list[str]) -> None:
    """Note every prefix this client watches (the real watch still runs)."""
    real = etcd.watch_prefix

    def watch_prefix(prefix: str, *, start_revision: int) -> PrefixWatch:
        watched.append(prefix)
        return real(prefix, start_revision=start_revision)

    etcd.watch_prefix = watch_prefix  # type: ignore[method-assign]


@asynccontextmanager
async def agent(
    nursery: trio.Nursery,
    endpoint: str,
    name: str,
    cluster: str = "lab1",
    *,
    registered_only: bool = False,
    events_settle_s: float = 0.0,  # findings' events at once, unless a test says
    path_settle_s: float = 0.0,  # path findings published at once, unless a test says
) -> AsyncIterator[Agent]:
    async with open_etcd(endpoint, **FAST_ETCD) as etcd:
        discovery = Discovery({cluster: etcd}) if registered_only else None
        watched: list[str] = []
        _record_watches(etcd, watched)
        lease = Lease(etcd)
        health = Health()
        election = AggregatorElection(
            etcd, lease, health, cluster=cluster, node=name, unfit_grace_s=UNFIT_GRACE_S
        )
        aggregator = Aggregator(
            etcd,
            election,
            cluster=cluster,
            node=name,
            debounce_s=0.1,
            registered=discovery,
            events_settle_s=events_settle_s,
            path_settle_s=path_settle_s,
        )
        follower = SummaryFollower(lambda: [(cluster, etcd)])
        scope = trio.CancelScope()
        me = Agent(name, etcd, lease, health, election, aggregator, follower, watched, scope)

        async def run() -> None:
            with scope:
                async with trio.open_nursery() as inner:
                    await inner.start(lease.run)
                    if discovery is not None:
                        await inner.start(discovery.run)
                    await inner.start(election.run)
                    await inner.start(aggregator.run)
                    await inner.start(follower.run)

        nursery.start_soon(run)
        try:
            yield me
        finally:
            scope.cancel()


def leaders(agents: list[Agent]) -> list[str]:
    return [a.name for a in agents if a.election.leading]


async def test_one_holder_and_a_takeover_when_it_crashes(etcd_server: EtcdServer) -> None:
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        agent(nursery, etcd_server.endpoint, "node2") as a2,
        agent(nursery, etcd_server.endpoint, "node3") as a3,
    ):
        agents = [a1, a2, a3]
        await poll_until(
            lambda: (
                len(leaders(agents)) == 1
                and all(a.election.holder == leaders(agents)[0] for a in agents)
            ),
            20,
            what="one holder that everyone knows",
        )
        holder = next(a for a in agents if a.election.leading)
        others = [a for a in agents if a is not holder]
        kv, _ = await a1.etcd.get(keys.aggregator_key("lab1"))
        assert kv is not None and kv.lease_id == holder.lease.lease_id
        assert decode_claim(kv.value).node == holder.name

        # The holder crashes: no more keepalives, no revoke; its process is gone.
        holder.lease.crash()
        holder.scope.cancel()
        start = trio.current_time()
        await poll_until(
            lambda: len(leaders(others)) == 1,
            TAKEOVER_BOUND_S,
            what="another agent takes over within the lease TTL",
        )
        took_s = trio.current_time() - start
        assert took_s < TAKEOVER_BOUND_S
        new = next(a for a in others if a.election.leading)
        await poll_until(
            lambda: all(a.election.holder == new.name for a in others),
            10,
            what="the other agent learns the new holder",
        )
        assert new.election.terms == 1
        nursery.cancel_scope.cancel()


UNFIT_GRACE_S = 1.0


async def test_an_unwell_holder_hands_over_and_a_lone_unwell_agent_still_aggregates(
    etcd_server: EtcdServer,
) -> None:
    """A holder that turns unwell (degraded: its own probes fail, a cut-off node) gives
    the claim up and a healthy agent takes it at once, not after the lease TTL; an
    unwell agent waits its grace before it claims, and claims when nobody else does."""
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        agent(nursery, etcd_server.endpoint, "node2") as a2,
    ):
        await poll_until(lambda: len(leaders([a1, a2])) == 1, 20, what="a holder")
        holder, other = (a1, a2) if a1.election.leading else (a2, a1)
        start = trio.current_time()
        holder.health.set_fit(False)
        await poll_until(lambda: other.election.leading, 10, what="the healthy agent takes over")
        assert trio.current_time() - start < TTL_S  # given up, not expired
        assert holder.election.resignations == 1 and not holder.election.leading
        await poll_until(
            lambda: holder.election.holder == other.name, 10, what="the unwell one knows"
        )
        # The healthy one leaves; the unwell one is alone and aggregates after its grace.
        other.scope.cancel()
        await other.lease.leave()
        start = trio.current_time()
        await poll_until(lambda: holder.election.leading, 10, what="the lone unwell agent")
        assert trio.current_time() - start >= UNFIT_GRACE_S * 0.9
        # Held while unwell: no hand-over loop without a change of health.
        assert holder.election.resignations == 1
        nursery.cancel_scope.cancel()


async def test_a_clean_leave_hands_over_at_once(etcd_server: EtcdServer) -> None:
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        agent(nursery, etcd_server.endpoint, "node2") as a2,
    ):
        await poll_until(lambda: len(leaders([a1, a2])) == 1, 20, what="a holder")
        holder, other = (a1, a2) if a1.election.leading else (a2, a1)
        holder.scope.cancel()
        await holder.lease.leave()  # the registrar revokes its lease on shutdown
        # Well before the TTL would have expired it.
        await poll_until(lambda: other.election.leading, TTL_S * 2, what="hand-over")
        nursery.cancel_scope.cancel()


async def test_the_aggregator_publishes_what_followers_read(etcd_server: EtcdServer) -> None:
    reports = S.node_unreachable_by_all()
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        agent(nursery, etcd_server.endpoint, "node2") as a2,
        agent(nursery, etcd_server.endpoint, "node3") as a3,
    ):
        agents = [a1, a2, a3]
        await poll_until(lambda: len(leaders(agents)) == 1, 20, what="a holder")
        await _put_fresh_reports(a1.etcd, reports)

        def all_see_the_finding() -> bool:
            for a in agents:
                summary = a.follower.summary("lab1")
                if summary is None or not summary.findings:
                    return False
                if a.follower.failing_observers("lab1", "node3") != 2:
                    return False  # a summary of some of the reports only
                if "lab1/node3" not in summary.discounted:
                    return False  # node3's own report not in yet
            return True

        await poll_until(all_see_the_finding, 20, what="every follower reads the summary")
        holder = next(a for a in agents if a.election.leading)
        for a in agents:
            summary = a.follower.summary("lab1")
            assert summary is not None
            assert summary.aggregator == holder.name
            assert summary.nodes.unreachable == 1
            assert summary.findings[0].nodes == ("lab1/node3",)
            assert a.follower.failing_observers("lab1", "node3") == 2
            assert a.follower.failing_observers("lab1", "nobody") == 0
            # node3 reaches nobody: isolated, its failures count against nobody
            assert a.follower.failing_observers("lab1", "node1") == 0
            assert summary.discounted["lab1/node3"].reason == "node-isolated"
        # The summary lives under the holder's lease; only it wrote it.
        kv, _ = await a1.etcd.get(keys.summary_key("lab1"))
        assert kv is not None and kv.lease_id == holder.lease.lease_id
        assert holder.aggregator.writes >= 1
        assert all(a.aggregator.writes == 0 for a in agents if a is not holder)

        # Who reads what: only the holder watched the health prefix; every agent
        # watched the claim and the summary, one key each.
        health = keys.health_prefix("lab1")
        for a in agents:
            assert (health in a.watched) == (a is holder), (a.name, a.watched)
            assert keys.summary_key("lab1") in a.watched
        # Nothing changes: the summary is not written again.
        writes = holder.aggregator.writes
        evaluations = holder.aggregator.evaluations
        await _put_fresh_reports(a1.etcd, reports)  # same statuses, newer times
        await poll_until(
            lambda: holder.aggregator.evaluations > evaluations, 10, what="re-evaluated"
        )
        assert holder.aggregator.writes == writes

        # The node recovers: the finding ends for every follower.
        await _put_fresh_reports(a1.etcd, S.healthy())
        await poll_until(
            lambda: all(
                (s := a.follower.summary("lab1")) is not None
                and not s.findings
                and s.nodes.reachable == 3
                for a in agents
            ),
            20,
            what="the finding ends everywhere",
        )
        assert all(a.follower.failing_observers("lab1", "node3") == 0 for a in agents)
        nursery.cancel_scope.cancel()


async def test_a_path_finding_is_published_once_it_has_lasted(etcd_server: EtcdServer) -> None:
    """One observer fails one target: a path finding. The aggregator holds it back for
    its settle time (the onset of a node fault looks like this for a moment), then
    publishes it without waiting for another report."""
    settle_s = 2.0
    reports = S.full_mesh(lambda s, t: (s, t) == ("lab1/node1", "lab1/node3"))
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1", path_settle_s=settle_s) as a1,
    ):
        await poll_until(lambda: a1.election.leading, 20, what="node1 holds the claim")
        await _put_fresh_reports(a1.etcd, reports)
        await poll_until(
            lambda: (s := a1.follower.summary("lab1")) is not None and s.nodes.reachable == 6,
            20,
            what="a summary of every report",
        )
        first = time.monotonic()
        summary = a1.follower.summary("lab1")
        assert summary is not None and summary.findings == ()  # held back
        evaluations = a1.aggregator.evaluations
        await poll_until(
            lambda: (s := a1.follower.summary("lab1")) is not None and bool(s.findings),
            20,
            what="the path finding, once settled",
        )
        assert time.monotonic() - first >= settle_s - 1.0  # the debounce ran before `first`
        summary = a1.follower.summary("lab1")
        assert summary is not None
        assert [(f.kind, f.nodes) for f in summary.findings] == [
            ("path", ("lab1/node1", "lab1/node3"))
        ]
        assert summary.findings[0].since < time.time() - 20  # since its evidence began
        assert a1.aggregator.evaluations > evaluations  # woken by the settle time itself
        nursery.cancel_scope.cancel()


async def test_the_summary_goes_with_its_aggregator(etcd_server: EtcdServer) -> None:
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        open_etcd(etcd_server.endpoint, **FAST_ETCD) as reader,
        trio.open_nursery() as reading,
    ):
        await poll_until(lambda: a1.election.leading, 20, what="a holder")
        await _put_fresh_reports(a1.etcd, S.healthy())
        follower = SummaryFollower(lambda: [("lab1", reader)])
        await reading.start(follower.run)
        await poll_until(lambda: follower.summary("lab1") is not None, 20, what="a summary")
        a1.scope.cancel()
        await a1.lease.leave()
        await poll_until(lambda: follower.summary("lab1") is None, 10, what="summary gone")
        reading.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


def test_registered_reports_leaves_out_reporters_without_a_node_entry() -> None:
    reports = S.healthy()
    kept, ignored = registered_reports(reports, {("lab1", "node1"), ("lab1", "node3")})
    assert [r.node for r in kept] == ["node1", "node3"]
    assert [r.node for r in ignored] == ["node2"]


async def test_a_report_of_an_unregistered_node_is_not_in_the_matrix(
    etcd_server: EtcdServer,
) -> None:
    """A health entry forged under a name no node registered ("node9 reaches nobody"):
    the aggregator's matrix leaves it out, until a node of that name registers."""
    down = S.paths((S.TIMEOUT,) * 4)
    forged = S.report("lab1/node9", {"lab1/node1": down, "lab1/node2": down})
    reports = [*S.healthy(("lab1/node1", "lab1/node2")), forged]
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1", registered_only=True) as a1,
    ):
        for i in (1, 2):
            node = make_node(f"node{i}", f"10.0.0.{i}", cluster="lab1")
            for key, value in registration_entries(node):
                await a1.etcd.put(key, value)
        await poll_until(lambda: a1.election.leading, 20, what="a holder")
        await _put_fresh_reports(a1.etcd, reports)
        await poll_until(
            lambda: a1.aggregator.ignored == (("lab1", "node9"),), 20, what="node9 ignored"
        )
        await poll_until(
            lambda: (w := a1.aggregator.written) is not None and w.nodes.reachable == 2,
            20,
            what="a summary of the registered nodes",
        )
        written = a1.aggregator.written
        assert written is not None and written.failing_observers == {}
        assert not written.findings
        assert "lab1/node9" not in written.discounted
        # Once node9 registers, its report counts like any other (an isolated observer).
        for key, value in registration_entries(make_node("node9", "10.0.0.9", cluster="lab1")):
            await a1.etcd.put(key, value)
        await poll_until(
            lambda: (w := a1.aggregator.written) is not None and "lab1/node9" in w.discounted,
            20,
            what="node9's report counted once registered",
        )
        assert a1.aggregator.ignored == ()
        nursery.cancel_scope.cancel()


async def _put_fresh_reports(etcd: Etcd, reports: list[HealthReport]) -> None:
    """Write the story's reports as if just probed (the aggregator reads them at now)."""
    shift = time.time() - S.NOW
    for report in reports:
        fresh = replace(report, probe_time=report.probe_time + shift)
        await etcd.put(keys.health_key(report.cluster, report.node), encode_health_report(fresh))


async def test_a_compacted_claim_watch_is_retried_not_fatal(etcd_server: EtcdServer) -> None:
    """A claim nobody touches for long leaves its watcher resuming from an old revision;
    once etcd has compacted it, the watch fails with `Compacted`. That must reach the
    election's retry loop as itself (not wrapped in a nursery's ExceptionGroup, which
    killed agents in the chaos soak), and the election goes on knowing its holder."""
    from meshhealth.kvstore.watch import Compacted

    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        agent(nursery, etcd_server.endpoint, "node2") as a2,
    ):
        agents = [a1, a2]
        await poll_until(
            lambda: len(leaders(agents)) == 1 and all(a.election.holder for a in agents),
            20,
            what="one holder that everyone knows",
        )
        watcher = next(a for a in agents if not a.election.leading)
        for i in range(5):
            await watcher.etcd.put(f"meshhealth/test/compact/{i}", b"x")
        _, revision = await watcher.etcd.get("meshhealth/test/compact/0")
        await trio.to_thread.run_sync(etcd_server.etcdctl, "compact", str(revision))
        with pytest.raises(Compacted):
            await watcher.election._hold_or_watch(1, watcher.lease.changes, 0)
        holder = leaders(agents)[0]
        await poll_until(
            lambda: watcher.election.holder == holder and not watcher.election.leading,
            10,
            what="the watcher still follows the holder",
        )


async def test_a_holder_unwell_for_a_moment_keeps_the_claim(etcd_server: EtcdServer) -> None:
    """Under load an agent turns degraded for a second now and then: the claim stays
    where it is unless the holder stays unwell for its grace (no aggregator flapping)."""
    async with (
        trio.open_nursery() as nursery,
        agent(nursery, etcd_server.endpoint, "node1") as a1,
        agent(nursery, etcd_server.endpoint, "node2") as a2,
    ):
        await poll_until(lambda: len(leaders([a1, a2])) == 1, 20, what="a holder")
        holder = a1 if a1.election.leading else a2
        for _ in range(3):
            holder.health.set_fit(False)
            await trio.sleep(UNFIT_GRACE_S / 4)  # the blip's length is the test's input
            holder.health.set_fit(True)
            await trio.sleep(UNFIT_GRACE_S / 4)
        await trio.sleep(UNFIT_GRACE_S)  # past any grace the blips could have started
        assert holder.election.leading and holder.election.resignations == 0
        holder.health.set_fit(False)  # unwell for good: it hands over after its grace
        start = trio.current_time()
        await poll_until(lambda: not holder.election.leading, 10, what="the hand-over")
        assert trio.current_time() - start >= UNFIT_GRACE_S * 0.9
        nursery.cancel_scope.cancel()
