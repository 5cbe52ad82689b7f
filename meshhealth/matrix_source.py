"""Reading every node's health report from etcd: once for the matrix (`meshhealth
matrix`, GET /v1/matrix, `read_matrix`), or kept current (`meshhealth watch --etcd`:
`HealthReports`, `MaintenanceWindows`, `RegisteredNodes`, each a list then a resuming
watch).

Each source is one etcd and the cluster read there (None: every cluster in it), read
concurrently; a source that fails is listed in `matrix.unavailable` and the others are
shown. Values that do not decode are skipped, logged once per key and revision, and
counted. Only registered nodes' reports count where a reader says so
(`registered_reports`, the rule the aggregator uses too: meshhealth.probe_set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

import trio

from meshhealth import defaults
from meshhealth.documents.matrix import Matrix, NodeRef, build_matrix
from meshhealth.kvstore import KV, Etcd, EtcdError, EventKind, WatchEvent
from meshhealth.kvstore.follow import follow_prefix
from meshhealth.model import HealthReport, IPEntry, Node
from meshhealth.probe_set import TargetKey, build_probe_set, vouched_entries
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.maintenance import MaintenanceWindow
from meshhealth.wire.values import decode_value

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MatrixSource:
    cluster: str | None  # None: every cluster's entries in this etcd
    etcd: Etcd


@dataclass(frozen=True, slots=True)
class InvalidValue:
    key: str
    mod_revision: int
    error: str

    def __str__(self) -> str:
        return f"{self.key}: {self.error}"


def decode_report(key: str, value: bytes, mod_revision: int) -> HealthReport | InvalidValue:
    """The health report stored at `key`, or why it cannot be read."""
    try:
        report = decode_value(key, value)
    except DecodeError as error:
        return InvalidValue(key, mod_revision, str(error))
    if not isinstance(report, HealthReport):
        return InvalidValue(key, mod_revision, f"not a health report: {type(report).__name__}")
    return report


async def list_reports(
    etcd: Etcd, cluster: str | None, *, timeout_s: float
) -> tuple[dict[str, HealthReport], list[InvalidValue], int]:
    """key -> health report under `cluster`'s prefix (all clusters: None), the values
    that do not decode, and the revision of the listing. EtcdError when etcd fails,
    trio.TooSlowError after `timeout_s` (the request's own deadline may be later)."""
    with trio.fail_after(timeout_s):
        kvs, revision = await etcd.get_prefix(keys.health_prefix(cluster))
    found, invalid = decode_reports(kvs)
    return found, invalid, revision


def decode_reports(kvs: Iterable[KV]) -> tuple[dict[str, HealthReport], list[InvalidValue]]:
    """key -> health report of the values that decode, and those that do not."""
    found: dict[str, HealthReport] = {}
    invalid: list[InvalidValue] = []
    for kv in kvs:
        decoded = decode_report(kv.key, kv.value, kv.mod_revision)
        if isinstance(decoded, InvalidValue):
            invalid.append(decoded)
        else:
            found[kv.key] = decoded
    return found, invalid


def registered_reports(
    reports: Iterable[HealthReport], registered: Collection[TargetKey]
) -> tuple[list[HealthReport], list[HealthReport]]:
    """(the reports of registered (cluster, node)s, the others). Pure: the one rule of
    the aggregator and of the commands."""
    kept: list[HealthReport] = []
    ignored: list[HealthReport] = []
    for report in reports:
        is_registered = (report.cluster, report.node) in registered
        (kept if is_registered else ignored).append(report)
    return kept, ignored


def registered_nodes(items: Iterable[tuple[str, bytes]]) -> set[TargetKey]:
    """The (cluster, node)s registered by the ip and node entries among (key, value)
    pairs: the probe set of the ip entries their node entries vouch for. A value that
    does not decode registers nobody."""
    entries: list[tuple[str, IPEntry]] = []
    nodes: list[Node] = []
    for key, value in items:
        try:
            entry = decode_value(key, value)
        except DecodeError:
            continue
        if isinstance(entry, IPEntry):
            entries.append((keys.parse_key(key).cluster, entry))
        elif isinstance(entry, Node):
            nodes.append(entry)
    return set(build_probe_set(vouched_entries(entries, nodes)[0]))


async def list_registrations(
    etcd: Etcd, cluster: str | None, *, timeout_s: float
) -> list[tuple[str, bytes]]:
    """The (key, value) pairs of the ip and node entries of `cluster` (every cluster:
    None): what `registered_nodes` reads."""
    with trio.fail_after(timeout_s):
        ips, _ = await etcd.get_prefix(keys.ip_prefix(cluster))
        nodes, _ = await etcd.get_prefix(keys.nodes_prefix(cluster))
    return [(kv.key, kv.value) for kv in (*ips, *nodes)]


def ignored_line(ignored: Iterable[HealthReport]) -> str:
    """`ignored N health reports from unregistered nodes: c1/x, ...` (names sorted)."""
    names = sorted({f"{r.cluster}/{r.node}" for r in ignored})
    return f"ignored {len(names)} health reports from unregistered nodes: {', '.join(names)}"


async def read_reports(
    etcd: Etcd, cluster: str | None, *, timeout_s: float, registered_only: bool = False
) -> tuple[list[HealthReport], list[str], list[HealthReport]]:
    """The health reports under `cluster`'s prefix (all clusters: None), one line per
    value skipped because it did not decode, and (`registered_only`) the reports left
    out because no ip entry registers their node. EtcdError when etcd fails."""
    found, invalid, _ = await list_reports(etcd, cluster, timeout_s=timeout_s)
    reports: list[HealthReport] = list(found.values())
    ignored: list[HealthReport] = []
    if registered_only:
        registrations = await list_registrations(etcd, cluster, timeout_s=timeout_s)
        reports, ignored = registered_reports(reports, registered_nodes(registrations))
    return reports, [str(value) for value in invalid], ignored


@dataclass(frozen=True, slots=True)
class MatrixRead:
    """What `read_matrix` read: the matrix, the number of values skipped (they do not
    decode) and the reports ignored (their node is not registered)."""

    matrix: Matrix
    skipped: int
    ignored: tuple[HealthReport, ...] = ()


async def read_matrix(
    sources: Sequence[MatrixSource],
    *,
    now: float,
    extra_nodes: Iterable[NodeRef] = (),
    timeout_s: float = defaults.MATRIX_READ_TIMEOUT_S,
    registered_only: bool = False,
) -> MatrixRead:
    """The matrix of every source's reports (`registered_only`: of registered nodes)."""
    results: dict[int, tuple[list[HealthReport], list[str], list[HealthReport]] | str] = {}
    windows: list[MaintenanceWindow] = []

    async def read_one(index: int, source: MatrixSource) -> None:
        try:
            results[index] = await read_reports(
                source.etcd, source.cluster, timeout_s=timeout_s, registered_only=registered_only
            )
            windows.extend(await read_windows(source.etcd, source.cluster, timeout_s=timeout_s))
        except EtcdError as error:
            results[index] = str(error)
        except trio.TooSlowError:
            results[index] = f"etcd {source.etcd.description}: no answer within {timeout_s:g}s"

    async with trio.open_nursery() as nursery:
        for index, source in enumerate(sources):
            nursery.start_soon(read_one, index, source)
    reports: list[HealthReport] = []
    read: list[str] = []
    unavailable: dict[str, str] = {}
    skipped = 0
    ignored: list[HealthReport] = []
    for index, source in enumerate(sources):
        result = results[index]
        name = source.cluster or source.etcd.description
        if isinstance(result, str):
            unavailable[name] = result
            continue
        found, bad, left_out = result
        for line in bad:
            log.warning("skipping invalid health entry %s", line)
        skipped += len(bad)
        ignored += left_out
        reports += found
        if source.cluster is not None:
            read.append(source.cluster)
    matrix = build_matrix(
        reports,
        now=now,
        extra_nodes=extra_nodes,
        source_clusters=read,
        unavailable=unavailable,
        maintenance=windows,
    )
    return MatrixRead(matrix, skipped, tuple(ignored))


def _ignore(_: object) -> None:
    pass


class HealthReports:
    """Every node's health report under one prefix, kept current by `follow`.

    `listed` is set after the first listing; `invalid_values` counts values skipped
    (once per key and revision), `resyncs` the listings after the first one.
    Callbacks run in the trio thread: `on_change()` after a listing or a watch batch,
    `on_invalid(value)` for each newly skipped value, `on_unavailable(why)` when a
    listing fails (follow retries: at the next change of etcd's health, or after a
    back-off).
    """

    def __init__(
        self,
        etcd: Etcd,
        cluster: str | None = None,
        *,
        on_change: Callable[[], None] = lambda: None,
        on_invalid: Callable[[InvalidValue], None] = _ignore,
        on_unavailable: Callable[[str], None] = _ignore,
        timeout_s: float = defaults.MATRIX_READ_TIMEOUT_S,
    ) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.on_change = on_change
        self.on_invalid = on_invalid
        self.on_unavailable = on_unavailable
        self.timeout_s = timeout_s
        self.listed = trio.Event()
        self.invalid_values = 0
        self.resyncs = 0
        self._reports: dict[str, HealthReport] = {}
        self._invalid: dict[str, int] = {}  # key -> revision of the value skipped

    def reports(self) -> list[HealthReport]:
        return list(self._reports.values())

    async def follow(self) -> None:
        """List, then watch, until cancelled. Never raises on etcd errors or bad values."""
        await follow_prefix(
            self.etcd,
            keys.health_prefix(self.cluster),
            what=f"health reports under {keys.health_prefix(self.cluster)}",
            on_list=self._listed,
            on_events=self._changed,
            on_error=self.on_unavailable,
            list_timeout_s=self.timeout_s,
        )

    def _listed(self, kvs: Sequence[KV]) -> None:
        if self.listed.is_set():
            self.resyncs += 1
        found, invalid = decode_reports(kvs)
        self._reports = found
        self._invalid = {k: r for k, r in self._invalid.items() if k not in found}
        for value in invalid:
            self._skip(value)
        self.listed.set()
        self.on_change()

    def _changed(self, events: Sequence[WatchEvent]) -> None:
        self.apply(events)
        self.on_change()

    def apply(self, events: Iterable[WatchEvent]) -> None:
        """Apply watched events (pure state change, for `follow` and for tests)."""
        for event in events:
            self._reports.pop(event.key, None)
            if event.kind is EventKind.DELETE:
                self._invalid.pop(event.key, None)
                continue
            decoded = decode_report(event.key, event.value, event.mod_revision)
            if isinstance(decoded, InvalidValue):
                self._skip(decoded)
            else:
                self._invalid.pop(event.key, None)
                self._reports[event.key] = decoded

    def _skip(self, value: InvalidValue) -> None:
        if self._invalid.get(value.key) == value.mod_revision:
            return  # told already
        self._invalid[value.key] = value.mod_revision
        self.invalid_values += 1
        log.debug("skipping invalid health entry %s", value)
        self.on_invalid(value)


class RegisteredNodes:
    """The (cluster, node)s registered by the ip and node entries of `cluster` (every
    cluster: None), kept current by `follow` (list, then watch, each prefix). `listed`
    is set after the first listing of both; `on_change()` runs after every change."""

    def __init__(
        self, etcd: Etcd, cluster: str | None = None, *, on_change: Callable[[], None]
    ) -> None:
        self.etcd = etcd
        self.prefixes = (keys.ip_prefix(cluster), keys.nodes_prefix(cluster))
        self.on_change = on_change
        self.listed = trio.Event()
        self._values: dict[str, dict[str, bytes]] = {p: {} for p in self.prefixes}
        self._listed_prefixes: set[str] = set()
        self.nodes: set[TargetKey] = set()

    async def follow(self) -> None:
        """List, then watch, until cancelled. Never raises on etcd errors or bad values."""
        async with trio.open_nursery() as nursery:
            for prefix in self.prefixes:
                nursery.start_soon(self._follow, prefix)

    async def _follow(self, prefix: str) -> None:
        def listed(kvs: Sequence[KV]) -> None:
            self._values[prefix] = {kv.key: kv.value for kv in kvs}
            self._listed_prefixes.add(prefix)
            if len(self._listed_prefixes) == len(self.prefixes):
                self.listed.set()  # before on_change: it may wait for `listed`
                self._update()

        await follow_prefix(
            self.etcd,
            prefix,
            what=f"registrations under {prefix}",
            on_list=listed,
            on_events=self.apply,
        )

    def apply(self, events: Iterable[WatchEvent]) -> None:
        for event in events:
            held = next(v for p, v in self._values.items() if event.key.startswith(p))
            held.pop(event.key, None)
            if event.kind is not EventKind.DELETE:
                held[event.key] = event.value
        self._update()

    def _update(self) -> None:
        self.nodes = registered_nodes(kv for held in self._values.values() for kv in held.items())
        self.on_change()


def decode_windows(kvs: Iterable[KV]) -> tuple[dict[str, MaintenanceWindow], list[InvalidValue]]:
    """key -> maintenance window of the values that decode, and those that do not."""
    found: dict[str, MaintenanceWindow] = {}
    invalid: list[InvalidValue] = []
    for kv in kvs:
        try:
            window = decode_value(kv.key, kv.value)
        except DecodeError as error:
            invalid.append(InvalidValue(kv.key, kv.mod_revision, str(error)))
            continue
        if isinstance(window, MaintenanceWindow):
            found[kv.key] = window
    return found, invalid


async def read_windows(
    etcd: Etcd, cluster: str | None, *, timeout_s: float
) -> list[MaintenanceWindow]:
    """The planned maintenance windows under `cluster`'s prefix (all clusters: None),
    ended ones included (the matrix keeps those on at its time). A value that does not
    decode is logged and skipped. EtcdError, trio.TooSlowError as `list_reports`."""
    with trio.fail_after(timeout_s):
        kvs, _ = await etcd.get_prefix(keys.maintenance_prefix(cluster))
    found, invalid = decode_windows(kvs)
    for value in invalid:
        log.warning("skipping invalid maintenance window %s", value)
    return list(found.values())


class MaintenanceWindows:
    """The planned maintenance windows under one cluster's prefix (None: every
    cluster), kept current by `follow` (list, then a resuming watch), as
    `HealthReports` keeps the reports. `on_change()` runs after a listing or a watch
    batch; a value that does not decode is skipped (its node is not in maintenance),
    logged once per key and revision and counted in `invalid_values`."""

    def __init__(
        self,
        etcd: Etcd,
        cluster: str | None = None,
        *,
        on_change: Callable[[], None] = lambda: None,
        timeout_s: float = defaults.MATRIX_READ_TIMEOUT_S,
    ) -> None:
        self.etcd = etcd
        self.cluster = cluster
        self.on_change = on_change
        self.timeout_s = timeout_s
        self.listed = trio.Event()
        self.invalid_values = 0
        self._windows: dict[str, MaintenanceWindow] = {}
        self._invalid: dict[str, int] = {}

    def windows(self) -> list[MaintenanceWindow]:
        """Every window held, ended ones included (`active_windows` picks those on)."""
        return list(self._windows.values())

    async def follow(self) -> None:
        """List, then watch, until cancelled. Never raises on etcd errors or bad values."""
        prefix = keys.maintenance_prefix(self.cluster)
        await follow_prefix(
            self.etcd,
            prefix,
            what=f"maintenance windows under {prefix}",
            on_list=self._listed,
            on_events=self._changed,
            list_timeout_s=self.timeout_s,
        )

    def _listed(self, kvs: Sequence[KV]) -> None:
        found, invalid = decode_windows(kvs)
        self._windows = found
        for value in invalid:
            self._skip(value)
        self.listed.set()
        self.on_change()

    def _changed(self, events: Sequence[WatchEvent]) -> None:
        for event in events:
            self._windows.pop(event.key, None)
            if event.kind is EventKind.DELETE:
                continue
            found, invalid = decode_windows([KV(event.key, event.value, event.mod_revision, 0, 0)])
            self._windows.update(found)
            for value in invalid:
                self._skip(value)
        self.on_change()

    def _skip(self, value: InvalidValue) -> None:
        if self._invalid.get(value.key) == value.mod_revision:
            return
        self._invalid[value.key] = value.mod_revision
        self.invalid_values += 1
        log.warning("skipping invalid maintenance window %s", value)
