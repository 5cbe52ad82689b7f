"""Publisher: this node's latest results in etcd, for the matrix and meshed clusters.

    publisher = Publisher(etcd, registrar, cluster="lab1", node="node1", interval_s=10,
                          metrics=metrics.writes_of("health"))
    await nursery.start(publisher.run)
    publisher.note_round(report, book.summaries())      # after every round

Writes `meshhealth/state/health/v1/<cluster>/<node>` under the registrar's lease, so a
dead writer's entry vanishes with it. When to write is `PublishPolicy`'s (pure), so
etcd load follows changes, not N x rounds: the first report after each registration, a
change (`change_signature`, debounced), else a liveness refresh often enough that
readers never call a healthy node stale. RTT and loss changes alone do not write.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.membership.lease_holder import LeaseHolder
from meshhealth.documents.status import NO_VERDICTS, Verdicts
from meshhealth.kvstore import Backoff, Etcd, EtcdError
from meshhealth.model import (
    SECONDARY_SUFFIX,
    HealthReport,
    PathHealth,
    PathKey,
    PathSummary,
    RoundReport,
    TargetHealth,
    TargetType,
    TraceStop,
    path_name,
    tcp_ports_of,
)
from meshhealth.model import Protocol as ProbeProtocol
from meshhealth.wire import keys
from meshhealth.wire.health import encode_health_report

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LocalHealthMark:
    """This agent's local health as its report carries it (diagnosis/local_health.py)."""

    score: int = 0  # 0: well
    degraded_since: float | None = None  # unix seconds; None: not degraded
    reasons: tuple[str, ...] = ()  # while degraded: why, as codes (loop-lag, ...)


WELL = LocalHealthMark()

# Where this agent's traces stopped, per target (cluster, node): meshhealth.agent.path_tracer.
Traces = Mapping[tuple[str, str], TraceStop]
NO_TRACES: Traces = {}

# What a write must follow, as `change_signature` extracts it from a report.
ChangeSignature = dict[tuple[str, ...], object]


# --- the pure part --------------------------------------------------------------------


def health_report(
    report: RoundReport,
    summaries: Mapping[PathKey, PathSummary],
    *,
    cluster: str,
    node: str,
    interval_s: float,
    verdicts: Verdicts = NO_VERDICTS,
    local: LocalHealthMark = WELL,
    traces: Traces = NO_TRACES,
) -> HealthReport:
    """What this node sees after `report`: per target of the round, every probed path's
    newest status and RTT and its loss over the stats window; a failing path's
    suspicion verdict (suspect or unreachable) and since when; where this node's trace
    to a target stopped (`traces`); this agent's local health score and, while
    degraded, since when."""
    targets: list[TargetHealth] = []
    # (protocol, port) of every path kind: each protocol, and TCP once per probed port
    kinds: list[tuple[ProbeProtocol, int]]
    kinds = [(p, 0) for p in ProbeProtocol if p is not ProbeProtocol.TCP]
    kinds += [(ProbeProtocol.TCP, port) for port in tcp_ports_of(p.path for p in report.paths)]
    for target in sorted(report.targets):
        paths: tuple[dict[str, PathHealth], dict[str, PathHealth]] = ({}, {})
        for secondary, found in zip((False, True), paths, strict=True):
            for target_type in TargetType:
                if target.address(target_type, secondary) is None:
                    continue
                for protocol, port in kinds:
                    key = PathKey(
                        target.cluster, target.node, target_type, protocol, secondary, port
                    )
                    summary = summaries.get(key)
                    if summary is None or summary.last is None:
                        continue
                    # an OK path's verdict is ok: nothing to add
                    verdict = None if summary.last.ok else verdicts.get(key)
                    found[path_name(target_type, protocol, port)] = PathHealth(
                        status=summary.last.status,
                        rtt_s=summary.rtt_last_s,
                        loss=summary.loss,
                        state=None if verdict is None else str(verdict.verdict),
                        state_since=None if verdict is None else verdict.since,
                    )
        targets.append(
            TargetHealth(
                cluster=target.cluster,
                node=target.node,
                paths=paths[0],
                secondary_paths=paths[1],
                secondary_family=target.secondary_family if paths[1] else None,
                trace=traces.get((target.cluster, target.node)),
            )
        )
    return HealthReport(
        node=node,
        cluster=cluster,
        probe_time=report.started_at,
        interval_s=interval_s,
        targets=tuple(targets),
        plan=report.plan,
        health_score=local.score,
        degraded_since=local.degraded_since,
        degraded_reasons=local.reasons if local.degraded_since is not None else (),
    )


def change_signature(report: HealthReport) -> ChangeSignature:
    """What counts as a change, the one place that says it: two reports with the same
    signature need no write (the liveness refresh aside). Today every path's status,
    keyed by (target cluster, target node, path name; `@secondary` for a dual-stack
    target's secondary addresses), so a target that appears or leaves changes it too.
    Whatever must reach readers at once (a path's suspicion state, the node's degraded
    flag) goes here; what moves every round (rtt_s, loss, probe_time) must not, or
    every round would write."""
    signature: ChangeSignature = {}
    if report.degraded_since is not None:
        signature[("degraded",)] = report.degraded_reasons
    for target in report.targets:
        if target.trace is not None:
            signature[(target.cluster, target.node, "trace")] = (
                target.trace.address,
                target.trace.hop,
            )
        for name, path in target.paths.items():
            signature[(target.cluster, target.node, name)] = (
                path.status if path.state is None else (path.status, path.state)
            )
        for name, path in target.secondary_paths.items():
            signature[(target.cluster, target.node, name + SECONDARY_SUFFIX)] = (
                path.status if path.state is None else (path.status, path.state)
            )
    return signature


@dataclass(frozen=True, slots=True)
class Written:
    statuses: ChangeSignature
    probe_time: float
    registration: object  # the lease generation the entry was written under


class PublishPolicy:
    """Decides when to write (pure: times are plain numbers passed in).

    `note_report(statuses, probe_time, now)` after each round, `note_registration(gen)`
    when the lease generation is known or changed; `due_at()` is the time to write at
    (None: nothing to write, wait for the next round), `reason()` says why; after a
    successful write call `written(now)`.
    """

    def __init__(
        self,
        interval_s: float,
        *,
        refresh_s: float = defaults.PUBLISH_REFRESH_S,
        debounce_s: float = defaults.PUBLISH_DEBOUNCE_S,
    ) -> None:
        if interval_s <= 0 or refresh_s <= 0 or debounce_s < 0:
            raise ValueError("publish policy needs interval_s > 0, refresh_s > 0, debounce >= 0")
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        self.debounce_s = debounce_s
        self.pending: tuple[ChangeSignature, float] | None = None
        self.registration: object | None = None
        self.last: Written | None = None
        self.changed_since: float | None = None

    @property
    def refresh_after_s(self) -> float:
        """Probe-time distance that calls for a refresh: the first round at least
        `refresh_s` after the last write, so refreshes are never closer than that. No
        slack on purpose: with a rotating plan every epoch boundary writes anyway (the
        targets change), and a refresh allowed a little early would land just before
        that write, on the round before the boundary, and double it."""
        return self.refresh_s

    def note_report(self, statuses: ChangeSignature, probe_time: float, now: float) -> None:
        self.pending = (statuses, probe_time)
        if self.last is None or statuses == self.last.statuses:
            self.changed_since = None
        elif self.changed_since is None:
            self.changed_since = now

    def note_registration(self, registration: object | None) -> None:
        self.registration = registration

    def reason(self) -> str | None:
        """`first`, `registration`, `change`, `refresh`, or None (nothing due)."""
        if self.pending is None or self.registration is None:
            return None
        if self.last is None:
            return "first"
        if self.registration != self.last.registration:
            return "registration"
        if self.changed_since is not None:
            return "change"
        if self.pending[1] - self.last.probe_time >= self.refresh_after_s:
            return "refresh"
        return None

    def due_at(self) -> float | None:
        """When to write: -inf for now, a time for a debounced change, None for never."""
        reason = self.reason()
        if reason is None:
            return None
        if reason == "change":
            assert self.changed_since is not None
            return self.changed_since + self.debounce_s
        return -math.inf

    def written(self, statuses: ChangeSignature, probe_time: float, now: float) -> None:
        """This report was written under the current registration (a newer one may be
        pending already: it is then compared with what was written)."""
        assert self.registration is not None
        self.last = Written(statuses, probe_time, self.registration)
        self.changed_since = None
        if self.pending is not None and self.pending[0] != statuses:
            self.changed_since = now


# --- the I/O part ------------------------------------------------------------------------


class Publisher:
    """Writes this node's HealthReport when `PublishPolicy` says so.

    Writes, their bytes and failed writes are counted once, in `metrics`
    (meshhealth_kvstore_writes_total, _write_bytes_total and _write_errors_total
    {key_kind=health}), and read back as `writes`, `write_bytes`, `write_errors`;
    `writes_by_reason` (first, change, refresh, ...) and `settled` (times the writer
    found nothing due and went to wait: when a round or a new lease was considered) are
    the publisher's own; `last_written` is the newest report written.
    """

    def __init__(
        self,
        etcd: Etcd,
        registrar: LeaseHolder,
        *,
        cluster: str,
        node: str,
        interval_s: float,
        refresh_s: float = defaults.PUBLISH_REFRESH_S,
        debounce_s: float = defaults.PUBLISH_DEBOUNCE_S,
        metrics: WriteCounters | None = None,
    ) -> None:
        self.etcd = etcd
        self.registrar = registrar
        self.cluster = cluster
        self.node = node
        self.interval_s = interval_s
        self.key = keys.health_key(cluster, node)
        self.policy = PublishPolicy(interval_s, refresh_s=refresh_s, debounce_s=debounce_s)
        self.metrics = metrics if metrics is not None else WriteCounters()
        self._report: HealthReport | None = None
        self._round: tuple[RoundReport, Mapping[PathKey, PathSummary], LocalHealthMark] | None
        self._round = None
        self._verdicts: Verdicts = NO_VERDICTS
        self._traces: Traces = NO_TRACES
        self._wake = trio.Event()
        self.writes_by_reason: dict[str, int] = {}
        self.settled = 0
        self.last_written: HealthReport | None = None

    @property
    def writes(self) -> int:
        return int(self.metrics.writes.value)

    @property
    def write_bytes(self) -> int:
        return int(self.metrics.write_bytes.value)

    @property
    def write_errors(self) -> int:
        return int(self.metrics.write_errors.value)

    def note_round(
        self,
        report: RoundReport,
        summaries: Mapping[PathKey, PathSummary],
        verdicts: Verdicts = NO_VERDICTS,
        local: LocalHealthMark = WELL,
    ) -> None:
        """After each round (trio thread): remember the results, wake the writer."""
        self._round = (report, summaries, local)
        self._note(verdicts)

    def note_verdicts(self, verdicts: Verdicts) -> None:
        """Paths' verdicts changed between rounds: the last round's report with them."""
        if self._round is not None:
            self._note(verdicts)

    def note_traces(self, traces: Traces) -> None:
        """Where this agent's traces stopped changed: the last round's report with them."""
        self._traces = traces
        if self._round is not None:
            self._note(self._verdicts)

    def _note(self, verdicts: Verdicts) -> None:
        assert self._round is not None
        self._verdicts = verdicts
        report, summaries, local = self._round
        health = health_report(
            report,
            summaries,
            cluster=self.cluster,
            node=self.node,
            interval_s=self.interval_s,
            verdicts=verdicts,
            local=local,
            traces=self._traces,
        )
        self._report = health
        self.policy.note_report(change_signature(health), health.probe_time, trio.current_time())
        self._wake.set()

    def _registration(self) -> tuple[int, int] | None:
        lease_id = self.registrar.lease_id
        return None if lease_id is None else (lease_id, self.registrar.changes)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write when due, until cancelled. etcd errors are retried with back-off."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_registration)
            task_status.started()
            await self._write_when_due()

    async def _follow_registration(self) -> None:
        """Wake the writer whenever the registrar's lease changes (a new lease: write)."""
        seen = -1
        while True:
            seen = await self.registrar.wait_changed(seen)
            self._wake.set()

    async def _write_when_due(self) -> None:
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        retry_at = -math.inf
        while True:
            self.policy.note_registration(self._registration())
            due = self.policy.due_at()
            now = trio.current_time()
            if due is not None and max(due, retry_at) <= now:
                if await self._write():
                    backoff.reset()
                    retry_at = -math.inf
                else:
                    retry_at = trio.current_time() + backoff.next_delay_s()
                continue
            # Nothing to write now: wait for a round, a new lease, a debounce deadline
            # or the retry time, whichever comes first.
            self.settled += 1
            with trio.move_on_at(math.inf if due is None else max(due, retry_at)):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _write(self) -> bool:
        report, registration = self._report, self.policy.registration
        reason = self.policy.reason() or "?"
        assert report is not None and isinstance(registration, tuple)
        value = encode_health_report(report)
        try:
            await self.etcd.put(self.key, value, lease_id=registration[0])
        except EtcdError as error:
            self.metrics.count_error()
            log.warning("publishing %s: %s (retrying)", self.key, error)
            return False
        self.policy.written(change_signature(report), report.probe_time, trio.current_time())
        self.writes_by_reason[reason] = self.writes_by_reason.get(reason, 0) + 1
        self.last_written = report
        self.metrics.count(len(value))
        log.debug("published %s (%s, %d bytes)", self.key, reason, len(value))
        return True
