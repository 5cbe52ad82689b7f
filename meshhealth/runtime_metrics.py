"""The process's own metrics, read when /metrics is scraped: the standard process and
Python GC series every prometheus_client exporter has, and the live trio tasks.

    runtime_metrics(registry)     # process_*, python_gc_*, meshhealth_trio_tasks

The names, types and help texts are those of prometheus_client's ProcessCollector and
GCCollector, so dashboards and alerts written for any Python exporter work unchanged.
Linux only: /proc/self/stat (CPU, memory, start time; the boot time of /proc/stat, read
once), /proc/self/limits and /proc/self/fd/ are read once per exposition (a refresh the
registry calls first), never by a task. A file that cannot be read or parsed leaves its
series out of that scrape; nothing raises. The parsers are pure (tests/foundation/
test_runtime_metrics.py).

`meshhealth_trio_tasks` walks the task tree from trio's root task (its nurseries' child
tasks) at each exposition, so it must be exposed from the trio thread (the metrics
server's handler is); outside trio the series is left out.
"""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from meshhealth.metrics import Reading, Registry

PROC = Path("/proc")
GC_GENERATIONS = ("0", "1", "2")


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What the process collector reads from /proc/self/stat, in Prometheus' units."""

    cpu_seconds: float  # user + system
    virtual_memory_bytes: float
    resident_memory_bytes: float
    start_time_seconds: float  # Unix time


def parse_proc_stat(
    text: str, *, ticks_per_s: float, page_size: int, boot_time_s: float
) -> ProcStat:
    """The CPU time, memory and start time in a /proc/PID/stat line (proc(5): utime,
    stime, starttime in clock ticks, vsize in bytes, rss in pages). The command name is
    in parentheses and may hold spaces and parentheses itself: the fields are counted
    from the last `)`. ValueError when the text is not such a line."""
    _, paren, after_name = text.rpartition(")")
    if not paren:
        raise ValueError("no ')' closing the command name")
    fields = after_name.split()  # fields[0] is field 3 of proc(5), `state`
    if len(fields) < 22:
        raise ValueError(f"{len(fields) + 2} fields, expected at least 24")
    utime, stime, start_ticks, vsize, rss = (int(fields[i]) for i in (11, 12, 19, 20, 21))
    return ProcStat(
        cpu_seconds=(utime + stime) / ticks_per_s,
        virtual_memory_bytes=float(vsize),
        resident_memory_bytes=float(rss * page_size),
        start_time_seconds=boot_time_s + start_ticks / ticks_per_s,
    )


def parse_boot_time(text: str) -> float:
    """The boot time (Unix seconds) on the `btime` line of /proc/stat."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "btime":
            return float(int(value))
    raise ValueError("no btime line")


def parse_max_open_files(text: str) -> float:
    """The soft limit on the `Max open files` line of /proc/PID/limits (`unlimited`:
    +Inf)."""
    for line in text.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files") :].split()[0]
            return math.inf if soft == "unlimited" else float(int(soft))
    raise ValueError("no 'Max open files' line")


def count_tasks(root: trio.lowlevel.Task) -> int:
    """`root` and every task below it (the child tasks of its nurseries, recursively)."""
    count = 0
    pending = [root]
    while pending:
        task = pending.pop()
        count += 1
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return count


def live_trio_tasks() -> float | None:
    """Every task of the running trio program; None outside trio."""
    try:
        root = trio.lowlevel.current_root_task()
    except RuntimeError:  # not in trio's thread
        return None
    return None if root is None else float(count_tasks(root))


def _read_text(path: Path) -> str:
    """A /proc file's text (os.read: a quarter of the cost of Path.read_text)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 8192):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", errors="replace")


def _gc_count(generation: int, key: str) -> float | None:
    stats = gc.get_stats()
    return float(stats[generation][key]) if generation < len(stats) else None


class ProcessReadings:
    """One read of /proc per exposition (`refresh`); a value is None when its file could
    not be read or parsed this time."""

    def __init__(self, proc: Path = PROC) -> None:
        self._self = proc / "self"
        self._proc_stat = proc / "stat"
        self._ticks_per_s = float(os.sysconf("SC_CLK_TCK"))
        self._page_size = os.sysconf("SC_PAGE_SIZE")
        self._boot_time_s: float | None = None  # read at the first scrape, never changes
        self.stat: ProcStat | None = None
        self.max_fds: float | None = None
        self.open_fds: float | None = None

    def refresh(self) -> None:
        self.stat = self._read_stat()
        try:
            self.max_fds = parse_max_open_files(_read_text(self._self / "limits"))
        except (OSError, ValueError):
            self.max_fds = None
        try:
            self.open_fds = float(len(os.listdir(self._self / "fd")))
        except OSError:
            self.open_fds = None

    def _read_stat(self) -> ProcStat | None:
        try:
            if self._boot_time_s is None:
                self._boot_time_s = parse_boot_time(_read_text(self._proc_stat))
            return parse_proc_stat(
                _read_text(self._self / "stat"),
                ticks_per_s=self._ticks_per_s,
                page_size=self._page_size,
                boot_time_s=self._boot_time_s,
            )
        except (OSError, ValueError):
            return None


def runtime_metrics(registry: Registry, proc: Path = PROC) -> ProcessReadings:
    """Register the process, GC and trio task families in `registry`, each read at
    exposition; the readings (refreshed by the registry) are returned for tests."""
    readings = ProcessReadings(proc)
    registry.on_expose(readings.refresh)

    def of_stat(field: Callable[[ProcStat], float]) -> Reading:
        return lambda: None if readings.stat is None else field(readings.stat)

    gauges: tuple[tuple[str, str, Reading], ...] = (
        ("process_virtual_memory_bytes", "Virtual memory size in bytes.",
         of_stat(lambda stat: stat.virtual_memory_bytes)),
        ("process_resident_memory_bytes", "Resident memory size in bytes.",
         of_stat(lambda stat: stat.resident_memory_bytes)),
        ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
         of_stat(lambda stat: stat.start_time_seconds)),
    )  # fmt: skip
    for name, help_text, read in gauges:
        registry.gauge(name, help_text).labels().read_from(read)
    registry.counter(
        "process_cpu_seconds_total", "Total user and system CPU time spent in seconds."
    ).labels().read_from(of_stat(lambda stat: stat.cpu_seconds))
    fds: tuple[tuple[str, str, Reading], ...] = (
        ("process_open_fds", "Number of open file descriptors.", lambda: readings.open_fds),
        ("process_max_fds", "Maximum number of open file descriptors.", lambda: readings.max_fds),
    )
    for name, help_text, read in fds:
        registry.gauge(name, help_text).labels().read_from(read)

    gc_families = (
        ("python_gc_objects_collected_total", "Objects collected during gc", "collected"),
        (
            "python_gc_objects_uncollectable_total",
            "Uncollectable objects found during GC",
            "uncollectable",
        ),
        (
            "python_gc_collections_total",
            "Number of times this generation was collected",
            "collections",
        ),
    )
    for name, help_text, key in gc_families:
        family = registry.counter(name, help_text, ("generation",))
        for generation in GC_GENERATIONS:
            family.labels(generation=generation).read_from(partial(_gc_count, int(generation), key))

    registry.gauge(
        "meshhealth_trio_tasks",
        "Live trio tasks of this process, counted at scrape; one that only grows leaks tasks.",
    ).labels().read_from(live_trio_tasks)
    return readings
