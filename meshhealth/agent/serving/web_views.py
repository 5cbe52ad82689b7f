"""The JSON the web page reads (pure, no I/O): a compact matrix and one cell's detail.

    compact_matrix_document(matrix, nodes)           # GET /v1/web/matrix
    cell_document(matrix, source, target, local=..., status=..., history=..., now=...)
                                                     # GET /v1/web/cell?source=&target=

The matrix document of `meshhealth matrix -o json` carries four paths per cell: at
1,000 nodes that is a million cells and well over 100 MB of JSON. The page needs one
state per cell to draw, so each row is a string with one character per column
(`STATE_CODES`); a click asks for that one cell's paths. Each column carries the
node's NodeIP when the agent knows the node (`nodes`: every node it follows, not only
the ones it probes), so the page's node list shows every node's NodeIP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from meshhealth.agent.path_history import MinuteSummary
from meshhealth.documents.matrix import PATH_ORDER, Matrix, NodeRef, label
from meshhealth.model import Target
from meshhealth.timefmt import iso_time

WEB_VERSION = 1
# One character per cell state. A state this version does not know is drawn as "X".
STATE_CODES: Mapping[str, str] = {
    "reachable": "R",
    "unreachable": "U",
    "suspect": "P",
    "stale": "S",
    "unassigned": "N",
    "unknown": "?",
}
OTHER_CODE = "X"


def state_code(state: str) -> str:
    return STATE_CODES.get(state, OTHER_CODE)


def parse_node_ref(text: str) -> NodeRef:
    """`cluster/node` -> (cluster, node); ValueError for anything else."""
    cluster, sep, node = text.partition("/")
    if not sep or not cluster or not node or "/" in node:
        raise ValueError(f"expected CLUSTER/NODE, got {text!r}")
    return cluster, node


def compact_matrix_document(matrix: Matrix, nodes: Iterable[Target] = ()) -> dict[str, Any]:
    """Columns once (with the NodeIP of those among `nodes`), then per row its
    source's index and a string of state codes."""
    index = {ref: i for i, ref in enumerate(matrix.columns)}
    node_ips = {(t.cluster, t.node): t.node_ip for t in nodes}
    rows = []
    for row in matrix.rows:
        rows.append(
            {
                "node": index[row.source],
                "probe_time": iso_time(row.probe_time),
                "stale": row.stale,
                "states": "".join(state_code(cell.state) for cell in row.cells),
            }
        )
    return {
        "v": WEB_VERSION,
        "generated_at": iso_time(matrix.generated_at),
        "codes": {code: state for state, code in STATE_CODES.items()},
        "nodes": [_column(ref, node_ips.get(ref)) for ref in matrix.columns],
        "rows": rows,
        "lines": list(matrix.warnings),  # drawn with a warning mark
        "notes": list(matrix.notes),  # information, drawn plain
        "unavailable": [
            {"cluster": name, "error": error} for name, error in sorted(matrix.unavailable.items())
        ],
    }


def _column(ref: NodeRef, node_ip: str | None) -> dict[str, str]:
    column = {"cluster": ref[0], "name": ref[1]}
    if node_ip is not None:
        column["node_ip"] = node_ip
    return column


def history_rows(minutes: Sequence[MinuteSummary]) -> list[list[float | int | None]]:
    """[minute start (unix s), probes, failures, p50 s, p95 s, max s] per minute."""
    return [[m.start, m.probes, m.failures, m.rtt_p50_s, m.rtt_p95_s, m.rtt_max_s] for m in minutes]


def _status_node(status: Mapping[str, Any], target: NodeRef) -> Mapping[str, Any] | None:
    for node in status.get("nodes", []):
        if (node.get("cluster"), node.get("name")) == target:
            found: Mapping[str, Any] = node
            return found
    return None


def _local_paths(node: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The status document's PATH objects of one node, by path name (`node/icmp`)."""
    out: dict[str, dict[str, Any]] = {}
    for target_type, part in (
        ("node", node.get("host")),
        ("endpoint", node.get("health_endpoint")),
    ):
        if not part:
            continue
        address = part.get("primary_address", {})
        for protocol in ("icmp", "http"):
            if protocol in address:
                out[f"{target_type}/{protocol}"] = {"ip": address.get("ip"), **address[protocol]}
    return out


def cell_document(
    matrix: Matrix,
    source: NodeRef,
    target: NodeRef,
    *,
    local: NodeRef,
    status: Mapping[str, Any],
    history: Mapping[str, Sequence[MinuteSummary]],
    history_minutes: int,
) -> dict[str, Any] | None:
    """One cell: per path what etcd has (status, RTT, loss) and, when `source` is this
    agent, what the agent itself has (text, percentiles, last probed, the last hour).
    None when the matrix has no such source or target."""
    row = next((r for r in matrix.rows if r.source == source), None)
    if row is None or target not in matrix.columns:
        return None
    cell = row.cells[matrix.columns.index(target)]
    own = source == local
    status_node = _status_node(status, target) if own else None
    local_paths = _local_paths(status_node) if status_node is not None else {}
    paths = []
    for name in PATH_ORDER:
        reported = cell.paths.get(name)
        mine = local_paths.get(name)
        if reported is None and mine is None:
            continue
        target_type, _, protocol = name.partition("/")
        entry: dict[str, Any] = {"name": name, "target_type": target_type, "protocol": protocol}
        if mine is not None:
            # The agent's own view: newer than what it last published, and richer.
            entry.update(
                status=mine.get("status"),
                text=mine.get("text"),
                detail=mine.get("detail"),
                ip=mine.get("ip"),
                rtt_s=mine.get("latency_s"),
                loss=mine.get("loss"),
                rtt_p50_s=mine.get("rtt_p50_s"),
                rtt_p95_s=mine.get("rtt_p95_s"),
                rtt_max_s=mine.get("rtt_max_s"),
                last_probed=mine.get("last_probed"),
                history=history_rows(history.get(name, ())),
            )
        elif reported is not None:
            entry.update(status=reported.status.value, rtt_s=reported.rtt_s, loss=reported.loss)
        paths.append(entry)
    return {
        "v": WEB_VERSION,
        "source": label(source),
        "target": label(target),
        "state": cell.state,
        "own": own,
        "probe_time": iso_time(row.probe_time),
        "stale": row.stale,
        "history_minutes": history_minutes,
        "paths": paths,
    }
