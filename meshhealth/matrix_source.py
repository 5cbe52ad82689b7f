"""Reading every node's health report from etcd: once for the matrix (`meshhealth
matrix`, GET /v1/matrix), or kept current (`meshhealth watch --etcd`).

    matrix, invalid = await read_matrix(
        [MatrixSource("lab1", etcd1), MatrixSource("lab2", etcd2)], now=time.time()
    )

Each source is one etcd and the cluster whose health prefix is read there (None: every
cluster in that etcd). Sources are read concurrently, each with `timeout_s`; a source
that fails is listed in `matrix.unavailable` (its cluster's nodes have no row), the
others are shown. Values that do not decode are skipped, logged and counted (`invalid`).

    reports = HealthReports(etcd, None, on_change=redraw, on_invalid=warn)
    nursery.start_soon(reports.follow)          # list, then watch with resume
    build_matrix(reports.reports(), now=time.time())

`HealthReports.follow` lists the prefix, then watches it from the list's revision + 1:
the watch resumes by itself after etcd restarts, and when it cannot (compacted, or a
different etcd) the prefix is listed again. A value that does not decode is skipped
(its node has no report), counted once per key and revision, and handed to `on_invalid`
as one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import trio

from meshhealth import defaults
from meshhealth.documents.matrix import Matrix, NodeRef, build_matrix
from meshhealth.kvstore import KV, Etcd, EtcdError, EventKind, WatchEvent
from meshhealth.kvstore.follow import follow_prefix
from meshhealth.model import HealthReport
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
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


async def read_reports(
    etcd: Etcd, cluster: str | None, *, timeout_s: float
) -> tuple[list[HealthReport], list[str]]:
    """The health reports under `cluster`'s prefix (all clusters: None), and one line
    per value skipped because it did not decode. EtcdError when etcd fails."""
    found, invalid, _ = await list_reports(etcd, cluster, timeout_s=timeout_s)
    return list(found.values()), [str(value) for value in invalid]


async def read_matrix(
    sources: Sequence[MatrixSource],
    *,
    now: float,
    extra_nodes: Iterable[NodeRef] = (),
    timeout_s: float = defaults.MATRIX_READ_TIMEOUT_S,
) -> tuple[Matrix, int]:
    """The matrix of every source's reports, and the number of values skipped."""
    results: dict[int, tuple[list[HealthReport], list[str]] | str] = {}

    async def read_one(index: int, source: MatrixSource) -> None:
        try:
            results[index] = await read_reports(source.etcd, source.cluster, timeout_s=timeout_s)
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
    for index, source in enumerate(sources):
        result = results[index]
        name = source.cluster or source.etcd.description
        if isinstance(result, str):
            unavailable[name] = result
            continue
        found, bad = result
        for line in bad:
            log.warning("skipping invalid health entry %s", line)
        skipped += len(bad)
        reports += found
        if source.cluster is not None:
            read.append(source.cluster)
    matrix = build_matrix(
        reports, now=now, extra_nodes=extra_nodes, source_clusters=read, unavailable=unavailable
    )
    return matrix, skipped


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
