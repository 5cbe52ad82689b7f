"""The matrix document as diagnosis reads it: `Matrix` -> `MatrixView` (pure).

    view = matrix_view(build_matrix(reports, now=now))
    findings = diagnose(view)

- each row with a report is an `Observer` (reports carry no local health yet, so none
  is degraded);
- each reported path of a cell becomes a `PathObservation`: `ok` for an OK status,
  `unreachable` for any failure status (timeout, refused, no route, HTTP error, ...),
  and a path not probed yet (`unknown`) is left out (unassigned), as the matrix's own
  reachability rule does;
- a stale row's paths are all `stale`: its agent is not publishing, so its old results
  are not evidence either way;
- a row without a report (a node known but silent), a target a row does not report on
  and an `unassigned` cell (subset probing: not the row's target this epoch) give no
  cell: the node is still known to diagnosis (`nodes`).

Reports carry no transition times: `since` is the time of the report (`probe_time`)
the observation comes from, i.e. "seen so as of then".
"""

from __future__ import annotations

from collections.abc import Mapping

from meshhealth.diagnosis.cells import (
    MatrixCell,
    MatrixView,
    NodeId,
    Observer,
    PathKind,
    PathObservation,
    PathState,
)
from meshhealth.documents.matrix import Matrix, Row
from meshhealth.model import PathHealth, ProbeStatus

# The report's path names (documents.matrix.PATH_ORDER) as diagnosis's path kinds.
PATH_KINDS: Mapping[str, PathKind] = {
    "node/icmp": PathKind.NODE_ICMP,
    "node/http": PathKind.NODE_HTTP,
    "endpoint/icmp": PathKind.ENDPOINT_ICMP,
    "endpoint/http": PathKind.ENDPOINT_HTTP,
    "node/icmp-df": PathKind.NODE_ICMP_DF,
}


def path_state(status: ProbeStatus, *, stale: bool) -> PathState | None:
    """The diagnosis state of one reported path; None when it is not evidence of
    anything (not probed yet)."""
    if status is ProbeStatus.UNKNOWN:
        return None
    if stale:
        return PathState.STALE
    return PathState.OK if status is ProbeStatus.OK else PathState.UNREACHABLE


def _observations(
    paths: Mapping[str, PathHealth], *, stale: bool, since: float
) -> dict[PathKind, PathObservation]:
    out = {}
    for name, health in paths.items():
        kind = PATH_KINDS.get(name)
        state = path_state(health.status, stale=stale)
        if kind is not None and state is not None:
            out[kind] = PathObservation(state, since)
    return out


def _cells(row: Row) -> list[MatrixCell]:
    if row.probe_time is None:
        return []
    observer = NodeId(*row.source)
    cells = []
    for cell in row.cells:
        paths = _observations(cell.paths, stale=row.stale, since=row.probe_time)
        if paths:
            cells.append(MatrixCell(observer, NodeId(*cell.target), paths))
    return cells


def matrix_view(matrix: Matrix) -> MatrixView:
    """What diagnosis looks at in `matrix`."""
    return MatrixView.of(
        cells=[cell for row in matrix.rows for cell in _cells(row)],
        observers=[
            Observer(NodeId(*row.source)) for row in matrix.rows if row.probe_time is not None
        ],
        nodes=[NodeId(*ref) for ref in matrix.columns],
    )
