"""The matrix document as diagnosis reads it: `Matrix` -> `MatrixView` (pure).

    view = matrix_view(build_matrix(reports, now=now))
    findings = diagnose(view)

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

from collections.abc import Mapping

from meshhealth.diagnosis.cells import (
    MatrixCell,
    MatrixView,
    NodeId,
    Observer,
    PathKind,
    PathObservation,
)
from meshhealth.documents.matrix import Matrix, Row
from meshhealth.model import PathHealth, ProbeStatus, Reachability

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
