"""This node's roll-ups in etcd (`state/rollup/v1/<cluster>/<node>`, no lease), for
`meshhealth report` (docs/report.md).

    rollups = RollupPublisher(etcd, PathRollups(cluster, node), metrics=...)
    await nursery.start(rollups.run)
    rollups.note_round(report)           # after every round

Each round's results go into the roll-ups (agent/path_rollups.py, pure) at once. When a
10-minute window has closed (`PathRollups.close`, checked after every round, so within
one interval of the boundary), the value is written, after this node's own delay within
`spread_s` (a hash of its name: the nodes of a cluster write spread over those minutes
instead of all at once after the boundary): at most once per 10 minutes. The
value has no lease, so it outlives the agent: at start, before anything is written,
the value the last run wrote is read back and its windows taken over (a value that does
not decode is logged, counted and replaced). etcd errors are retried with back-off; a
retry writes the newest value.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import WriteCounters
from meshhealth.agent.path_rollups import PathRollups
from meshhealth.kvstore import Backoff, Etcd, EtcdError
from meshhealth.metrics import CounterSeries
from meshhealth.model import RoundReport
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.rollup import decode_rollups, encode_rollups

log = logging.getLogger(__name__)


def write_phase(cluster: str, node: str) -> float:
    """0 <= phase < 1: where in the spread this node writes (the same on every start)."""
    digest = hashlib.blake2b(f"{cluster}/{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class RollupPublisher:
    """Feeds the roll-ups and writes them when a window closed (see the module doc).

    `restored` is set once the previous value was read back (or found absent);
    `writes` counts the values written (also in `metrics`,
    meshhealth_kvstore_writes_total{key_kind=rollup})."""

    def __init__(
        self,
        etcd: Etcd,
        rollups: PathRollups,
        *,
        metrics: WriteCounters | None = None,
        invalid_metric: CounterSeries | None = None,
        spread_s: float = defaults.ROLLUP_WRITE_SPREAD_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.etcd = etcd
        self.rollups = rollups
        self.key = keys.rollup_key(rollups.cluster, rollups.node)
        self.metrics = metrics if metrics is not None else WriteCounters()
        self.invalid_metric = invalid_metric if invalid_metric is not None else CounterSeries()
        self.clock = clock
        self.delay_s = spread_s * write_phase(rollups.cluster, rollups.node)
        self.restored = trio.Event()
        self.written = trio.Event()  # set after each write (a new one then)
        self._due = False
        self._wake = trio.Event()

    @property
    def writes(self) -> int:
        return int(self.metrics.writes.value)

    def note_round(self, report: RoundReport) -> None:
        """After each round (trio thread, never blocks)."""
        self.rollups.record_round(report)
        if self.rollups.close(self.clock()):
            self._due = True
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the previous value back, then write when due, until cancelled."""
        task_status.started()
        backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
        while True:
            if await self._restore():
                break
            await trio.sleep(backoff.next_delay_s())  # a retry after an etcd error
        self.restored.set()
        backoff.reset()
        while True:
            if not self._due:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            await trio.sleep(self.delay_s)  # this node's place in the spread
            while True:  # the newest value, until etcd takes it
                if await self._write():
                    break
                await trio.sleep(backoff.next_delay_s())  # a retry after an etcd error
            backoff.reset()

    async def _restore(self) -> bool:
        try:
            kv, _ = await self.etcd.get(self.key)
        except EtcdError as error:
            log.warning("reading back %s: %s (retrying)", self.key, error)
            return False
        if kv is None:
            return True
        try:
            previous = decode_rollups(kv.value)
        except DecodeError as error:
            self.invalid_metric.inc()
            log.warning("skipping the previous roll-ups at %s: %s", self.key, error)
            return True
        if (previous.cluster, previous.node) != (self.rollups.cluster, self.rollups.node):
            self.invalid_metric.inc()
            log.warning("skipping the previous roll-ups at %s: written for another node", self.key)
            return True
        self.rollups.restore(previous, now=self.clock())
        log.info("read back %d paths of roll-ups from %s", len(previous.paths), self.key)
        return True

    async def _write(self) -> bool:
        self._due = False
        value = encode_rollups(self.rollups.snapshot(self.clock()))
        try:
            await self.etcd.put(self.key, value)
        except EtcdError as error:
            self._due = True
            self.metrics.count_error()
            log.warning("publishing %s: %s (retrying)", self.key, error)
            return False
        self.metrics.count(len(value))
        self.written.set()
        self.written = trio.Event()
        log.debug("published %s (%d bytes)", self.key, len(value))
        return True
