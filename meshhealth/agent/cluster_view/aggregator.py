"""The aggregator: while this agent holds the cluster's claim, it follows every health
report of the cluster, diagnoses the matrix and publishes one summary.

    aggregator = Aggregator(etcd, election, cluster="lab1", node="node1")
    nursery.start_soon(aggregator.run)

Only the claim's holder (AggregatorElection) reads the health prefix and the planned
maintenance windows. After a change (debounced), when a report turns stale or a window
runs out, it builds the matrix, diagnoses it and writes `state/summary/v1/<cluster>`
when its content changed, under its lease and only while it holds the claim; findings
opening and closing go into the timeline (timeline.py). A `path` finding is published
once it has lasted SUMMARY_PATH_SETTLE_S (`hold_new_paths`: a node fault's onset seen one
observer at a time is not a path fault). Only registered nodes' reports
count (this cluster's discovery), so a forged or left-over entry can neither fail nor
vouch for anyone.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.cluster_view.election import AggregatorElection
from meshhealth.agent.cluster_view.timeline import FindingTimeline
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.diagnosis.cluster_summary import build_summary, hold_new_paths, keep_since
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix, stale_after_s
from meshhealth.kvstore import Backoff, Etcd, EtcdError, LeaseIs, Put
from meshhealth.matrix_source import HealthReports, MaintenanceWindows, registered_reports
from meshhealth.metrics import CounterSeries
from meshhealth.model import HealthReport
from meshhealth.wire import keys
from meshhealth.wire.event import Identity, identity
from meshhealth.wire.maintenance import MaintenanceWindow
from meshhealth.wire.summary import ClusterSummary, encode_summary

log = logging.getLogger(__name__)


def summarise(
    reports: Sequence[HealthReport],
    *,
    cluster: str,
    aggregator: str,
    now: float,
    maintenance: Sequence[MaintenanceWindow] = (),
) -> tuple[ClusterSummary, float]:
    """The summary of `reports` and the planned `maintenance` windows at `now`, and the
    unix time at which it next changes without an event: the next fresh report turns
    stale, or a window on now ends (inf: neither will). Pure."""
    matrix = build_matrix(reports, now=now, source_clusters=[cluster], maintenance=maintenance)
    summary = build_summary(
        matrix, diagnose(matrix_view(matrix)), cluster=cluster, aggregator=aggregator
    )
    turns_stale = [
        report.probe_time + stale_after_s(report.interval_s)
        for report in reports
        if report.probe_time + stale_after_s(report.interval_s) > now
    ]
    ends = [window.end for window in matrix.maintenance.values()]
    return summary, min([*turns_stale, *ends], default=math.inf)


class Aggregator:
    """Publishes the cluster's summary while `election.leading`.

    `written` is the newest summary written (None before the first, and after this
    agent stopped leading); `evaluations` counts summaries built. Writes, their bytes
    and failed writes are counted once, in `metrics` (key_kind=summary); `writes` reads
    them back.
    """

    def __init__(
        self,
        etcd: Etcd,
        election: AggregatorElection,
        *,
        cluster: str,
        node: str,
        debounce_s: float = defaults.SUMMARY_DEBOUNCE_S,
        clock: Callable[[], float] = time.time,
        metrics: WriteCounters | None = None,
        events_metrics: WriteCounters | None = None,
        invalid_events: CounterSeries | None = None,
        registered: Discovery | None = None,
        events_settle_s: float = defaults.EVENTS_SETTLE_S,
        path_settle_s: float = defaults.SUMMARY_PATH_SETTLE_S,
    ) -> None:
        self.etcd = etcd
        self.election = election
        self.cluster = cluster
        self.node = node
        self.key = keys.summary_key(cluster)
        self.debounce_s = debounce_s
        self._clock = clock
        self.metrics = metrics if metrics is not None else WriteCounters()
        self.reports: HealthReports | None = None  # while leading
        self.written: ClusterSummary | None = None
        self.evaluations = 0
        self._wake = trio.Event()
        self.path_settle_s = path_settle_s
        self._paths_seen: dict[Identity, float] = {}  # path findings: since when
        self.registered = registered  # None: every report counts (tests of the summary)
        self.ignored: tuple[tuple[str, str], ...] = ()  # unregistered reporters, last time
        self._ignored_said: set[tuple[str, str]] = set()
        self.timeline = FindingTimeline(
            etcd,
            election,
            cluster=cluster,
            node=node,
            metrics=events_metrics,
            invalid_metric=invalid_events,
            settle_s=events_settle_s,
        )

    @property
    def writes(self) -> int:
        return int(self.metrics.writes.value)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Aggregate while leading, wait while not; until cancelled."""
        task_status.started()
        seen = -1
        while True:
            if not self.election.leading:
                seen = await self.election.wait_changed(seen)
                continue
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._lead)
                while self.election.leading:
                    seen = await self.election.wait_changed(seen)
                nursery.cancel_scope.cancel()
            self.reports = None
            self.written = None
            self._paths_seen = {}

    def _note_change(self) -> None:
        self._wake.set()

    async def _lead(self) -> None:
        reports = HealthReports(self.etcd, self.cluster, on_change=self._note_change)
        windows = MaintenanceWindows(self.etcd, self.cluster, on_change=self._note_change)
        self.reports = reports
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reports.follow)
            nursery.start_soon(windows.follow)
            if self.registered is not None:
                nursery.start_soon(self._follow_registered, self.registered)
                await self.registered.synced.wait()
            await reports.listed.wait()
            await windows.listed.wait()
            backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
            await self._load_timeline(backoff)
            while True:
                self._wake = trio.Event()
                summary, turns_stale_at = summarise(
                    self._counted(reports.reports()),
                    cluster=self.cluster,
                    aggregator=self.node,
                    now=self._clock(),
                    maintenance=windows.windows(),
                )
                held = hold_new_paths(
                    summary.findings,
                    self._paths_seen,
                    shown=self._shown(),
                    now=self._clock(),
                    settle_s=self.path_settle_s,
                )
                self._paths_seen = held.first_seen
                summary = keep_since(replace(summary, findings=held.findings), self.written)
                self.evaluations += 1
                retry = False
                if not summary.same_content(self.written):
                    retry = not await self._write(summary)
                if not await self.timeline.record(summary.findings, now=self._clock()):
                    retry = True
                wake_at = min(
                    turns_stale_at,
                    self.timeline.wake_at() or math.inf,
                    held.settles_at or math.inf,
                )
                wake_in_s = wake_at - self._clock() + defaults.SUMMARY_STALE_MARGIN_S
                if retry:
                    wake_in_s = min(wake_in_s, backoff.next_delay_s())
                else:
                    backoff.reset()
                with trio.move_on_after(max(0.0, wake_in_s)):
                    await self._wake.wait()
                await trio.sleep(self.debounce_s)  # let the rest of a round's reports in

    def _shown(self) -> set[Identity]:
        """The findings published already, so a path finding among them is not held
        again: those of the summary written last; before this holder wrote one (a
        takeover, a restart), those with an open event. Only then is the whole timeline
        read: an event opens only for a finding already in a summary."""
        if self.written is not None:
            return {identity(f) for f in self.written.findings}
        return {e.identity for e in self.timeline.stored.values() if e.closed_at is None}

    async def _load_timeline(self, backoff: Backoff) -> None:
        """Read the timeline this agent's predecessors left, retrying until it is read."""
        while True:
            try:
                await self.timeline.load()
                backoff.reset()
                return
            except EtcdError as error:
                log.warning(
                    "reading the findings timeline of %s: %s (retrying)", self.cluster, error
                )
                await trio.sleep(backoff.next_delay_s())

    def _counted(self, reports: Sequence[HealthReport]) -> Sequence[HealthReport]:
        """The reports of registered nodes; the others are logged once and left out."""
        if self.registered is None:
            return reports
        kept, ignored = registered_reports(reports, self.registered.probe_set())
        self.ignored = tuple(sorted((r.cluster, r.node) for r in ignored))
        for who in self.ignored:
            if who not in self._ignored_said:
                self._ignored_said.add(who)
                log.warning(
                    "aggregator: ignoring the health report of %s/%s: no such registered node",
                    *who,
                )
        return kept

    async def _follow_registered(self, registered: Discovery) -> None:
        version = registered.version
        while True:
            version = await registered.wait_changed(version)
            self._note_change()

    async def _write(self, summary: ClusterSummary) -> bool:
        lease_id = self.election.lease_id
        if lease_id is None:
            return False
        value = encode_summary(summary)
        try:
            result = await self.etcd.txn(
                [LeaseIs(self.election.key, lease_id)], [Put(self.key, value, lease_id)]
            )
        except EtcdError as error:
            self.metrics.count_error()
            log.warning("publishing %s: %s (retrying)", self.key, error)
            return False
        if not result.succeeded:  # the claim is not ours any more: the election will say
            log.info("not publishing %s: the aggregator claim moved", self.key)
            return True
        self.written = summary
        self.metrics.count(len(value))
        log.debug("published %s (%d bytes)", self.key, len(value))
        return True
