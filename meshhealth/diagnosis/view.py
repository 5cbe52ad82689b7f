"""The matrix as diagnosis reads it: one `MatrixView`, built from the matrix document
(pure).

    view = matrix_view(build_matrix(reports, now=now))
    findings = diagnose(view)

A `MatrixView` holds the cells and observers of the matrix (cells.py) and, indexed once
when it is built, what the rules look up: every node, the rows with a fresh path, the
degraded observers and why, the stale rows and since when, the silent nodes, and each
layer's verdicts per pair (layers.py). `matrix_view` builds it from the document;
`MatrixView.of` from cells (the tests write matrices as cell patterns).

From the document:

- each row with a report is an `Observer`, degraded since the time its report says
  (`degraded_since`: the agent's own local health, docs/diagnosis.md);
- each reported path of a cell becomes a `PathObservation`: `ok` for an OK status; for
  a failure status (timeout, refused, no route, HTTP error, ...) the source agent's
  published verdict, `suspect` or `unreachable` (a report of an older agent, without
  verdicts: `unreachable`); a path not probed yet (`unknown`) is left out
  (unassigned), as the matrix's own reachability rule does;
- a stale row's paths are all `stale`: its agent is not publishing, so its old results
  are not evidence either way;
- a row without a report (a node known but silent), a target a row does not report on
  and an `unassigned` cell (subset probing: not the row's target this epoch) give no
  cell: the node is still known to diagnosis (`nodes`).

`since` is the time the path entered its state when the report says it (a failing
path's `state_since`), else the time of the report (`probe_time`) the observation comes
from, i.e. "seen so as of then".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from meshhealth.diagnosis.cells import (
    MatrixCell,
    NodeId,
    Observer,
    PathKind,
    PathObservation,
)
from meshhealth.diagnosis.layers import Layer, LayerEvidence, layer_evidence
from meshhealth.documents.matrix import Matrix, Row
from meshhealth.model import PathHealth, ProbeStatus, Reachability


@dataclass(frozen=True, slots=True)
class MatrixView:
    """Everything diagnosis looks at, indexed: built by `MatrixView.of` (`matrix_view`)."""

    nodes: tuple[NodeId, ...]  # every node: known, observing or observed (sorted)
    cells: tuple[MatrixCell, ...]  # as given, self-probes included
    observers: tuple[Observer, ...]  # the nodes with a report
    fresh_rows: frozenset[NodeId]  # observers with at least one fresh path
    degraded: Mapping[NodeId, float]  # observer -> degraded since
    degraded_reasons: Mapping[NodeId, tuple[str, ...]]  # degraded observer -> why (codes)
    stale_since: Mapping[NodeId, float]  # non-fresh reporting rows -> latest stale since
    silent: frozenset[NodeId]  # no fresh report: stale, or no report at all
    layers: Mapping[Layer, LayerEvidence]  # per layer, the pairs' verdicts (no self-probe)

    @staticmethod
    def of(
        cells: Iterable[MatrixCell],
        observers: Iterable[Observer] = (),
        nodes: Iterable[NodeId] = (),
    ) -> MatrixView:
        """The view of `cells` and `observers`, with `nodes` known that may appear in
        neither. Order does not matter; ValueError naming the first duplicate cell or
        observer."""
        listed, reports = tuple(cells), tuple(observers)
        _refuse_duplicates(listed, reports)
        probes = [c for c in listed if c.observer != c.target]  # self-probes prove nothing
        degraded = {o.node: o.degraded_since for o in reports if o.degraded_since is not None}
        reasons = {o.node: o.degraded_reasons for o in reports if o.node in degraded}
        fresh_rows = frozenset(c.observer for c in probes if c.fresh)
        stale_since: dict[NodeId, float] = {}
        for cell in probes:
            if cell.observer in fresh_rows:
                continue
            for seen in cell.paths.values():
                if seen.state is Reachability.STALE:
                    prev = stale_since.get(cell.observer, seen.since)
                    stale_since[cell.observer] = max(prev, seen.since)
        reporting = {o.node for o in reports} | {c.observer for c in listed}
        every = set(nodes) | reporting | {c.target for c in listed}
        silent = frozenset(n for n in every if n in stale_since or n not in reporting)
        return MatrixView(
            tuple(sorted(every)), listed, reports, fresh_rows, degraded, reasons,
            stale_since, silent, layer_evidence(probes, degraded),
        )  # fmt: skip


def _refuse_duplicates(cells: Iterable[MatrixCell], observers: Iterable[Observer]) -> None:
    """ValueError naming the first duplicate cell or observer."""
    seen: set[tuple[NodeId, NodeId]] = set()
    for cell in cells:
        pair = (cell.observer, cell.target)
        if pair in seen:
            raise ValueError(f"matrix: two cells for {cell.observer} -> {cell.target}")
        seen.add(pair)
    known: set[NodeId] = set()
    for observer in observers:
        if observer.node in known:
            raise ValueError(f"matrix: observer {observer.node} listed twice")
        known.add(observer.node)


# The report's path names (documents.matrix.PATH_ORDER) as diagnosis's path kinds.
PATH_KINDS: Mapping[str, PathKind] = {
    "node/icmp": PathKind.NODE_ICMP,
    "node/http": PathKind.NODE_HTTP,
    "endpoint/icmp": PathKind.ENDPOINT_ICMP,
    "endpoint/http": PathKind.ENDPOINT_HTTP,
    "node/icmp-df": PathKind.NODE_ICMP_DF,
    "node/udp": PathKind.NODE_UDP,
}
# `node/tcp:<port>`, one per port of the source's --probe-tcp-ports: read as one kind,
# NODE_TCP, in the state of the worst of them (a port that fails makes the kind fail).
TCP_PATH_PREFIX = "node/tcp:"
# How bad a state is, to pick the worst of several ports.
_BADNESS = {
    Reachability.REACHABLE: 0,
    Reachability.STALE: 1,
    Reachability.SUSPECT: 2,
    Reachability.UNREACHABLE: 3,
}


def path_state(
    status: ProbeStatus, *, stale: bool, verdict: str | None = None
) -> Reachability | None:
    """The diagnosis state of one reported path (its status and the source's verdict);
    None when it is not evidence of anything (not probed yet)."""
    if status is ProbeStatus.UNKNOWN:
        return None
    if stale:
        return Reachability.STALE
    if status is ProbeStatus.OK:
        return Reachability.REACHABLE
    return Reachability.SUSPECT if verdict == "suspect" else Reachability.UNREACHABLE


# (state, since) -> the one PathObservation of that value (they are immutable): most
# paths of a row read "ok since the report's time", so one object serves them all.
_Shared = dict[tuple[Reachability, float], PathObservation]


def _observations(
    paths: Mapping[str, PathHealth], *, stale: bool, since: float, shared: _Shared
) -> dict[PathKind, PathObservation]:
    out: dict[PathKind, PathObservation] = {}
    for name, health in paths.items():
        kind = PATH_KINDS.get(name)
        if kind is None:
            if not name.startswith(TCP_PATH_PREFIX):
                continue
            kind = PathKind.NODE_TCP
        state = path_state(health.status, stale=stale, verdict=health.state)
        worse = out.get(kind)  # another port of NODE_TCP already read
        if worse is not None and (state is None or _BADNESS[worse.state] >= _BADNESS[state]):
            continue
        if state is not None:
            entered = health.state_since if health.state_since is not None else since
            key = (state, since if stale else entered)
            seen = shared.get(key)
            if seen is None:
                seen = shared[key] = PathObservation(*key)
            out[kind] = seen
    return out


def _failing_ports(paths: Mapping[str, PathHealth]) -> tuple[int, ...]:
    """The ports of the `node/tcp:<port>` paths that are unreachable (not suspect)."""
    return tuple(
        sorted(
            int(name.removeprefix(TCP_PATH_PREFIX))
            for name, health in paths.items()
            if name.startswith(TCP_PATH_PREFIX)
            and path_state(health.status, stale=False, verdict=health.state)
            is Reachability.UNREACHABLE
        )
    )


def _cells(row: Row, shared: _Shared) -> list[MatrixCell]:
    if row.probe_time is None:
        return []
    observer = NodeId(*row.source)
    cells = []
    for cell in row.listed_cells:
        paths = _observations(cell.paths, stale=row.stale, since=row.probe_time, shared=shared)
        secondary = (
            _observations(
                cell.secondary_paths, stale=row.stale, since=row.probe_time, shared=shared
            )
            if cell.secondary_paths  # single-stack targets (most) have none
            else {}
        )
        if paths or secondary:
            ports = _failing_ports(cell.paths) if PathKind.NODE_TCP in paths else ()
            target = NodeId(*cell.target)
            cells.append(
                MatrixCell(
                    observer, target, paths, secondary, cell.secondary_family, ports, cell.trace
                )
            )
    return cells


def matrix_view(matrix: Matrix) -> MatrixView:
    """What diagnosis looks at in `matrix`."""
    shared: _Shared = {}
    return MatrixView.of(
        cells=[cell for row in matrix.rows for cell in _cells(row, shared)],
        observers=[
            Observer(
                NodeId(*row.source),
                degraded_since=row.degraded_since,
                degraded_reasons=row.degraded_reasons,
            )
            for row in matrix.rows
            if row.probe_time is not None
        ],
        nodes=[NodeId(*ref) for ref in matrix.columns],
    )
