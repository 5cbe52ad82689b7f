"""The cluster-wide N x N matrix from the nodes' health reports (pure, no I/O).

    matrix = build_matrix(reports, now=time.time(), extra_nodes=[("lab1", "node4")])
    doc = matrix_document(matrix)          # documents/matrix_json.py: `-o json`

One row per source node (a HealthReport), one column per target node (every node that
reports or is reported on, grouped by cluster), one cell per (source, target) with the
source's four paths to the target. A cell is:

- `reachable`: every probed path is OK;
- `unreachable`: at least one probed path fails (the rule of `Cluster health`);
- `stale`: the source's report is older than `stale_after_s` (its liveness refresh plus
  three of its intervals and a few seconds): its agent is not publishing (down, hung, or
  cut off from etcd), so it is not shown healthy;
- `unassigned`: the source probes a subset of the nodes (the probe plan, docs/scale.md)
  and was not assigned this target in its report's epoch: nobody asked it to look, so
  the cell says nothing about the path (neither failure nor stale);
- `unknown`: the source has not probed the target (yet), or has no report at all.

Coverage: with subset probing a target is seen by its `k` probers only, so the summary
counts, per target, the fresh reports that include it (its observers) and names the
targets with fewer than the plan's `k`. The `Coverage:` line is then a warning; while
every target has its `k` observers it is a note (`Matrix.notes`), information only.

Summary lines are the first step of telling whose fault it is. A whole column failing
points at the target: a node that fresh reports show unreachable from every other
source ("look at node3 or its link"). A whole row failing points at the source: a node
that reaches none of the others ("look at node2's own network"). And sources whose
reports are stale are named (their agent is down or cut off from etcd). Each needs at
least two other nodes to compare with; when most nodes are in the same state, one line
says the problem is cluster-wide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from meshhealth import defaults
from meshhealth.documents.coverage import coverage, observer_counts
from meshhealth.documents.reachability import statuses_reachability
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathHealth,
    PlanInfo,
    ProbeStatus,
    TargetHealth,
    TargetType,
    path_name,
)
from meshhealth.naming import node_order
from meshhealth.timefmt import format_interval

SCHEMA_VERSION = 1

CellState = Literal["reachable", "suspect", "unreachable", "stale", "unassigned", "unknown"]
CELL_STATES: tuple[CellState, ...] = (
    "reachable",
    "suspect",
    "unreachable",
    "stale",
    "unassigned",
    "unknown",
)
# States that say nothing about the path: nobody probed it (yet), or nobody was asked to.
NOT_OBSERVED: frozenset[CellState] = frozenset({"unassigned", "unknown"})
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
    state: CellState
    paths: Mapping[str, PathHealth] = field(default_factory=dict)  # as reported
    # A dual-stack target's secondary addresses, same names; they count in `state`.
    secondary_paths: Mapping[str, PathHealth] = field(default_factory=dict)
    secondary_family: str | None = None  # ipv4, ipv6; None: not said

    @property
    def rtt_s(self) -> float | None:
        """The RTT shown in the text: host ICMP's, else the first path that has one."""
        for name in PATH_ORDER:
            path = self.paths.get(name)
            if path is not None and path.status is ProbeStatus.OK and path.rtt_s is not None:
                return path.rtt_s
        return None


@dataclass(frozen=True, slots=True)
class Row:
    source: NodeRef
    probe_time: float | None  # None: the node has no report
    interval_s: float | None
    age_s: float | None
    stale: bool
    cells: tuple[Cell, ...]  # one per column, in column order
    plan: PlanInfo | None = None  # the probe plan of the report's round (None: none said)
    health_score: int = 0  # the source agent's local health score (0: well)
    degraded_since: float | None = None  # the source says it is degraded since then
    degraded_reasons: tuple[str, ...] = ()  # why, as codes (empty: not said)


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

    @property
    def warnings(self) -> tuple[str, ...]:
        """The summary lines that call for a look (`lines` but the notes)."""
        return tuple(line for line in self.lines if line not in self.notes)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(CELL_STATES, 0)
        for row in self.rows:
            for cell in row.cells:
                counts[cell.state] += 1
        return counts


def cell_state(
    paths: Mapping[str, PathHealth], secondary_paths: Mapping[str, PathHealth] | None = None
) -> CellState:
    """reachable / suspect / unreachable / unknown from a target's reported paths (their
    status and the source's verdict), both address families of a dual-stack target
    together (meshhealth.documents.reachability)."""
    every = [
        path
        for name, path in [*paths.items(), *(secondary_paths or {}).items()]
        if name in _REACHABILITY_PATHS
    ]
    return statuses_reachability((p.status for p in every), [p.state for p in every])


def stale_after_s(interval_s: float) -> float:
    """The one staleness rule (matrix, `watch`, diagnosis): a report from a source with
    this probe interval is stale once older than this. A live publisher rewrites its
    entry on the first round at least `PUBLISH_REFRESH_S` after the last write (every
    round, when the interval is longer), which starts up to an interval (and the loop's
    lag) past it and is written when it ends, so the margin of three intervals and
    `STALE_MARGIN_S` is never reached by a live node (tests/test_publisher.py replays
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
) -> Matrix:
    """The matrix of `reports` as seen at unix time `now`.

    `extra_nodes`: nodes known otherwise (the probe set) that get a column even without
    being reported on. Rows: every reporting node, and every other node of a cluster
    whose reports were read (`source_clusters`, plus the clusters of `reports`): such a
    node has no report, its row is all unknown. `unavailable`: clusters whose reports
    could not be read (cluster -> error).
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
    rows = tuple(_row(ref, by_source.get(ref), columns, now) for ref in columns if ref[0] in read)
    fresh = [by_source[row.source] for row in rows if row.source in by_source and not row.stale]
    observers = observer_counts(fresh, columns)
    covered = coverage([r.plan for r in fresh if r.plan is not None], columns, observers)
    return Matrix(
        generated_at=now,
        columns=columns,
        rows=rows,
        unavailable=dict(unavailable or {}),
        lines=(*summary_lines(rows, columns), *covered.lines),
        observers=tuple(observers),
        notes=covered.notes,
    )


def _row(
    source: NodeRef,
    report: HealthReport | None,
    columns: Sequence[NodeRef],
    now: float,
) -> Row:
    if report is None:
        unknown = tuple(Cell(target, "unknown") for target in columns)
        return Row(source, None, None, None, False, unknown)
    stale = is_stale(report, now)
    seen = {(t.cluster, t.node): t for t in report.targets}
    subset = report.plan is not None and report.plan.subset
    cells = []
    for target in columns:
        reported = seen.get(target, _NOT_REPORTED)
        state: CellState
        if stale:
            state = "stale"
        elif subset and target not in seen:
            state = "unassigned"  # not one of the source's targets in its epoch
        else:
            state = cell_state(reported.paths, reported.secondary_paths)
        cells.append(
            Cell(
                target,
                state,
                dict(reported.paths),
                dict(reported.secondary_paths),
                reported.secondary_family,
            )
        )
    age = max(0.0, now - report.probe_time)
    return Row(
        source,
        report.probe_time,
        report.interval_s,
        age,
        stale,
        tuple(cells),
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
        others = [c for c in row.cells if c.target != row.source and c.state not in NOT_OBSERVED]
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
    index = {ref: i for i, ref in enumerate(columns)}
    found = []
    for target in columns:
        seen = [
            row.cells[index[target]]
            for row in fresh
            if row.source != target and row.source not in reaches_none
        ]
        seen = [c for c in seen if c.state not in NOT_OBSERVED]
        if len(seen) >= 2 and all(c.state == "unreachable" for c in seen):
            found.append(target)
    return found
