"""One worker process of bench/etcd_load.py: its share of the simulated agents.

Each simulated agent runs meshhealth's own registrar and publisher on a shared etcd
client (one client per AGENTS_PER_CLIENT agents), a discovery watch of the ip prefix and
a watch of the summary key; worker 0 also runs the aggregator (one watch of the health
prefix, one summary key) and the join and failure events, worker 1 the leave event.
Writes its counters and the times it saw each event to `<out>/worker<i>.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from contextlib import AsyncExitStack
from typing import Any

import msgpack
import trio

from meshhealth import defaults
from meshhealth.agent.membership.registrar import Registrar
from meshhealth.agent.reporting.publisher import Publisher
from meshhealth.kvstore import Etcd, EtcdError, EventKind, open_etcd
from meshhealth.model import (
    HealthReport,
    Node,
    PathKey,
    PathSummary,
    PlanInfo,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
)
from meshhealth.probe.assignment import ProbePlan, build_plan, epoch_at, epoch_length_s
from meshhealth.probe.scheduler import enumerate_paths
from meshhealth.wire import keys
from meshhealth.wire.health import decode_health_report

CLUSTER = "bench"
SUMMARY_KEY = keys.summary_key(CLUSTER)  # the aggregator's one key
AGENTS_PER_CLIENT = 25
SUMMARY_MIN_GAP_S = 1.0  # the aggregator writes at most once a second
# Generous, for requests and the liveness check (a client that thinks etcd is down fails
# its 25 agents' keep-alives at once): 1,000 agents share a few processes here.
REQUEST_TIMEOUT_S = 20.0


def node_of(index: int) -> Node:
    """Addresses are data only: nothing is ever sent to them."""
    a, b = divmod(index, 250)
    return Node(
        name=f"node{index:05d}", cluster=CLUSTER, node_ip=f"127.77.{a}.{b + 1}",
        health_ip=f"127.78.{a}.{b + 1}", cidrs=(f"10.{a}.{b}.0/24",), health_port=4240,
        version="bench", started_at=time.time(),
    )  # fmt: skip


def target_of(node: Node) -> Target:
    return Target(node.cluster, node.name, node.node_ip, node.health_ip)


async def sleep_until(unix_s: float) -> None:
    await trio.sleep(max(0.0, unix_s - time.time()))


class Worker:
    def __init__(self, args: argparse.Namespace, plan: dict[str, Any]) -> None:
        self.args = args
        self.sched = plan
        self.index: int = args.worker
        self.n: int = args.agents
        self.nodes = [node_of(i) for i in range(self.n)]
        self.targets = {n.name: target_of(n) for n in self.nodes}
        self.epoch_s = epoch_length_s(args.interval, defaults.PLAN_ROTATION_ROUNDS)
        self._plans: dict[int, ProbePlan] = {}
        self.fail_p = args.changes_per_hour * args.interval / 3600
        self.agents: list[SimAgent] = []
        self.counts = {"ip_events": 0, "summary_events": 0, "health_events": 0,
                       "summary_writes": 0, "summary_bytes": 0}  # fmt: skip
        self.join_ip_key = keys.ip_key(CLUSTER, node_of(self.n).node_ip)
        self.leave_ip_key = keys.ip_key(CLUSTER, node_of(1).node_ip)
        self.out: dict[str, Any] = {"join_seen": [], "fail_seen": [], "leave_seen": []}

    def plan_for(self, epoch: int) -> ProbePlan:
        if epoch not in self._plans:
            self._plans = {epoch: build_plan(((CLUSTER, n.name) for n in self.nodes), epoch)}
        return self._plans[epoch]

    def snapshot(self) -> dict[str, Any]:
        reasons: dict[str, int] = {}
        for agent in self.agents:
            for reason, count in agent.publisher.writes_by_reason.items():
                reasons[reason] = reasons.get(reason, 0) + count
        return self.counts | {
            "health_writes": sum(a.publisher.writes for a in self.agents),
            "health_bytes": sum(a.publisher.write_bytes for a in self.agents),
            "keepalives": sum(a.registrar.refreshes for a in self.agents),
            "registrations": sum(a.registrar.registrations for a in self.agents),
            "writes_by_reason": reasons,
        }

    async def run(self) -> None:
        mine = list(range(self.index, self.n, self.args.workers))
        async with AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(
                    open_etcd(
                        self.sched["url"],
                        request_timeout_s=REQUEST_TIMEOUT_S,
                        liveness_timeout_s=REQUEST_TIMEOUT_S,
                    )
                )
                for _ in range(math.ceil((len(mine) + 2) / AGENTS_PER_CLIENT))
            ]
            async with trio.open_nursery() as nursery:
                await self.agents_and_events(nursery, clients, mine)
        out = trio.Path(self.sched["out"], f"worker{self.index}.json")
        await out.write_text(json.dumps(self.out))

    async def agents_and_events(
        self, nursery: trio.Nursery, clients: list[Etcd], mine: list[int]
    ) -> None:
        for j, index in enumerate(mine):
            agent = SimAgent(self, node_of(index), clients[j // AGENTS_PER_CLIENT])
            self.agents.append(agent)
            start = self.sched["t0"] + self.args.ramp * index / self.n
            nursery.start_soon(agent.run, start)
        if self.index == 0:
            nursery.start_soon(Aggregator(self, clients[-1]).run)
            nursery.start_soon(self.join, clients[-1])
        await sleep_until(self.sched["steady_start"])
        before = self.snapshot()
        await sleep_until(self.sched["steady_end"])
        after = self.snapshot()
        self.out["steady"] = {
            name: (
                {r: c - before[name].get(r, 0) for r, c in value.items()}
                if isinstance(value, dict)
                else value - before[name]
            )
            for name, value in after.items()
        }
        await sleep_until(self.sched["end"])
        nursery.cancel_scope.cancel()

    async def join(self, etcd: Etcd) -> None:
        await sleep_until(self.sched["join_at"])
        registrar = Registrar(etcd, node_of(self.n), ttl_s=self.args.lease_ttl)
        self.out["joined_at"] = time.time()
        async with trio.open_nursery() as nursery:
            await nursery.start(registrar.run)
            await trio.sleep_forever()


class SimAgent:
    def __init__(self, worker: Worker, node: Node, etcd: Etcd) -> None:
        self.worker = worker
        self.node = node
        self.etcd = etcd
        self.ref = (CLUSTER, node.name)
        self.registrar = Registrar(etcd, node, ttl_s=worker.args.lease_ttl)
        self.publisher = Publisher(
            etcd, self.registrar, cluster=CLUSTER, node=node.name,
            interval_s=worker.args.interval,
        )  # fmt: skip
        self.failing: str | None = None  # a target failing for good (the failure event)
        self.seen: set[str] = set()

    async def run(self, start_at: float) -> None:
        await sleep_until(start_at)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.registrar.run)
            await nursery.start(self.publisher.run)
            nursery.start_soon(self.rounds)
            # The watches start when every agent is registered, from the revision of
            # then: an agent lists once at start, which the simulation does not repeat
            # 1,000 times (N^2 events on a few processes; in a cluster, 2N per agent).
            await sleep_until(self.worker.sched["ramp_end"])
            revision = await self.revision()
            nursery.start_soon(self.discovery, revision + 1)
            nursery.start_soon(self.verdict, revision + 1)
            if self.node.name == "node00001":  # the leave event
                await sleep_until(self.worker.sched["leave_at"])
                self.worker.out["left_at"] = time.time()
                nursery.cancel_scope.cancel()  # the registrar revokes its lease

    async def revision(self) -> int:
        """The store's revision, to watch from (retried: etcd may be busy)."""
        while True:
            try:
                _, revision = await self.etcd.get(SUMMARY_KEY)
                return revision
            except EtcdError:
                await trio.sleep(1.0)

    async def discovery(self, start_revision: int) -> None:
        w = self.worker
        async with self.etcd.watch_prefix(
            keys.ip_prefix(CLUSTER), start_revision=start_revision
        ) as watch:
            async for batch in watch:
                w.counts["ip_events"] += len(batch.events)
                for event in batch.events:
                    self._note(event.kind, event.key)

    def _note(self, kind: EventKind, key: str) -> None:
        w = self.worker
        now = time.time()
        if kind is EventKind.PUT and key == w.join_ip_key and "join" not in self.seen:
            self.seen.add("join")
            w.out["join_seen"].append(now)
        leaving = now >= w.sched["leave_at"]  # not a lease lost under load before
        if (
            kind is EventKind.DELETE
            and key == w.leave_ip_key
            and leaving
            and "leave" not in self.seen
        ):
            self.seen.add("leave")
            w.out["leave_seen"].append(now)

    async def verdict(self, start_revision: int) -> None:
        w = self.worker
        async with self.etcd.watch_prefix(SUMMARY_KEY, start_revision=start_revision) as watch:
            async for batch in watch:
                w.counts["summary_events"] += len(batch.events)
                for event in batch.events:
                    if event.kind is not EventKind.PUT or "fail" in self.seen:
                        continue
                    summary = msgpack.unpackb(event.value)
                    if summary["unreachable_paths"] and time.time() >= w.sched["fail_at"]:
                        self.seen.add("fail")
                        w.out["fail_seen"].append(time.time())

    async def rounds(self) -> None:
        w = self.worker
        next_at = time.time() + random.uniform(0, w.args.interval)
        fail_pending = self.node.name == "node00000"  # the failure event's observer
        while True:
            await sleep_until(min(next_at, w.sched["fail_at"]) if fail_pending else next_at)
            if fail_pending and time.time() >= w.sched["fail_at"]:
                fail_pending = False  # a probe-now round that finds a target down
                w.out["failed_at"] = time.time()
                self.failing = self.round(time.time(), failing=True)
                continue
            self.round(time.time())
            next_at += w.args.interval

    def round(self, started: float, *, failing: bool = False) -> str:
        """Made-up results for this epoch's targets: all OK but one failing target."""
        w = self.worker
        epoch = epoch_at(started, w.epoch_s)
        plan = w.plan_for(epoch)
        names = [name for _, name in plan.targets_of(self.ref)] + [self.node.name]
        down = self.failing
        if failing:
            down = names[0]
        elif down is None and started < w.sched["steady_end"] and random.random() < w.fail_p:
            down = random.choice(names[:-1])  # fails this round only
        summaries: dict[PathKey, PathSummary] = {}
        # the paths an agent probes (the scheduler's rule: the DF probe to NodeIPs only)
        for key, _ in enumerate_paths([w.targets[name] for name in names], frozenset(Protocol)):
            summaries[key] = _summary(started, ok=key.node != down)
        report = RoundReport(
            started_at=started, duration_s=0.05,
            targets=tuple(w.targets[name] for name in names),
            plan=PlanInfo(epoch, defaults.PLAN_PROBE_TARGETS, defaults.PLAN_ROTATION_ROUNDS,
                          False, defaults.PLAN_FULL_MESH_MAX_NODES, w.n),
        )  # fmt: skip
        self.publisher.note_round(report, summaries)
        return down or ""


def _summary(at: float, *, ok: bool) -> PathSummary:
    if ok:
        rtt = random.uniform(0.0002, 0.002)
        result = ProbeResult(ProbeStatus.OK, at, (rtt,), 1, 1)
        return PathSummary(10, result, 0.0, rtt, rtt, rtt, rtt, at, at, 0)
    result = ProbeResult(ProbeStatus.TIMEOUT, at, (), 1, 0)
    return PathSummary(10, result, 0.1, None, 0.001, 0.001, 0.001, at, at - 10, 1)


class Aggregator:
    """The cluster-verdict reader's shape: one watch of the health prefix, one summary
    key written when the summary changes (at most once a second)."""

    def __init__(self, worker: Worker, etcd: Etcd) -> None:
        self.worker = worker
        self.etcd = etcd
        self.reports: dict[str, HealthReport] = {}
        self.wanted: bytes = b""
        self.wake = trio.Event()

    def summary(self) -> bytes:
        unreachable = sum(
            1
            for report in self.reports.values()
            for target in report.targets
            for path in target.paths.values()
            if path.status not in (ProbeStatus.OK, ProbeStatus.UNKNOWN)
        )
        return bytes(msgpack.packb({"v": 1, "reporting": len(self.reports),
                              "unreachable_paths": unreachable}))  # fmt: skip

    async def run(self) -> None:
        prefix = keys.health_prefix(CLUSTER)
        kvs, revision = await self.etcd.get_prefix(prefix)
        for kv in kvs:
            self.reports[kv.key] = decode_health_report(kv.value)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.writer)
            async with self.etcd.watch_prefix(prefix, start_revision=revision + 1) as watch:
                async for batch in watch:
                    self.worker.counts["health_events"] += len(batch.events)
                    for event in batch.events:
                        if event.kind is EventKind.PUT:
                            self.reports[event.key] = decode_health_report(event.value)
                        else:
                            self.reports.pop(event.key, None)
                    self.wanted = self.summary()
                    self.wake.set()

    async def writer(self) -> None:
        written = b""
        while True:
            await self.wake.wait()
            self.wake = trio.Event()
            if self.wanted == written:
                continue
            try:
                await self.etcd.put(SUMMARY_KEY, self.wanted)
            except EtcdError:
                self.wake.set()  # etcd is busy: try again after the gap
                await trio.sleep(SUMMARY_MIN_GAP_S)
                continue
            written = self.wanted
            self.worker.counts["summary_writes"] += 1
            self.worker.counts["summary_bytes"] += len(written) + len(SUMMARY_KEY)
            await trio.sleep(SUMMARY_MIN_GAP_S)


def run_worker(args: argparse.Namespace, plan: dict[str, Any]) -> None:
    trio.run(Worker(args, plan).run)
