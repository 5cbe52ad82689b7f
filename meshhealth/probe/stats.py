"""Per-path statistics over a sliding window of probe results (pure, no I/O).

Definitions (what `PathStats.summary()` reports):

- **loss**: ``1 - sum(received) / sum(sent)`` over the results in the window. For ICMP
  with ``count=3`` this is packet loss (one probe that got 2 of 3 replies adds 1/3 of a
  probe's worth); for HTTP (``sent=1`` per probe) it is the fraction of failed probes.
  A result with ``sent == 0`` (a probe that could not send at all, e.g. ICMP disabled)
  adds nothing to either sum; if nothing in the window was sent, loss is 1.0. With no
  results yet, loss is 0.0 (``samples == 0`` says "not probed yet"). Loss counts from
  the path's first answer: the failures before it (probes sent while the target or its
  endpoint was still starting) leave the window when it first answers; a path that never
  answered keeps them (loss 1.0).
- **rtt_last_s**: the newest result's RTT (the mean of its replies), None if it got none.
- **rtt_p50_s / rtt_p95_s / rtt_max_s**: over every individual RTT of every result in
  the window (one per reply), nearest-rank percentile: the value at rank
  ``ceil(p/100 * n)`` of the sorted RTTs, so it is always one of the measured values.
- **last_probed / last_success**: ``started_at`` of the newest result / of the newest
  OK result; neither forgets when results leave the window.
- **consecutive_failures**: non-OK results since the last OK one (not capped by the
  window).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

from meshhealth import defaults, model


def nearest_rank(sorted_values: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile of already sorted, non-empty values."""
    if not sorted_values:
        raise ValueError("nearest_rank of no values")
    if not 0.0 <= percent <= 100.0:
        raise ValueError(f"percent must be in 0..100, not {percent}")
    rank = max(1, math.ceil(percent / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


class PathStats:
    """The last `window` results of one path, and what users read from them."""

    __slots__ = ("_consecutive_failures", "_last_success", "_results")

    def __init__(self, window: int = defaults.STATS_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, not {window}")
        self._results: deque[model.ProbeResult] = deque(maxlen=window)
        self._last_success: float | None = None
        self._consecutive_failures = 0

    @property
    def window(self) -> int:
        maxlen = self._results.maxlen
        assert maxlen is not None
        return maxlen

    @property
    def last(self) -> model.ProbeResult | None:
        """The newest result, None before the first."""
        return self._results[-1] if self._results else None

    def add(self, result: model.ProbeResult) -> None:
        if result.ok and self._last_success is None:
            self._results.clear()  # not ready yet, not lost: see the module docstring
        self._results.append(result)
        if result.ok:
            self._consecutive_failures = 0
            if self._last_success is None or result.started_at >= self._last_success:
                self._last_success = result.started_at
        else:
            self._consecutive_failures += 1

    def summary(self) -> model.PathSummary:
        results = self._results
        if not results:
            return model.PathSummary(
                samples=0,
                last=None,
                loss=0.0,
                rtt_last_s=None,
                rtt_p50_s=None,
                rtt_p95_s=None,
                rtt_max_s=None,
                last_probed=None,
                last_success=self._last_success,
                consecutive_failures=self._consecutive_failures,
            )
        last = results[-1]
        sent = sum(max(r.sent, 0) for r in results)
        received = sum(min(max(r.received, 0), max(r.sent, 0)) for r in results)
        loss = 1.0 - received / sent if sent > 0 else 1.0
        rtts = sorted(rtt for r in results for rtt in r.rtts_s)
        return model.PathSummary(
            samples=len(results),
            last=last,
            loss=loss,
            rtt_last_s=last.rtt_s,
            rtt_p50_s=nearest_rank(rtts, 50) if rtts else None,
            rtt_p95_s=nearest_rank(rtts, 95) if rtts else None,
            rtt_max_s=rtts[-1] if rtts else None,
            last_probed=last.started_at,
            last_success=self._last_success,
            consecutive_failures=self._consecutive_failures,
        )


class StatsBook:
    """`PathStats` for every path the prober has results for, keyed by `PathKey`."""

    __slots__ = ("_paths", "_window")

    def __init__(self, window: int = defaults.STATS_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, not {window}")
        self._window = window
        self._paths: dict[model.PathKey, PathStats] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def __contains__(self, key: object) -> bool:
        return key in self._paths

    def add(self, key: model.PathKey, result: model.ProbeResult) -> model.ProbeResult | None:
        """Add one result; returns the path's previous newest result (None if first)."""
        stats = self._paths.get(key)
        if stats is None:
            stats = self._paths[key] = PathStats(self._window)
        previous = stats.last
        stats.add(result)
        return previous

    def last(self, key: model.PathKey) -> model.ProbeResult | None:
        """The newest result of one path, None when it has none."""
        stats = self._paths.get(key)
        return None if stats is None else stats.last

    def record(self, report: model.RoundReport) -> None:
        """Add every path result of a round."""
        for path_report in report.paths:
            self.add(path_report.path, path_report.result)

    def forget(self, keys: Iterable[model.PathKey]) -> None:
        """Drop the history of these paths (their target left the probe set)."""
        for key in keys:
            self._paths.pop(key, None)

    def retain_targets(self, targets: Iterable[model.Target]) -> list[model.PathKey]:
        """Forget every path whose (cluster, node) is not among `targets`; return them."""
        keep = {(t.cluster, t.node) for t in targets}
        gone = [k for k in self._paths if (k.cluster, k.node) not in keep]
        self.forget(gone)
        return gone

    def summary(self, key: model.PathKey) -> model.PathSummary | None:
        stats = self._paths.get(key)
        return None if stats is None else stats.summary()

    def summaries(self) -> dict[model.PathKey, model.PathSummary]:
        """Every path's summary, in `PathKey` order."""
        return {key: self._paths[key].summary() for key in sorted(self._paths)}
