"""`meshhealth watch --etcd`: the view from every node's published health report.

The reports are listed once, then followed with a prefix watch that resumes after etcd
restarts (meshhealth.matrix_source.HealthReports): etcd sends what changes, nothing is
polled. The list view aggregates what every source sees of each node; the header's
`Cluster health` is each cluster's verdict and findings by the aggregator's own rule
(diagnosis/cluster_summary.py); the matrix view is the matrix of
meshhealth.documents.matrix. Both are rebuilt from the reports held in
memory every `rebuild_s` as well, so a report that stops being refreshed turns stale
on screen. A value that does not decode is skipped, counted in the header and reported
once (a line in the plain output; one line on stderr with `--once`). Only registered
nodes' reports are shown (the ip and node entries, followed too, name the node:
meshhealth.matrix_source.registered_reports, the aggregator's rule); the others are
ignored and said in one line (`ignored N health reports from unregistered nodes: ...`)
each time that set changes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import trio

from meshhealth import defaults
from meshhealth.cli.watch_cmd import Event, Notify, WatchError
from meshhealth.cli.watch_state import WatchState, apply_health_reports
from meshhealth.diagnosis.cluster_summary import summaries_of, summary_finding
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.cluster_health import (
    SOURCE_REPORTS,
    finding_document,
    summary_verdict_document,
)
from meshhealth.documents.matrix import build_matrix
from meshhealth.documents.matrix_json import matrix_document
from meshhealth.kvstore import KV, Etcd, EtcdError, EventKind, WatchEvent, open_etcd
from meshhealth.kvstore.endpoints import parse_endpoints
from meshhealth.kvstore.etcd_config import EtcdAccess
from meshhealth.kvstore.follow import follow_prefix
from meshhealth.matrix_source import (
    HealthReports,
    InvalidValue,
    MaintenanceWindows,
    RegisteredNodes,
    ignored_line,
    list_registrations,
    list_reports,
    read_windows,
    registered_nodes,
    registered_reports,
)
from meshhealth.model import HealthReport
from meshhealth.wire import keys
from meshhealth.wire.event import FindingEvent
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.maintenance import MaintenanceWindow
from meshhealth.wire.values import decode_event_value


def show_reports(
    state: WatchState,
    reports: list[HealthReport],
    notify: Notify,
    maintenance: Sequence[MaintenanceWindow] = (),
) -> None:
    """The list and matrix views, and each cluster's verdict and findings by the
    aggregator's rule, from every node's report and the planned maintenance windows."""
    now = time.time()
    matrix = build_matrix(reports, now=now, maintenance=maintenance)
    findings = diagnose(matrix_view(matrix))
    summaries = summaries_of(matrix, findings)
    state.cluster_health = [
        summary_verdict_document(summary, now, source=SOURCE_REPORTS)
        for _, summary in sorted(summaries.items())
    ]
    state.findings = [finding_document(summary_finding(f, matrix.maintenance)) for f in findings]
    notify(apply_health_reports(state, reports, now=now, matrix=matrix_document(matrix)))


def _event(key: str, value: bytes) -> FindingEvent | None:
    try:
        return decode_event_value(key, value)
    except DecodeError:  # `meshhealth events` names it; the view leaves it out
        return None


def list_events(state: WatchState, kvs: Sequence[KV]) -> None:
    """Hold the findings timeline of every cluster (the view shows its last events)."""
    found = ((kv.key, _event(kv.key, kv.value)) for kv in kvs)
    state.events = {key: event for key, event in found if event is not None}


def apply_events(state: WatchState, changes: Sequence[WatchEvent]) -> None:
    for change in changes:
        event = _event(change.key, change.value) if change.kind is EventKind.PUT else None
        if event is None:
            state.events.pop(change.key, None)
        else:
            state.events[change.key] = event


def _connected(state: WatchState, etcd: Etcd, event: Event) -> None:
    if state.connection != "connected":
        event(f"reading {etcd.description}")
    state.connection, state.connection_detail = "connected", ""
    state.etcd_up, state.etcd_error = True, None


def _disconnected(state: WatchState, why: str, event: Event) -> None:
    if state.connection != "disconnected":
        event(f"etcd unavailable: {why}; retrying")
    state.connection, state.connection_detail = "disconnected", why
    state.etcd_up, state.etcd_error = False, why


async def read_once(state: WatchState, urls: str | EtcdAccess, notify: Notify, warn: Event) -> None:
    """One listing (`--once`); WatchError when etcd cannot be read."""
    async with open_etcd(urls, liveness=False) as etcd:
        try:
            found, invalid, _ = await list_reports(
                etcd, None, timeout_s=defaults.MATRIX_READ_TIMEOUT_S
            )
            registrations = await list_registrations(
                etcd, None, timeout_s=defaults.MATRIX_READ_TIMEOUT_S
            )
            windows = await read_windows(etcd, None, timeout_s=defaults.MATRIX_READ_TIMEOUT_S)
        except EtcdError as exc:
            raise WatchError(str(exc)) from None
        except trio.TooSlowError:
            raise WatchError(f"etcd {etcd.description}: no answer in time") from None
        for value in invalid:
            warn(f"skipped invalid health entry {value}")
        try:
            kvs, _ = await etcd.get_prefix(keys.events_prefix())
        except EtcdError as exc:
            warn(f"the findings timeline was not read: {exc}")
        else:
            list_events(state, kvs)
        state.invalid_values = len(invalid)
        registered = registered_nodes(registrations)
        reports, ignored = registered_reports(found.values(), registered)
        if ignored:
            warn(ignored_line(ignored))
        _connected(state, etcd, lambda text: None)
        show_reports(state, reports, notify, windows)


async def run_etcd(
    state: WatchState,
    urls: str | EtcdAccess,
    notify: Notify,
    event: Event,
    *,
    once: bool,
    rebuild_s: float,
) -> None:
    """Follow every node's health report until cancelled (`once`: read them once)."""
    try:
        if isinstance(urls, str):
            parse_endpoints(urls)
    except ValueError as exc:
        raise WatchError(f"--etcd: {exc}") from None
    if once:
        await read_once(state, urls, notify, event)
        return
    async with open_etcd(urls) as etcd:

        def on_invalid(value: InvalidValue) -> None:
            state.invalid_values = reports.invalid_values
            event(f"skipping invalid health entry {value}")

        said: set[tuple[str, str]] = set()

        def on_change() -> None:
            if not (reports.listed.is_set() and registered.listed.is_set()):
                return
            _connected(state, etcd, event)
            kept, ignored = registered_reports(reports.reports(), registered.nodes)
            now_ignored = {(r.cluster, r.node) for r in ignored}
            if now_ignored - said:
                event(ignored_line(ignored))
            said.clear()
            said.update(now_ignored)
            show_reports(state, kept, notify, windows.windows())

        def on_unavailable(why: str) -> None:
            _disconnected(state, why, event)
            notify([])

        reports = HealthReports(
            etcd, on_change=on_change, on_invalid=on_invalid, on_unavailable=on_unavailable
        )

        registered = RegisteredNodes(etcd, on_change=on_change)
        windows = MaintenanceWindows(etcd, on_change=on_change)

        def on_events_listed(kvs: Sequence[KV]) -> None:
            list_events(state, kvs)
            notify([])

        def on_event_changes(changes: Sequence[WatchEvent]) -> None:
            apply_events(state, changes)
            notify([])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reports.follow)
            nursery.start_soon(registered.follow)
            nursery.start_soon(windows.follow)
            nursery.start_soon(
                functools.partial(
                    follow_prefix,
                    etcd,
                    keys.events_prefix(),
                    what="watch: the findings timeline",
                    on_list=on_events_listed,
                    on_events=on_event_changes,
                )
            )
            await reports.listed.wait()
            await registered.listed.wait()
            while True:
                # etcd's health (the watch resumes by itself once etcd is back), and the
                # age of the reports, shown every `rebuild_s`.
                with trio.move_on_after(rebuild_s):
                    await etcd.health.wait_changed()
                if etcd.health.up:
                    on_change()
                elif etcd.health.changes:
                    on_unavailable(etcd.health.last_error)
