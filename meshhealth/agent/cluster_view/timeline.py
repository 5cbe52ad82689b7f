"""The findings timeline in etcd: the aggregator records each finding's opening and
closing as one event under `state/events/v1/<cluster>/<id>` (meshhealth.wire.event).

    timeline = FindingTimeline(etcd, election, cluster="lab1", node="node1", settle_s=10.0)
    await timeline.load()                          # when this agent takes the claim
    ok = await timeline.record(summary.findings, now=now)   # after each summary
    timeline.wake_at()    # when a waiting finding settles or the next old event expires

What to write is decided by meshhealth.diagnosis.timeline (pure). `load` reads the
events of the cluster, so a restarted or new aggregator reconciles its findings with
the events its predecessor left open instead of opening them again. A finding is
written only once it has been in the summaries `record` saw for `settle_s`
(defaults.EVENTS_SETTLE_S): the aggregator calls `record` again at `wake_at`, with the
same findings when nothing changed, and the finding then opens. Every write and
delete is a transaction that holds only while the claim is still under this agent's
lease (a former aggregator cannot write behind its successor), and events have no
lease: they outlive their writer. A failed write is tried again after the next summary
(`record` returns False: the aggregator retries with back-off).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from meshhealth import defaults
from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.cluster_view.election import AggregatorElection
from meshhealth.diagnosis.timeline import advance, expired, next_expiry
from meshhealth.kvstore import Delete, Etcd, EtcdError, LeaseIs, Put
from meshhealth.log_format import event_fields
from meshhealth.metrics import CounterSeries
from meshhealth.timefmt import iso_time
from meshhealth.wire import keys
from meshhealth.wire.event import FindingEvent, Identity, encode_event
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.summary import SummaryFinding
from meshhealth.wire.values import decode_event_value

log = logging.getLogger(__name__)


def _log_event(name: str, event: FindingEvent) -> None:
    """`finding opened: path lab1/a,lab1/b (confidence 0.50)`, with the event's fields."""
    verb = name.partition("-")[2]
    log.info(
        "finding %s: %s %s (confidence %.2f)",
        verb,
        event.kind,
        ",".join(event.nodes),
        event.confidence,
        extra=event_fields(
            name,
            id=event.id,
            kind=event.kind,
            nodes=list(event.nodes),
            confidence=event.confidence,
            evidence=event.evidence,
            opened_at=iso_time(event.opened_at),
            closed_at=iso_time(event.closed_at),
        ),
    )


async def read_cluster_events(etcd: Etcd, cluster: str) -> list[FindingEvent]:
    """Every event of `cluster` that decodes (EtcdError when etcd cannot be read): what
    the web page's timeline strip shows, whichever agent serves it."""
    kvs, _ = await etcd.get_prefix(keys.events_prefix(cluster))
    events = []
    for kv in kvs:
        try:
            events.append(decode_event_value(kv.key, kv.value))
        except DecodeError:
            continue  # the aggregator logs it when it reads the timeline
    return events


class FindingTimeline:
    """This cluster's events as this aggregator knows them.

    `stored` is what etcd holds (id -> event) since `load`; `opened`, `closed`,
    `deleted` and `invalid` count."""

    def __init__(
        self,
        etcd: Etcd,
        election: AggregatorElection,
        *,
        cluster: str,
        node: str,
        metrics: WriteCounters | None = None,
        invalid_metric: CounterSeries | None = None,
        max_age_s: float = defaults.EVENTS_MAX_AGE_S,
        max_count: int = defaults.EVENTS_MAX_COUNT,
        settle_s: float = defaults.EVENTS_SETTLE_S,
    ) -> None:
        self.etcd = etcd
        self.election = election
        self.cluster = cluster
        self.node = node
        self.prefix = keys.events_prefix(cluster)
        self.metrics = metrics if metrics is not None else WriteCounters()
        self.max_age_s = max_age_s
        self.max_count = max_count
        self.settle_s = settle_s
        self.stored: dict[str, FindingEvent] = {}
        self._held: dict[str, FindingEvent] = {}
        self._pending: dict[Identity, float] = {}  # findings not yet events: first seen
        self._settles_at: float | None = None
        self.loaded = False
        self.opened = 0
        self.closed = 0
        self.deleted = 0
        self._invalid_metric = invalid_metric if invalid_metric is not None else CounterSeries()

    @property
    def invalid(self) -> int:
        """Events that did not decode: read from its metric series, the one count."""
        return int(self._invalid_metric.value)

    async def load(self) -> None:
        """Read the cluster's events (EtcdError: try again)."""
        self.loaded = False
        kvs, _ = await self.etcd.get_prefix(self.prefix)
        stored: dict[str, FindingEvent] = {}
        for kv in kvs:
            try:
                event = decode_event_value(kv.key, kv.value)
            except DecodeError as error:
                self._invalid_metric.inc()
                log.warning("finding event %s does not decode: %s (left as it is)", kv.key, error)
                continue
            stored[event.id] = event
        self.stored, self._held, self.loaded = stored, {}, True
        self._pending, self._settles_at = {}, None  # seen anew by this holder
        still_open = sum(1 for e in stored.values() if e.closed_at is None)
        log.info(
            "findings timeline of %s: %d events, %d open", self.cluster, len(stored), still_open
        )

    def wake_at(self) -> float | None:
        """When `record` has something to do with the same findings: a waiting finding
        settles, or the next closed event turns too old to keep (None: neither)."""
        times = (self._settles_at, next_expiry(self.stored, max_age_s=self.max_age_s))
        return min((t for t in times if t is not None), default=None)

    async def record(self, findings: Sequence[SummaryFinding], *, now: float) -> bool:
        """Write what `findings` open, grow and close, and delete what is too old;
        False when etcd refused or failed (try again later)."""
        if not self.loaded:
            return False
        step = advance(
            self.stored,
            self._held,
            findings,
            pending=self._pending,
            settle_s=self.settle_s,
            cluster=self.cluster,
            aggregator=self.node,
            now=now,
        )
        self._pending, self._settles_at = step.pending, step.settles_at
        done = await self._write(step.writes)
        self._held = {i: e for i, e in step.held.items() if i in self.stored}
        if not done:
            return False
        expiry = next_expiry(self.stored, max_age_s=self.max_age_s)
        if len(self.stored) <= self.max_count and (expiry is None or expiry > now):
            return True  # nothing to delete: no sorting of the whole timeline per summary
        gone = expired(self.stored, now=now, max_age_s=self.max_age_s, max_count=self.max_count)
        return await self._delete(gone)

    async def _write(self, events: Sequence[FindingEvent]) -> bool:
        puts: list[tuple[FindingEvent, bytes]] = []
        for event in events:
            try:
                puts.append((event, encode_event(event)))
            except ValueError as error:  # too large: the event is left out, said once
                log.warning("finding event %s not written: %s", event.id, error)
        for start in range(0, len(puts), defaults.EVENTS_TXN_OPS):
            chunk = puts[start : start + defaults.EVENTS_TXN_OPS]
            ops = [Put(keys.event_key(self.cluster, e.id), data) for e, data in chunk]
            if not await self._txn(ops):
                return False
            for event, data in chunk:
                was = self.stored.get(event.id)
                if was is None or (was.closed_at is not None and event.closed_at is None):
                    self.opened += 1
                    _log_event("finding-opened", event)
                if event.closed_at is not None and (was is None or was.closed_at is None):
                    self.closed += 1
                    _log_event("finding-closed", event)
                self.stored[event.id] = event
                self.metrics.count(len(data))
        return True

    async def _delete(self, ids: Sequence[str]) -> bool:
        for start in range(0, len(ids), defaults.EVENTS_TXN_OPS):
            chunk = ids[start : start + defaults.EVENTS_TXN_OPS]
            if not await self._txn([Delete(keys.event_key(self.cluster, i)) for i in chunk]):
                return False
            for event_id in chunk:
                self.stored.pop(event_id, None)
            self.deleted += len(chunk)
        return True

    async def _txn(self, ops: Sequence[Put | Delete]) -> bool:
        lease_id = self.election.lease_id
        if lease_id is None:
            return False
        try:
            result = await self.etcd.txn([LeaseIs(self.election.key, lease_id)], ops)
        except EtcdError as error:
            log.warning("writing the findings timeline of %s: %s (retrying)", self.cluster, error)
            return False
        if not result.succeeded:  # the claim moved: the election will say
            log.info("not writing the findings timeline: the aggregator claim moved")
            return False
        return True
