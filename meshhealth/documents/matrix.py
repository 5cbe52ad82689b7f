"""The cluster-wide N x N matrix from the nodes' health reports (pure, no I/O).

    matrix = build_matrix(reports, now=time.time(), extra_nodes=[("lab1", "node4")])
    doc = matrix_document(matrix)          # documents/matrix_json.py: `-o json`

One row per source node, one column per target node (grouped by cluster), one cell per
pair: reachable, unreachable, stale (the source's report is older than
`stale_after_s`), unassigned (not the source's target in its epoch's probe plan) or
unknown. The summary lines count coverage per target and point at a failing column
(the target) or row (the source), the first step of telling whose fault it is
(docs/clustermesh.md and docs/diagnosis.md describe them).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

from meshhealth import defaults
from meshhealth.documents.coverage import coverage, observer_counts
from meshhealth.documents.maintenance import maintenance_document, note_text
from meshhealth.documents.reachability import statuses_reachability
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathHealth,
    PlanInfo,
    ProbeStatus,
    Reachability,
    TargetHealth,
    TargetType,
    TraceStop,
    path_name,
)
from meshhealth.naming import node_order
from meshhealth.timefmt import format_interval
from meshhealth.wire.maintenance import MaintenanceWindow, active_windows

SCHEMA_VERSION = 1

R = Reachability
# A cell's state: a path's states and two more (meshhealth.model.Reachability).
CELL_STATES: tuple[Reachability, ...] = (
    R.REACHABLE,
    R.SUSPECT,
    R.UNREACHABLE,
    R.STALE,
    R.UNASSIGNED,
    R.UNKNOWN,
)
# States that say nothing about the path: nobody probed it (yet), or nobody was asked to.
NOT_OBSERVED: frozenset[Reachability] = frozenset({R.UNASSIGNED, R.UNKNOWN})
# The order of the paths inside a cell: host ICMP, host HTTP, endpoint ICMP, endpoint HTTP.
# (node/icmp-df, the MTU probe, is kept in a cell's paths, for diagnosis, but is neither
# drawn nor part of the cell's state: a lost big probe is not "unreachable".)
PATH_ORDER: tuple[str, ...] = tuple(
    path_name(t, p) for t in (TargetType.NODE, TargetType.ENDPOINT) for p in REACHABILITY_PROTOCOLS
)
_REACHABILITY_PATHS = frozenset(PATH_ORDER)

NodeRef = tuple[str, str]  # (cluster, node)
# What a report says of a target it does not list: no paths, no family.
_NOT_REPORTED = TargetHealth("", "", {})


def label(ref: NodeRef) -> str:
    return f"{ref[0]}/{ref[1]}"


@dataclass(frozen=True, slots=True)
class Cell:
    target: NodeRef
    state: Reachability
    paths: Mapping[str, PathHealth] = field(default_factory=dict)  # as reported
    # A dual-stack target's secondary addresses, same names; they count in `state`.
    secondary_paths: Mapping[str, PathHealth] = field(default_factory=dict)
    secondary_family: str | None = None  # ipv4, ipv6; None: not said
    trace: TraceStop | None = None  # where the source's trace to it stopped; None: none

    @property
    def rtt_s(self) -> float | None:
        """The RTT shown in the text: host ICMP's, else the first path that has one."""
        for name in PATH_ORDER:
            path = self.paths.get(name)
            if path is not None and path.status is ProbeStatus.OK and path.rtt_s is not None:
                return path.rtt_s
        return None


class RowCells(Sequence[Cell]):
    """A row's cells, one per column, kept sparse: the cells of the targets its report
    lists, and for every other column the row's default cell (unassigned, unknown or
    stale, without paths), shared with the other rows of that state. Under subset
    probing a row lists k + 1 of N targets: building and reading the matrix costs
    O(N k), not O(N^2), at 5,000 nodes (bench/verdict_scale.py)."""

    __slots__ = ("_defaults", "_listed", "default_state")

    def __init__(self, defaults: Sequence[Cell], listed: Mapping[int, Cell]) -> None:
        self._defaults = defaults  # one per column, all of one state
        self._listed = dict(sorted(listed.items()))  # column index -> cell, in column order
        self.default_state: Reachability | None = defaults[0].state if defaults else None

    @property
    def listed(self) -> tuple[Cell, ...]:
        """The cells of the targets the report lists, in column order."""
        return tuple(self._listed.values())

    def __len__(self) -> int:
        return len(self._defaults)

    @overload
    def __getitem__(self, index: int) -> Cell: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Cell, ...]: ...
    def __getitem__(self, index: int | slice) -> Cell | tuple[Cell, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        default = self._defaults[index]  # IndexError past the end
        return self._listed.get(index % len(self._defaults), default)

    def __iter__(self) -> Iterator[Cell]:
        listed = self._listed
        for i, default in enumerate(self._defaults):
            yield listed.get(i, default)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # like a Cell: it holds dicts

    def __repr__(self) -> str:
        return f"RowCells({list(self)!r})"


@dataclass(frozen=True, slots=True)
class Row:
    source: NodeRef
    probe_time: float | None  # None: the node has no report
    interval_s: float | None
    age_s: float | None
    stale: bool
    cells: Sequence[Cell]  # one per column, in column order (RowCells from build_matrix)
    plan: PlanInfo | None = None  # the probe plan of the report's round (None: none said)
    health_score: int = 0  # the source agent's local health score (0: well)
    degraded_since: float | None = None  # the source says it is degraded since then
    degraded_reasons: tuple[str, ...] = ()  # why, as codes (empty: not said)

    @property
    def listed_cells(self) -> Sequence[Cell]:
        """The cells that can say anything: every cell with paths, or in a state other
        than the row's default (those of the targets its report lists); all the cells
        of a row that is not kept sparse."""
        cells = self.cells
        return cells.listed if isinstance(cells, RowCells) else cells


@dataclass(frozen=True, slots=True)
class Matrix:
    generated_at: float
    columns: tuple[NodeRef, ...]
    rows: tuple[Row, ...]
    unavailable: Mapping[str, str]  # cluster -> why its reports could not be read
    lines: tuple[str, ...]  # the summary lines
    observers: tuple[int, ...] = ()  # per column: fresh reports that include that node
    # The lines of `lines` that are information, not a warning (the `Coverage:` line
    # while every node has the plan's k observers); the others call for a look.
    notes: tuple[str, ...] = ()
    # "cluster/node" -> its planned maintenance window, of the windows on at generated_at
    maintenance: Mapping[str, MaintenanceWindow] = field(default_factory=dict)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The summary lines that call for a look (`lines` but the notes)."""
        return tuple(line for line in self.lines if line not in self.notes)

    def unexpected_failures(self) -> int:
        """Unreachable or stale cells neither of whose nodes is in planned maintenance
        (what `matrix --fail-on-unreachable` fails on)."""
        away = set(self.maintenance)
        failing = (Reachability.UNREACHABLE, Reachability.STALE)
        total = 0
        for row in self.rows:
            if f"{row.source[0]}/{row.source[1]}" in away:
                continue
            total += sum(
                1
                for cell in row.cells
                if cell.state in failing and f"{cell.target[0]}/{cell.target[1]}" not in away
            )
        return total

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(CELL_STATES, 0)
        for row in self.rows:
            listed = row.listed_cells
            for cell in listed:
                counts[cell.state] += 1
            if isinstance(row.cells, RowCells) and row.cells.default_state is not None:
                counts[row.cells.default_state] += len(row.cells) - len(listed)
        return counts


def cell_state(
    paths: Mapping[str, PathHealth], secondary_paths: Mapping[str, PathHealth] | None = None
) -> Reachability:
    """reachable / suspect / unreachable / unknown from a target's reported paths (their
    status and the source's verdict), both address families of a dual-stack target
    together (meshhealth.documents.reachability)."""
    every = [(p.status, p.state) for name, p in paths.items() if name in _REACHABILITY_PATHS]
    if secondary_paths:
        every += [
            (p.status, p.state)
            for name, p in secondary_paths.items()
            if name in _REACHABILITY_PATHS
        ]
    return _reachability(tuple(every))


@functools.lru_cache(maxsize=4096)  # few distinct (status, verdict) lists: cells repeat them
def _reachability(paths: tuple[tuple[ProbeStatus, str | None], ...]) -> Reachability:
    return statuses_reachability((s for s, _ in paths), [v for _, v in paths])


def stale_after_s(interval_s: float) -> float:
    """The one staleness rule (matrix, `watch`, diagnosis): a report from a source with
    this probe interval is stale once older than this. A live publisher rewrites its
    entry on the first round at least `PUBLISH_REFRESH_S` after the last write (every
    round, when the interval is longer), which starts up to an interval (and the loop's
    lag) past it and is written when it ends, so the margin of three intervals and
    `STALE_MARGIN_S` is never reached by a live node (tests/agent/test_publisher.py replays
    the worst case)."""
    refresh_s = max(defaults.PUBLISH_REFRESH_S, interval_s)
    return refresh_s + defaults.STALE_MARGIN_INTERVALS * interval_s + defaults.STALE_MARGIN_S


def is_stale(report: HealthReport, now: float) -> bool:
    return now - report.probe_time > stale_after_s(report.interval_s)


def build_matrix(
    reports: Iterable[HealthReport],
    *,
    now: float,
    extra_nodes: Iterable[NodeRef] = (),
    source_clusters: Iterable[str] = (),
    unavailable: Mapping[str, str] | None = None,
    maintenance: Iterable[MaintenanceWindow] = (),
) -> Matrix:
    """The matrix of `reports` as seen at unix time `now`.

    `extra_nodes`: nodes known otherwise (the probe set) that get a column even without
    being reported on. Rows: every reporting node, and every other node of a cluster
    whose reports were read (`source_clusters`, plus the clusters of `reports`): such a
    node has no report, its row is all unknown. `unavailable`: clusters whose reports
    could not be read (cluster -> error). `maintenance`: planned maintenance windows;
    those on at `now` are kept, each said in a note line.
    """
    by_source: dict[NodeRef, HealthReport] = {}
    for report in reports:
        ref = (report.cluster, report.node)
        if ref not in by_source or report.probe_time > by_source[ref].probe_time:
            by_source[ref] = report
    nodes: set[NodeRef] = set(by_source) | set(extra_nodes)
    for report in by_source.values():
        nodes.update((t.cluster, t.node) for t in report.targets)
    columns = tuple(sorted(nodes, key=node_order))
    read = set(source_clusters) | {cluster for cluster, _ in by_source}
    defaults = _DefaultCells(columns)
    rows = tuple(_row(ref, by_source.get(ref), defaults, now) for ref in columns if ref[0] in read)
    fresh = [by_source[row.source] for row in rows if row.source in by_source and not row.stale]
    observers = observer_counts(fresh, columns)
    covered = coverage([r.plan for r in fresh if r.plan is not None], columns, observers)
    on = active_windows(maintenance, now)
    in_maintenance = tuple(note_text(maintenance_document(w, now)) for w in on.values())
    return Matrix(
        generated_at=now,
        columns=columns,
        rows=rows,
        unavailable=dict(unavailable or {}),
        lines=(*summary_lines(rows, columns), *covered.lines, *in_maintenance),
        observers=tuple(observers),
        notes=(*covered.notes, *in_maintenance),
        maintenance=on,
    )


class _DefaultCells:
    """The cells of the columns a report does not list, one tuple per state, built
    once per matrix and shared by the rows (a cell without paths)."""

    def __init__(self, columns: Sequence[NodeRef]) -> None:
        self.columns = columns
        self.index = {ref: i for i, ref in enumerate(columns)}
        self._by_state: dict[Reachability, tuple[Cell, ...]] = {}
        # A target the report does not list, in a full mesh: the rule on no paths.
        self.not_reported = cell_state(_NOT_REPORTED.paths, _NOT_REPORTED.secondary_paths)

    def of(self, state: Reachability) -> tuple[Cell, ...]:
        cells = self._by_state.get(state)
        if cells is None:
            cells = self._by_state[state] = tuple(Cell(t, state) for t in self.columns)
        return cells


def _row(
    source: NodeRef,
    report: HealthReport | None,
    defaults: _DefaultCells,
    now: float,
) -> Row:
    if report is None:
        return Row(source, None, None, None, False, RowCells(defaults.of(R.UNKNOWN), {}))
    stale = is_stale(report, now)
    seen = {(t.cluster, t.node): t for t in report.targets}
    subset = report.plan is not None and report.plan.subset
    default: Reachability
    if stale:
        default = R.STALE
    elif subset:
        default = R.UNASSIGNED  # not one of the source's targets in its epoch
    else:
        default = defaults.not_reported
    listed = {}
    for target, reported in seen.items():
        state = R.STALE if stale else cell_state(reported.paths, reported.secondary_paths)
        listed[defaults.index[target]] = Cell(
            target,
            state,
            dict(reported.paths),
            dict(reported.secondary_paths),
            reported.secondary_family,
            reported.trace,
        )
    age = max(0.0, now - report.probe_time)
    return Row(
        source,
        report.probe_time,
        report.interval_s,
        age,
        stale,
        RowCells(defaults.of(default), listed),
        report.plan,
        health_score=report.health_score,
        degraded_since=report.degraded_since,
        degraded_reasons=report.degraded_reasons,
    )


def summary_lines(rows: Sequence[Row], columns: Sequence[NodeRef]) -> list[str]:
    """Whose fault it is, as far as fresh reports tell."""
    fresh = [row for row in rows if row.probe_time is not None and not row.stale]
    reaches_none: list[NodeRef] = []
    for row in fresh:
        others = [
            c for c in row.listed_cells if c.target != row.source and c.state not in NOT_OBSERVED
        ]
        if len(others) >= 2 and all(c.state == "unreachable" for c in others):
            reaches_none.append(row.source)
    if len(reaches_none) * 2 > len(fresh):
        # Most nodes reach nobody: blaming each of them would point the wrong way.
        lines = [
            f"{len(reaches_none)} of {len(fresh)} nodes reach no other node: a cluster-wide "
            "problem (fabric, routes, firewall policy), not one node's"
        ]
    else:
        unreachable_by_all = _unreachable_by_all(fresh, columns, reaches_none)
        if len(unreachable_by_all) * 2 > len(columns):
            lines = [
                f"{len(unreachable_by_all)} of {len(columns)} nodes are unreachable from every "
                "other node: a cluster-wide problem (fabric, routes, firewall policy)"
            ]
        else:
            lines = [
                f"{label(ref)} is unreachable from every other node: look at {label(ref)} "
                "or its link"
                for ref in unreachable_by_all
            ]
        lines += [
            f"{label(ref)} reaches no one: look at {label(ref)}'s own network"
            for ref in reaches_none
        ]
    for row in rows:
        if row.stale and row.age_s is not None and row.interval_s is not None:
            age = format_interval(row.age_s)
            bound = format_interval(stale_after_s(row.interval_s))
            lines.append(
                f"{label(row.source)}'s report is stale ({age} old, older than {bound}): "
                "its agent is down, hung or cannot write to etcd"
            )
    return lines


def _unreachable_by_all(
    fresh: Sequence[Row], columns: Sequence[NodeRef], reaches_none: Sequence[NodeRef]
) -> list[NodeRef]:
    """Targets every fresh source (but themselves and those who reach no one) fails to
    reach; at least two such witnesses are needed."""
    excluded = set(reaches_none)
    witnesses: Counter[NodeRef] = Counter()  # target -> fresh sources that observed it
    failed: Counter[NodeRef] = Counter()  # ... of which found it unreachable
    for row in fresh:
        if row.source in excluded:
            continue
        for cell in row.listed_cells:
            if cell.target != row.source and cell.state not in NOT_OBSERVED:
                witnesses[cell.target] += 1
                failed[cell.target] += cell.state == "unreachable"
    return [t for t in columns if witnesses[t] >= 2 and failed[t] == witnesses[t]]
