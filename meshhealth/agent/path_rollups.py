"""Per-path roll-ups of this agent's own probes over 10-minute and 1-hour windows of
wall-clock time, for SLAs (pure, no I/O; docs/report.md).

    rollups = PathRollups("c1", "node-1")
    rollups.record_round(report)           # after each round (the agent object)
    if rollups.close(now=time.time()):     # windows that ended by now are closed
        value = rollups.snapshot(now)      # -> wire.rollup.NodeRollups, for etcd
    rollups.restore(previous, now=...)     # at start: the value the last run wrote

Each path has one open window of each length and its closed ones (probes, failures,
RTT percentiles). Bounded: closed windows age out (`keep_minutes10_s`, `keep_hours_s`)
and the encoded value stays within `max_bytes`, counted exactly per changed path so it
is never encoded whole to be measured. A result for an already closed window (a clock
stepped back) is dropped and counted in `late`.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable, Sequence

from meshhealth import defaults
from meshhealth.model import PathKey, ProbeResult, RoundReport, path_label
from meshhealth.probe.stats import nearest_rank
from meshhealth.wire.rollup import (
    HOUR_S,
    MINUTES10_S,
    NodeRollups,
    PathRollup,
    Window,
    path_wire_bytes,
    value_wire_bytes,
)

PathName = tuple[str, str, str]  # cluster, node, path label


def summarise(start: float, probes: int, failures: int, rtts_s: Sequence[float]) -> Window:
    """The closed window of `probes` results, `failures` of them failed, and the RTTs of
    the successful ones."""
    if not rtts_s:
        return Window(start, probes, failures, None, None, None)
    ordered = sorted(rtts_s)
    return Window(
        start, probes, failures, nearest_rank(ordered, 50), nearest_rank(ordered, 95), ordered[-1]
    )


class _Open:
    """A window being filled."""

    __slots__ = ("failures", "probes", "rtts_s", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.probes = 0
        self.failures = 0
        # The successful probes' RTTs until the window closes: an hour's worth at the
        # default interval is 360 a path; 8 bytes each in an array, not a 32-byte float
        # object and its list slot.
        self.rtts_s: array[float] = array("d")

    def add(self, result: ProbeResult) -> None:
        self.probes += 1
        if not result.ok:
            self.failures += 1
        elif result.rtt_s is not None:
            self.rtts_s.append(result.rtt_s)

    def closed(self) -> Window:
        return summarise(self.start, self.probes, self.failures, self.rtts_s)


class _Series:
    """One kind of window of one path: the open one and the closed ones, oldest first."""

    __slots__ = ("closed", "length", "open")

    def __init__(self, length: int) -> None:
        self.length = length
        self.open: _Open | None = None
        self.closed: deque[Window] = deque()

    def add(self, result: ProbeResult) -> tuple[bool, bool]:
        """(counted, a window closed)."""
        start = float(math.floor(result.started_at / self.length) * self.length)
        closed = False
        if self.open is not None and start > self.open.start:
            closed = self.close_open()
        if self.closed and start <= self.closed[-1].start:
            return False, closed
        if self.open is None:
            self.open = _Open(start)
        elif start < self.open.start:
            return False, closed
        self.open.add(result)
        return True, closed

    def close_open(self) -> bool:
        if self.open is None:
            return False
        window, self.open = self.open, None
        if window.probes:
            self.closed.append(window.closed())
        return window.probes > 0

    def close_by(self, now: float) -> bool:
        if self.open is not None and self.open.start + self.length <= now:
            return self.close_open()
        return False


class _Path:
    __slots__ = ("bytes", "hours", "minutes10", "name")

    def __init__(self, name: PathName) -> None:
        self.name = name
        self.minutes10 = _Series(MINUTES10_S)
        self.hours = _Series(HOUR_S)
        self.bytes = 0  # of its closed windows in the value; 0 when it has none

    def rollup(self) -> PathRollup:
        cluster, node, path = self.name
        return PathRollup(
            cluster, node, path, tuple(self.minutes10.closed), tuple(self.hours.closed)
        )

    def measure(self) -> None:
        has_windows = self.minutes10.closed or self.hours.closed
        self.bytes = path_wire_bytes(self.rollup()) if has_windows else 0

    @property
    def empty(self) -> bool:
        series = (self.minutes10, self.hours)
        return all(s.open is None and not s.closed for s in series)


class PathRollups:
    """This node's per-path roll-ups (see the module doc)."""

    def __init__(
        self,
        cluster: str,
        node: str,
        *,
        max_bytes: int = defaults.ROLLUP_MAX_BYTES,
        keep_minutes10_s: float = defaults.ROLLUP_KEEP_MINUTES10_S,
        keep_hours_s: float = defaults.ROLLUP_KEEP_HOURS_S,
    ) -> None:
        if max_bytes < value_wire_bytes(cluster, node, 0, 0):
            raise ValueError(f"max_bytes {max_bytes} cannot hold even an empty value")
        self.cluster = cluster
        self.node = node
        self.max_bytes = max_bytes
        self.keep_minutes10_s = keep_minutes10_s
        self.keep_hours_s = keep_hours_s
        self.late = 0  # results dropped: their window was closed already
        self._paths: dict[PathName, _Path] = {}
        self._closed_since = False  # a 10-minute window closed since the last close()

    def __len__(self) -> int:
        return len(self._paths)

    def record(self, path: PathKey, result: ProbeResult) -> None:
        name = (path.cluster, path.node, path_label(path))
        state = self._paths.get(name)
        if state is None:
            state = self._paths[name] = _Path(name)
        counted, closed10 = state.minutes10.add(result)
        counted_h, closed_h = state.hours.add(result)
        if not (counted and counted_h):
            self.late += 1
        if closed10 or closed_h:
            state.measure()
        self._closed_since |= closed10

    def record_round(self, report: RoundReport) -> None:
        for path_report in report.paths:
            self.record(path_report.path, path_report.result)

    def close(self, now: float) -> bool:
        """Close every window that ended by `now`, drop what is too old or over the
        byte bound; True when a 10-minute window closed since the last call (the value
        to publish changed)."""
        for state in self._paths.values():
            closed10 = state.minutes10.close_by(now)
            closed_h = state.hours.close_by(now)
            if closed10 or closed_h:
                state.measure()
            self._closed_since |= closed10
        self._prune(now)
        changed, self._closed_since = self._closed_since, False
        return changed

    def restore(self, value: NodeRollups, *, now: float) -> None:
        """Take back the closed windows of the value an earlier run wrote; windows this
        run has already closed or opened win over those of the same time."""
        for rollup in value.paths:
            name = (rollup.cluster, rollup.node, rollup.path)
            state = self._paths.get(name)
            if state is None:
                state = self._paths[name] = _Path(name)
            _merge(state.minutes10, rollup.minutes10)
            _merge(state.hours, rollup.hours)
            state.measure()
        self._prune(now)

    def snapshot(self, now: float) -> NodeRollups:
        """The closed windows as the etcd value (paths sorted, those without windows
        left out)."""
        paths = tuple(
            self._paths[name].rollup() for name in sorted(self._paths) if self._paths[name].bytes
        )
        return NodeRollups(self.cluster, self.node, now, paths)

    def wire_bytes(self) -> int:
        """The size of `snapshot(...)` encoded, exactly."""
        sizes = [state.bytes for state in self._paths.values() if state.bytes]
        return value_wire_bytes(self.cluster, self.node, len(sizes), sum(sizes))

    def windows(self) -> tuple[int, int]:
        """Closed (10-minute, hourly) windows held."""
        states = self._paths.values()
        return (
            sum(len(s.minutes10.closed) for s in states),
            sum(len(s.hours.closed) for s in states),
        )

    def _prune(self, now: float) -> None:
        for state in list(self._paths.values()):
            dropped = _drop_before(state.minutes10, now - self.keep_minutes10_s)
            dropped |= _drop_before(state.hours, now - self.keep_hours_s)
            if dropped:
                state.measure()
        while self.wire_bytes() > self.max_bytes:
            minutes10, hours = self.windows()
            if not minutes10 and not hours:
                break
            use_minutes = minutes10 >= hours
            oldest = min(
                (s for s in self._paths.values() if _series(s, use_minutes).closed),
                key=lambda s: (_series(s, use_minutes).closed[0].start, s.name),
            )
            _series(oldest, use_minutes).closed.popleft()
            oldest.measure()
        for name in [name for name, state in self._paths.items() if state.empty]:
            del self._paths[name]


def _series(state: _Path, minutes10: bool) -> _Series:
    return state.minutes10 if minutes10 else state.hours


def _drop_before(series: _Series, cutoff: float) -> bool:
    """Drop the closed windows that ended before `cutoff`; True if any."""
    dropped = False
    while series.closed and series.closed[0].start + series.length <= cutoff:
        series.closed.popleft()
        dropped = True
    return dropped


def _merge(series: _Series, restored: Iterable[Window]) -> None:
    mine = {window.start for window in series.closed}
    limit = series.open.start if series.open is not None else math.inf
    taken = [w for w in restored if w.start not in mine and w.start < limit]
    if taken:
        series.closed = deque(sorted([*series.closed, *taken], key=lambda w: w.start))
