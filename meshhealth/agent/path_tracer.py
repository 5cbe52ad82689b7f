"""Where the way stops: one trace when an own NodeIP ICMP path turns unreachable.

    tracer = PathTracer()
    await nursery.start(tracer.run)      # runs the traces, one at a time
    tracer.note_round(report, verdicts)  # each round (never blocks)
    stops = await tracer.changed(seen)   # ... and where they stopped, for the report

After a round, every target whose NodeIP ICMP path's verdict is `unreachable` and that
has no trace yet is queued for one trace (probe/trace.py: ICMP, AGENT_TRACE_MAX_HOPS
hops, one echo each), within the limits of `TraceLimiter` (pure): at most one per
target per AGENT_TRACE_PER_TARGET_S and AGENT_TRACES_PER_MINUTE in all. The traces run
in the tracer's own task, never in the round. Where a trace stopped (the farthest hop
that answered, or none) is kept while the path stays unreachable and dropped when it
is not; the health report carries it (`trace` of the target) and diagnosis quotes it
in a path, partition or node-isolated finding's evidence.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

import trio

from meshhealth import defaults
from meshhealth.agent.reporting.publisher import Traces
from meshhealth.documents.status import Verdicts
from meshhealth.model import (
    PathKey,
    Protocol,
    Reachability,
    RoundReport,
    TargetType,
    TraceStop,
)
from meshhealth.probe.trace import trace

log = logging.getLogger(__name__)

TargetId = tuple[str, str]  # (cluster, node)
# Trace `ip` and say where it stopped (the default: probe/trace.py with the agent's bounds).
Tracer = Callable[[str], Awaitable[TraceStop]]
QUEUE_SIZE = 64  # traces waiting; more are dropped (the limiter allows 6 a minute anyway)


async def trace_stop(ip: str) -> TraceStop:
    """One trace to `ip` with the agent's bounds: where it stopped."""
    result = await trace(
        ip,
        max_hops=defaults.AGENT_TRACE_MAX_HOPS,
        count=1,
        timeout_s=defaults.AGENT_TRACE_TIMEOUT_S,
    )
    last = result.last_answering
    if last is None:
        return TraceStop(None, 0, result.started_at)
    address = next(p.address for p in last.probes if p.address is not None)
    return TraceStop(address, last.ttl, result.started_at)


class TraceLimiter:
    """Whether a trace may start now (pure: times are passed in)."""

    def __init__(
        self,
        *,
        per_target_s: float = defaults.AGENT_TRACE_PER_TARGET_S,
        per_minute: int = defaults.AGENT_TRACES_PER_MINUTE,
    ) -> None:
        self.per_target_s = per_target_s
        self.per_minute = per_minute
        self._last: dict[TargetId, float] = {}
        self._recent: deque[float] = deque()

    def allow(self, target: TargetId, now: float) -> bool:
        """True (and counted) when `target` was not traced within `per_target_s` and
        fewer than `per_minute` traces started in the last minute."""
        while self._recent and self._recent[0] <= now - 60.0:
            self._recent.popleft()
        if now - self._last.get(target, -math.inf) < self.per_target_s:
            return False
        if len(self._recent) >= self.per_minute:
            return False
        self._last[target] = now
        self._recent.append(now)
        return True


def _unreachable(verdicts: Verdicts, cluster: str, node: str) -> bool:
    state = verdicts.get(PathKey(cluster, node, TargetType.NODE, Protocol.ICMP))
    return state is not None and state.verdict == Reachability.UNREACHABLE


class PathTracer:
    """Traces to targets whose NodeIP ICMP path is unreachable, and where they stopped."""

    def __init__(
        self,
        *,
        tracer: Tracer = trace_stop,
        limiter: TraceLimiter | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tracer = tracer
        self._limiter = limiter if limiter is not None else TraceLimiter()
        self._clock = clock
        self._send, self._receive = trio.open_memory_channel[tuple[TargetId, str]](QUEUE_SIZE)
        self._failing: set[TargetId] = set()  # NodeIP ICMP unreachable, as of the last round
        self._queued: set[TargetId] = set()
        self._stops: dict[TargetId, TraceStop] = {}
        self._version = 0
        self._changed = trio.Event()
        self.traces = 0  # traces run since start

    def stops(self) -> Mapping[TargetId, TraceStop]:
        """Where each trace to a still-unreachable target stopped (a copy)."""
        return dict(self._stops)

    def note_round(self, report: RoundReport, verdicts: Verdicts) -> None:
        """Queue a trace to each target newly unreachable over NodeIP ICMP (within the
        limits); forget the traces of targets that are not (never blocks)."""
        now = self._clock()
        failing: set[TargetId] = set()
        for target in report.targets:
            key = (target.cluster, target.node)
            if not _unreachable(verdicts, *key):
                continue
            failing.add(key)
            if key in self._stops or key in self._queued:
                continue
            if not self._limiter.allow(key, now):
                continue
            try:
                self._send.send_nowait((key, target.node_ip))
            except trio.WouldBlock:
                continue
            self._queued.add(key)
        self._failing = failing
        gone = self._stops.keys() - failing
        for key in gone:
            del self._stops[key]
        if gone:
            self._note_change()

    async def changed(self, seen: int) -> tuple[int, Traces]:
        """Wait until the stops differ from version `seen`: the new version and stops."""
        while self._version == seen:
            await self._changed.wait()
        return self._version, self.stops()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the queued traces one at a time, until cancelled."""
        task_status.started()
        async for key, ip in self._receive:
            try:
                with trio.fail_after(defaults.AGENT_TRACE_MAX_HOPS + 5.0):
                    stop = await self._tracer(ip)
            except (OSError, ValueError, trio.TooSlowError) as exc:
                log.warning("trace to %s/%s (%s) failed: %s", *key, ip, exc)
                continue
            finally:
                self._queued.discard(key)
                self.traces += 1
            if key in self._failing:
                log.info(
                    "trace to %s/%s (%s) stops after %s (hop %d)",
                    *key,
                    ip,
                    stop.address or "no hop",
                    stop.hop,
                )
                self._stops[key] = stop
                self._note_change()

    def _note_change(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = trio.Event()
