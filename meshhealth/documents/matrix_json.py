"""The matrix as JSON: `GET /v1/matrix` and `meshhealth matrix -o json` (pure).

    doc = matrix_document(build_matrix(reports, now=time.time()))

The typed documents of the public API (docs/clustermesh.md, "Matrix JSON") and the one
function that fills them from a documents.matrix.Matrix; plain types only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from meshhealth.documents.matrix import (
    PATH_ORDER,
    SCHEMA_VERSION,
    Cell,
    Matrix,
    Row,
    stale_after_s,
)
from meshhealth.documents.plan import PlanDocument, plan_document
from meshhealth.model import PathHealth, Reachability
from meshhealth.timefmt import iso_time


class MatrixPathDocument(TypedDict):
    status: str  # a ProbeStatus value
    rtt_s: float | None
    loss: float
    state: NotRequired[str]  # the source's verdict on a failing path: suspect, unreachable
    state_since: NotRequired[str]  # since when (RFC 3339)


class MatrixCellDocument(TypedDict):
    cluster: str  # the target
    name: str
    state: Reachability
    paths: dict[str, MatrixPathDocument]  # PATH_ORDER names; a path not reported is absent
    # the other paths the source reported (node/icmp-df, node/udp, node/tcp:PORT), which
    # are not part of `state`; absent when none
    extra_paths: NotRequired[dict[str, MatrixPathDocument]]
    secondary_paths: NotRequired[dict[str, MatrixPathDocument]]  # dual-stack targets only
    secondary_family: NotRequired[str]  # ipv4 or ipv6, when the source said


class MatrixRowDocument(TypedDict):
    cluster: str  # the source
    name: str
    probe_time: str | None  # None: the node has no report
    interval_s: float | None
    age_s: float | None
    stale_after_s: float | None  # stale_after_s(interval_s); None without a report
    stale: bool
    plan: PlanDocument | None  # None: no report, or a report without a plan
    cells: list[MatrixCellDocument]  # one per entry of `nodes`, in that order
    health_score: NotRequired[int]  # only when the source is not well (> 0)
    degraded_since: NotRequired[str]  # only while the source says it is degraded
    degraded_reasons: NotRequired[list[str]]  # why, as codes (only when the source says)


class MatrixNodeDocument(TypedDict):
    cluster: str
    name: str
    observers: int  # fresh reports, other than the node's own, that include it


class UnavailableClusterDocument(TypedDict):
    cluster: str
    error: str


class MatrixSummaryDocument(TypedDict):
    sources: int
    stale_sources: int
    cells: int
    reachable: int
    unreachable: int
    suspect: int  # neither reachable nor unreachable yet
    stale: int
    unassigned: int
    unknown: int
    lines: list[str]  # every summary line, in the text's order
    notes: list[str]  # those of `lines` that are information, not a warning


class MatrixDocument(TypedDict):
    """`GET /v1/matrix`, `meshhealth matrix -o json` (docs/clustermesh.md)."""

    v: int
    generated_at: str | None
    nodes: list[MatrixNodeDocument]  # the columns
    unavailable_clusters: list[UnavailableClusterDocument]
    rows: list[MatrixRowDocument]
    summary: MatrixSummaryDocument


def _path_json(path: PathHealth) -> MatrixPathDocument:
    doc: MatrixPathDocument = {"status": path.status.value, "rtt_s": path.rtt_s, "loss": path.loss}
    if path.state is not None:
        doc["state"] = path.state
    since = iso_time(path.state_since)
    if since is not None:
        doc["state_since"] = since
    return doc


def _row_json(row: Row) -> MatrixRowDocument:
    doc: MatrixRowDocument = {
        "cluster": row.source[0],
        "name": row.source[1],
        "probe_time": iso_time(row.probe_time),
        "interval_s": row.interval_s,
        "age_s": None if row.age_s is None else round(row.age_s, 3),
        "stale_after_s": None if row.interval_s is None else stale_after_s(row.interval_s),
        "stale": row.stale,
        "plan": plan_document(row.plan),
        "cells": [_cell_json(cell) for cell in row.cells],
    }
    if row.health_score:
        doc["health_score"] = row.health_score
    degraded_since = iso_time(row.degraded_since)
    if degraded_since is not None:
        doc["degraded_since"] = degraded_since
    if row.degraded_reasons:
        doc["degraded_reasons"] = list(row.degraded_reasons)
    return doc


_CORE = frozenset(PATH_ORDER)


def _paths_json(paths: Mapping[str, PathHealth]) -> dict[str, MatrixPathDocument]:
    return {name: _path_json(paths[name]) for name in PATH_ORDER if name in paths}


def _cell_json(cell: Cell) -> MatrixCellDocument:
    doc: MatrixCellDocument = {
        "cluster": cell.target[0],
        "name": cell.target[1],
        "state": cell.state,
        "paths": _paths_json(cell.paths),
    }
    extra = sorted(name for name in cell.paths if name not in _CORE)
    if extra:
        doc["extra_paths"] = {name: _path_json(cell.paths[name]) for name in extra}
    if cell.secondary_paths:
        doc["secondary_paths"] = _paths_json(cell.secondary_paths)
    if cell.secondary_family is not None:
        doc["secondary_family"] = cell.secondary_family
    return doc


def matrix_document(matrix: Matrix) -> MatrixDocument:
    """The JSON document (docs/clustermesh.md, "Matrix JSON"); plain types only."""
    counts = matrix.counts()
    return {
        "v": SCHEMA_VERSION,
        "generated_at": iso_time(matrix.generated_at),
        "nodes": [
            {"cluster": c, "name": n, "observers": observers}
            for (c, n), observers in zip(
                matrix.columns, matrix.observers or [0] * len(matrix.columns), strict=True
            )
        ],
        "unavailable_clusters": [
            {"cluster": name, "error": error} for name, error in sorted(matrix.unavailable.items())
        ],
        "rows": [_row_json(row) for row in matrix.rows],
        "summary": {
            "sources": sum(1 for row in matrix.rows if row.probe_time is not None),
            "stale_sources": sum(1 for row in matrix.rows if row.stale),
            "cells": sum(counts.values()),
            "reachable": counts["reachable"],
            "unreachable": counts["unreachable"],
            "suspect": counts["suspect"],
            "stale": counts["stale"],
            "unassigned": counts["unassigned"],
            "unknown": counts["unknown"],
            "lines": list(matrix.lines),
            "notes": list(matrix.notes),
        },
    }
