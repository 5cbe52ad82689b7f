"""`meshhealth report`: per-pair and per-node availability over a span of time, from
every node's roll-ups (wire/rollup.py; docs/report.md). Pure: the values and the times
are arguments.

    document = build_report(values, since=now - 86400, now=now, top=10)

Which windows count: per path, the 10-minute windows that end after `since`; an hourly
window only for an hour in which that path has no 10-minute window (older than the day
the 10-minute windows are kept, or evicted by the value's byte bound), so no probe is
counted twice. A window that began before `since` counts whole.

- `pairs`: one row per observer, target and path kind (`node/icmp`, ...), least
  available first: availability = 1 - failures / probes over the counted windows, the
  probes, the highest p95 of any counted window, and the window with the lowest
  availability.
- `nodes`: each node as a target, over every observer and path kind that probed it:
  the same, with the number of observers; its worst window is the wall-clock window in
  which its observers' probes, added up, failed most.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

from meshhealth.timefmt import iso_time
from meshhealth.wire.rollup import HOUR_S, MINUTES10_S, NodeRollups, PathRollup, Window


class WindowDoc(TypedDict):
    """One window: its start (ISO 8601 UTC), length, probes, failures, availability."""

    start: str
    seconds: int
    probes: int
    failures: int
    availability: float  # 0 .. 1


class PairRow(TypedDict):
    observer: str  # cluster/node: who probed
    target: str  # cluster/node: what it probed
    path: str  # node/icmp, endpoint/http@secondary, ...
    availability: float  # 0 .. 1: 1 - failures / probes
    probes: int
    failures: int
    worst_rtt_p95_s: float | None  # the highest p95 of any counted window; None: no success
    worst_window: WindowDoc


class NodeRow(TypedDict):
    node: str  # cluster/node, as a target
    observers: int  # nodes whose probes of it were counted
    availability: float
    probes: int
    failures: int
    worst_rtt_p95_s: float | None
    worst_window: WindowDoc  # the observers' probes of it added up per window


class ReportDocument(TypedDict):
    since: str  # ISO 8601 UTC
    until: str
    values: int  # roll-up values read (one per observing node)
    pairs_total: int  # pairs (observer, target, path) with probes in the span
    nodes_total: int  # nodes probed in the span
    pairs: list[PairRow]  # the `top` least available
    nodes: list[NodeRow]


@dataclass(slots=True)
class _Tally:
    probes: int = 0
    failures: int = 0
    worst_p95: float | None = None
    observers: set[str] = field(default_factory=set)
    # (start, seconds) -> [probes, failures]
    windows: dict[tuple[float, int], list[int]] = field(default_factory=dict)

    def add(self, window: Window, seconds: int, observer: str) -> None:
        self.probes += window.probes
        self.failures += window.failures
        self.observers.add(observer)
        if window.rtt_p95_s is not None:
            self.worst_p95 = max(self.worst_p95 or 0.0, window.rtt_p95_s)
        counts = self.windows.setdefault((window.start, seconds), [0, 0])
        counts[0] += window.probes
        counts[1] += window.failures

    @property
    def availability(self) -> float:
        return 1.0 - self.failures / self.probes

    def worst_window(self) -> WindowDoc:
        (start, seconds), (probes, failures) = min(
            self.windows.items(),
            key=lambda item: (1.0 - item[1][1] / item[1][0], -item[1][1], item[0]),
        )
        return {
            "start": iso_time(start) or "",
            "seconds": seconds,
            "probes": probes,
            "failures": failures,
            "availability": 1.0 - failures / probes,
        }


def counted_windows(path: PathRollup, since: float) -> list[tuple[Window, int]]:
    """The windows of `path` that count for a span from `since` (module doc), with
    their length in seconds."""
    found = [(w, MINUTES10_S) for w in path.minutes10 if w.start + MINUTES10_S > since]
    covered = {w.start - w.start % HOUR_S for w in path.minutes10}
    found += [
        (w, HOUR_S) for w in path.hours if w.start + HOUR_S > since and w.start not in covered
    ]
    return found


def build_report(
    values: Iterable[NodeRollups], *, since: float, now: float, top: int
) -> ReportDocument:
    """The report over [since, now] of the roll-ups in `values` (module doc)."""
    pairs: dict[tuple[str, str, str], _Tally] = {}
    nodes: dict[str, _Tally] = {}
    count = 0
    for value in values:
        count += 1
        observer = f"{value.cluster}/{value.node}"
        for path in value.paths:
            target = f"{path.cluster}/{path.node}"
            for window, seconds in counted_windows(path, since):
                if window.start >= now:
                    continue
                pairs.setdefault((observer, target, path.path), _Tally()).add(
                    window, seconds, observer
                )
                if target != observer:  # a node's probes of itself say nothing of it
                    nodes.setdefault(target, _Tally()).add(window, seconds, observer)

    def order(item: tuple[object, _Tally]) -> tuple[float, int, str]:
        return (item[1].availability, -item[1].failures, str(item[0]))

    pair_rows: list[PairRow] = [
        {
            "observer": observer,
            "target": target,
            "path": path,
            "availability": tally.availability,
            "probes": tally.probes,
            "failures": tally.failures,
            "worst_rtt_p95_s": tally.worst_p95,
            "worst_window": tally.worst_window(),
        }
        for (observer, target, path), tally in sorted(pairs.items(), key=order)[:top]
    ]
    node_rows: list[NodeRow] = [
        {
            "node": node,
            "observers": len(tally.observers),
            "availability": tally.availability,
            "probes": tally.probes,
            "failures": tally.failures,
            "worst_rtt_p95_s": tally.worst_p95,
            "worst_window": tally.worst_window(),
        }
        for node, tally in sorted(nodes.items(), key=order)[:top]
    ]
    return {
        "since": iso_time(since) or "",
        "until": iso_time(now) or "",
        "values": count,
        "pairs_total": len(pairs),
        "nodes_total": len(nodes),
        "pairs": pair_rows,
        "nodes": node_rows,
    }
