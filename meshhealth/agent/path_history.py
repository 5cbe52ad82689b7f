"""One hour of one-minute summaries per path this agent probes (pure, no I/O).

    history = PathHistory(minutes=60)
    history.record_round(report)           # after each round (the agent object)
    history.retain_targets(report.targets)  # forget nodes that left
    history.minutes(path_key, now=time.time())   # -> [MinuteSummary, ...], oldest first

The web page draws a sparkline of the last hour from this when a cell of the agent's own
row is clicked. Each path keeps:

- the minute being filled: a count of probes and failures and the RTTs of its successful
  probes (at most 60 s / interval of them: 6 at the default 10 s interval);
- up to `minutes` closed minutes in a ring of packed 20-byte slots (unix minute, probes,
  failures, RTT p50 / p95 / max as float32 seconds; NaN when no probe succeeded).

Cost: 60 x 20 bytes = 1.2 KB of ring per path plus about 0.4 KB of Python objects, so
about 6.5 KB per probed node (4 paths), 6.5 MB at 1,000 nodes; recording a result is a
few list appends, closing a minute one sort of that minute's RTTs. Minutes without any
result (agent stopped, node not yet known) are simply absent: readers place summaries by
their `minute`, not by position.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.model import PathKey, ProbeResult, RoundReport, Target
from meshhealth.probe.stats import nearest_rank

MINUTE_S = 60
# unix minute (uint32), probes (uint16), failures (uint16), p50, p95, max (float32 s)
_SLOT = struct.Struct("<IHHfff")
_MAX_COUNT = 0xFFFF


@dataclass(frozen=True, slots=True)
class MinuteSummary:
    minute: int  # unix time // 60 of the minute summarised
    probes: int
    failures: int
    rtt_p50_s: float | None  # of the successful probes; None when none succeeded
    rtt_p95_s: float | None
    rtt_max_s: float | None

    @property
    def start(self) -> int:
        """Unix seconds at which the minute began."""
        return self.minute * MINUTE_S

    @property
    def failure_share(self) -> float:
        return self.failures / self.probes if self.probes else 0.0


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else value


def summarise_minute(minute: int, probes: int, failures: int, rtts_s: list[float]) -> MinuteSummary:
    """The summary of one minute's results (pure; `rtts_s` in any order)."""
    if not rtts_s:
        return MinuteSummary(minute, probes, failures, None, None, None)
    ordered = sorted(rtts_s)
    return MinuteSummary(
        minute,
        probes,
        failures,
        nearest_rank(ordered, 50),
        nearest_rank(ordered, 95),
        ordered[-1],
    )


class _PathRing:
    """The open minute and a ring of closed ones, for one path."""

    __slots__ = ("failures", "filled", "minute", "next_slot", "probes", "ring", "rtts_s")

    def __init__(self, minutes: int) -> None:
        self.ring = bytearray(_SLOT.size * minutes)
        self.filled = 0  # closed minutes stored, at most len(ring) // slot size
        self.next_slot = 0
        self.minute = -1  # the open minute; -1: none yet
        self.probes = 0
        self.failures = 0
        self.rtts_s: list[float] = []

    @property
    def capacity(self) -> int:
        return len(self.ring) // _SLOT.size

    def add(self, minute: int, result: ProbeResult) -> None:
        if minute < self.minute:
            return  # a result older than the open minute (clock stepped back): dropped
        if minute != self.minute:
            self._close()
            self.minute = minute
        self.probes = min(self.probes + 1, _MAX_COUNT)
        rtt_s = result.rtt_s
        if not result.ok:
            self.failures = min(self.failures + 1, _MAX_COUNT)
        elif rtt_s is not None:
            self.rtts_s.append(rtt_s)

    def _close(self) -> None:
        if self.minute < 0 or self.probes == 0:
            return
        summary = summarise_minute(self.minute, self.probes, self.failures, self.rtts_s)
        nan = float("nan")
        _SLOT.pack_into(
            self.ring,
            self.next_slot * _SLOT.size,
            summary.minute,
            summary.probes,
            summary.failures,
            nan if summary.rtt_p50_s is None else summary.rtt_p50_s,
            nan if summary.rtt_p95_s is None else summary.rtt_p95_s,
            nan if summary.rtt_max_s is None else summary.rtt_max_s,
        )
        self.next_slot = (self.next_slot + 1) % self.capacity
        self.filled = min(self.filled + 1, self.capacity)
        self.probes = self.failures = 0
        self.rtts_s = []

    def closed(self) -> list[MinuteSummary]:
        """Closed minutes, oldest first."""
        out = []
        start = (self.next_slot - self.filled) % self.capacity
        for i in range(self.filled):
            slot = (start + i) % self.capacity
            minute, probes, failures, p50, p95, top = _SLOT.unpack_from(
                self.ring, slot * _SLOT.size
            )
            out.append(
                MinuteSummary(
                    minute, probes, failures, _optional(p50), _optional(p95), _optional(top)
                )
            )
        return out

    def open_minute(self) -> MinuteSummary | None:
        if self.minute < 0 or self.probes == 0:
            return None
        return summarise_minute(self.minute, self.probes, self.failures, self.rtts_s)


class PathHistory:
    """Per-path one-minute summaries of this agent's own probes (see the module doc)."""

    def __init__(self, minutes: int = defaults.PATH_HISTORY_MINUTES) -> None:
        if minutes < 1:
            raise ValueError(f"minutes must be >= 1, got {minutes}")
        self.minutes_kept = minutes
        self._paths: dict[PathKey, _PathRing] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def record(self, path: PathKey, result: ProbeResult) -> None:
        ring = self._paths.get(path)
        if ring is None:
            ring = self._paths[path] = _PathRing(self.minutes_kept)
        ring.add(int(result.started_at // MINUTE_S), result)

    def record_round(self, report: RoundReport) -> None:
        for path_report in report.paths:
            self.record(path_report.path, path_report.result)

    def retain_targets(self, targets: Iterable[Target]) -> list[PathKey]:
        """Forget the paths of nodes not in `targets`; returns the keys forgotten."""
        keep = {(t.cluster, t.node) for t in targets}
        gone = [key for key in self._paths if (key.cluster, key.node) not in keep]
        for key in gone:
            del self._paths[key]
        return gone

    def minutes(self, path: PathKey, *, now: float) -> list[MinuteSummary]:
        """The summaries of the last `minutes_kept` minutes up to `now`, oldest first;
        the minute in progress (partial) last."""
        ring = self._paths.get(path)
        if ring is None:
            return []
        first = int(now // MINUTE_S) - self.minutes_kept + 1
        found = [summary for summary in ring.closed() if summary.minute >= first]
        current = ring.open_minute()
        if current is not None and current.minute >= first:
            found.append(current)
        return found

    def memory_bytes(self) -> int:
        """The packed rings' size (what grows with paths x minutes), for the docs."""
        return sum(len(ring.ring) for ring in self._paths.values())
