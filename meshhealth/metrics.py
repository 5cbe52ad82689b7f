"""A tiny Prometheus registry and its text exposition (format 0.0.4). Pure, no I/O.

    registry = Registry()
    rounds = registry.counter("meshhealth_rounds_total", "Probe rounds finished.")
    status = registry.gauge("x_status", "...", ("node", "status"))
    rounds.inc()
    status.labels(node="a", status="up").set(1)
    status.remove_matching(node="a")          # the node left: drop its series
    text = registry.expose()
    in_flight = registry.gauge("x_in_flight", "...")
    in_flight.labels().read_from(lambda: pinger.in_flight)   # read at each exposition
    registry.on_expose(snapshot.refresh)      # one read of a shared source per exposition

Counter, Gauge and Histogram families, with labels. A family without labels has its one
series from the start (value 0); a labelled family gets a series on first `labels(...)`.
Series and families are printed in a stable order (families as registered, series by
label values), so the exposition can be compared with a golden text. A reading that
returns None has no value this time: its series is left out of that exposition (the
process metrics when /proc cannot be read), like a collector that yields nothing.

Not thread-safe: use it from the trio thread (results of worker threads come back
through `trio.from_thread`).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_METRIC_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

LabelValues = tuple[str, ...]


def format_value(value: float) -> str:
    """A sample value: `1`, `0.25`, `+Inf`, `NaN` (what Prometheus parses)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(
        f'{name}="{escape_label_value(value)}"' for name, value in zip(names, values, strict=True)
    )
    return "{" + pairs + "}"


Reading = Callable[[], float | None]  # None: no value now, the series is left out


class CounterSeries:
    """A count that only goes up: `inc` it, or let it `read_from` a count kept elsewhere."""

    __slots__ = ("_read", "_value")

    def __init__(self) -> None:
        self._value = 0.0
        self._read: Reading | None = None

    @property
    def value(self) -> float:
        self.sample()
        return self._value

    def sample(self) -> float | None:
        """The value to expose; None when its reading has none this time."""
        if self._read is not None:
            read = self._read()
            if read is None:
                return None
            # A count that went down (its owner was replaced) keeps the last value.
            self._value = max(self._value, float(read))
        return self._value

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up, not by {amount}")
        if self._read is not None:
            raise ValueError("this counter is read from a function: it cannot be increased")
        self._value += amount

    def read_from(self, read: Reading) -> None:
        """Take the value from `read()` whenever it is exposed (client_golang's
        CounterFunc): for a count another component keeps, read at scrape time only."""
        self._read = read


class GaugeSeries:
    """A value that goes up and down: `set` it, or let it `read_from` a function."""

    __slots__ = ("_read", "_value")

    def __init__(self) -> None:
        self._value = 0.0
        self._read: Reading | None = None

    @property
    def value(self) -> float:
        sample = self.sample()
        return math.nan if sample is None else sample

    def sample(self) -> float | None:
        """The value to expose; None when its reading has none this time."""
        if self._read is None:
            return self._value
        read = self._read()
        return None if read is None else float(read)

    def set(self, value: float) -> None:
        self._value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        self._value += amount

    def dec(self, amount: float = 1.0) -> None:
        self._value -= amount

    def read_from(self, read: Reading) -> None:
        """Take the value from `read()` whenever it is exposed (client_golang's GaugeFunc)."""
        self._read = read


class HistogramSeries:
    __slots__ = ("bucket_counts", "count", "sum", "upper_bounds")

    def __init__(self, upper_bounds: tuple[float, ...]) -> None:
        self.upper_bounds = upper_bounds  # sorted, without +Inf
        self.bucket_counts = [0] * len(upper_bounds)  # not cumulative
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.upper_bounds, value)  # first bound >= value
        if index < len(self.bucket_counts):
            self.bucket_counts[index] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, count of observations <= bound), +Inf last."""
        total = 0
        out = []
        for bound, count in zip(self.upper_bounds, self.bucket_counts, strict=True):
            total += count
            out.append((bound, total))
        out.append((math.inf, self.count))
        return out


S = TypeVar("S", CounterSeries, GaugeSeries, HistogramSeries)


class Family(Generic[S]):
    """A metric name with its help text, label names and one series per label values."""

    kind = "untyped"

    def __init__(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> None:
        if not _METRIC_NAME_RE.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in label_names:
            if not _LABEL_NAME_RE.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} in {name}")
        if len(set(label_names)) != len(label_names):
            raise ValueError(f"duplicate label names in {name}: {label_names}")
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)
        self._series: dict[LabelValues, S] = {}
        if not self.label_names:
            self._series[()] = self._new_series()

    def _new_series(self) -> S:
        raise NotImplementedError

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise ValueError(
                f"{self.name} takes labels {self.label_names}, got {tuple(sorted(labels))}"
            )
        return tuple(str(labels[name]) for name in self.label_names)

    def labels(self, **labels: str) -> S:
        """The series with these label values, created (at zero) on first use."""
        key = self._key(labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new_series()
        return series

    def remove(self, **labels: str) -> bool:
        """Drop one series; True when it existed."""
        return self._series.pop(self._key(labels), None) is not None

    def remove_matching(self, **labels: str) -> int:
        """Drop every series whose labels include these values; how many were dropped."""
        unknown = set(labels) - set(self.label_names)
        if unknown:
            raise ValueError(f"{self.name} has no labels {sorted(unknown)}")
        positions = [(self.label_names.index(k), v) for k, v in labels.items()]
        doomed = [key for key in self._series if all(key[i] == v for i, v in positions)]
        for key in doomed:
            del self._series[key]
        return len(doomed)

    def clear(self) -> None:
        """Drop every series (a family without labels keeps its one series, reset)."""
        self._series.clear()
        if not self.label_names:
            self._series[()] = self._new_series()

    def series(self) -> dict[LabelValues, S]:
        """Every series by label values (a copy), for readers and tests."""
        return dict(self._series)

    def _only(self) -> S:
        if self.label_names:
            raise ValueError(f"{self.name} has labels {self.label_names}: use .labels(...)")
        return self._series[()]

    def expose(self) -> Iterable[str]:
        yield f"# HELP {self.name} {escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"
        for key in sorted(self._series):
            yield from self._sample_lines(key, self._series[key])

    def _sample_lines(self, key: LabelValues, series: S) -> Iterable[str]:
        raise NotImplementedError


V = TypeVar("V", CounterSeries, GaugeSeries)


class _OneValueFamily(Family[V]):
    """A family whose series hold one number each (counters, gauges)."""

    @property
    def value(self) -> float:
        return self._only().value

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def _sample_lines(self, key: LabelValues, series: V) -> Iterable[str]:
        sample = series.sample()
        if sample is not None:
            yield f"{self.name}{_label_text(self.label_names, key)} {format_value(sample)}"


class Counter(_OneValueFamily[CounterSeries]):
    kind = "counter"

    def _new_series(self) -> CounterSeries:
        return CounterSeries()


class Gauge(_OneValueFamily[GaugeSeries]):
    kind = "gauge"

    def _new_series(self) -> GaugeSeries:
        return GaugeSeries()

    def set(self, value: float) -> None:
        self._only().set(value)

    def dec(self, amount: float = 1.0) -> None:
        self._only().dec(amount)


class Histogram(Family[HistogramSeries]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets if not math.isinf(b)))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct finite numbers, got {buckets}")
        if "le" in label_names:
            raise ValueError(f"{name}: `le` is reserved for histogram buckets")
        self.upper_bounds = bounds
        super().__init__(name, help_text, label_names)

    def _new_series(self) -> HistogramSeries:
        return HistogramSeries(self.upper_bounds)

    def observe(self, value: float) -> None:
        self._only().observe(value)

    def _sample_lines(self, key: LabelValues, series: HistogramSeries) -> Iterable[str]:
        names = (*self.label_names, "le")
        for bound, count in series.cumulative():
            labels = _label_text(names, (*key, format_value(bound)))
            yield f"{self.name}_bucket{labels} {count}"
        labels = _label_text(self.label_names, key)
        yield f"{self.name}_sum{labels} {format_value(series.sum)}"
        yield f"{self.name}_count{labels} {series.count}"


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """`count` bounds: start, start*factor, ... (Prometheus' ExponentialBuckets)."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError("exponential_buckets needs start > 0, factor > 1, count >= 1")
    return tuple(start * factor**i for i in range(count))


class Registry:
    """The families one exposition shows, in registration order."""

    def __init__(self) -> None:
        self._families: dict[str, Family[Any]] = {}
        self._refreshes: list[Callable[[], None]] = []

    def on_expose(self, refresh: Callable[[], None]) -> None:
        """Call `refresh()` at the start of every exposition, before any series is read:
        a source that several series read (one /proc file) is then read once per scrape."""
        self._refreshes.append(refresh)

    def _add(self, family: Family[Any]) -> None:
        if family.name in self._families:
            raise ValueError(f"metric {family.name} is already registered")
        self._families[family.name] = family

    def counter(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> Counter:
        family = Counter(name, help_text, label_names)
        self._add(family)
        return family

    def gauge(self, name: str, help_text: str, label_names: Sequence[str] = ()) -> Gauge:
        family = Gauge(name, help_text, label_names)
        self._add(family)
        return family

    def histogram(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        *,
        buckets: Sequence[float],
    ) -> Histogram:
        family = Histogram(name, help_text, label_names, buckets=buckets)
        self._add(family)
        return family

    def names(self) -> list[str]:
        return list(self._families)

    def expose(self) -> str:
        """The whole text exposition, ending with a newline."""
        for refresh in self._refreshes:
            refresh()
        lines: list[str] = []
        for family in self._families.values():
            lines.extend(family.expose())
        return "\n".join(lines) + "\n" if lines else ""
