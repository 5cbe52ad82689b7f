"""Text (and JSON) of the health matrix (pure): `meshhealth matrix`, `status --matrix`.

    Health matrix at 2026-11-22T10:00:00Z: each row is what its source node sees
    ...
    source       report        node1         node2
    lab1/node1   2s ago        ✓✓✓✓ 412µs    ✓✓✓✓ 520µs
    Reachable:   2/2 cells   (0 stale, 0 unknown)

Input: the document of meshhealth.documents.matrix_json.matrix_document, and optionally
each cluster's verdict and diagnosis's findings, so the text is a function of its
inputs alone ("ago" is relative to `generated_at`). docs/clustermesh.md explains the
cells and marks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from meshhealth.cli.format_findings import finding_line
from meshhealth.cli.format_status import summary_verdict_text
from meshhealth.documents.findings import FindingJSON
from meshhealth.documents.matrix import PATH_ORDER
from meshhealth.documents.matrix_json import MatrixCellDocument, MatrixDocument, MatrixRowDocument
from meshhealth.documents.status_schema import ClusterHealthDocument
from meshhealth.terminal_text import escape_lines
from meshhealth.timefmt import format_age, format_duration, parse_iso_time

OK, FAILED, SUSPECT, UNKNOWN, NO_PATH, STALE, UNASSIGNED = "✓", "✗", "◐", "?", "-", "~", "·"
LEGEND = (
    f"Cell: host ICMP, host HTTP, endpoint ICMP, endpoint HTTP ({OK} OK, {FAILED} failed, "
    f"{SUSPECT} suspect,\n      {UNKNOWN} not probed, {NO_PATH} no such path, {STALE} stale "
    "report), then the host ICMP RTT"
)
# Added when some source probes a subset (the probe plan): its other cells are unassigned.
LEGEND_UNASSIGNED = (
    f"      {UNASSIGNED * len(PATH_ORDER)} not assigned to this source this epoch "
    "(subset probing): neither failed nor stale"
)
DISCOUNTED = "⊘"
# Added when the verdict discounts some source.
LEGEND_DISCOUNTED = (
    f"{DISCOUNTED} after a report: the cluster verdict discounts that source (its own row "
    "explains its failures):\n  its cells count in Reachable, not in Cluster health"
)
MIN_CELL_WIDTH = 12  # 4 path marks, a space, an RTT like 412.5µs
GAP = "  "


def path_marks(cell: MatrixCellDocument) -> str:
    """Four characters, one per path in PATH_ORDER."""
    if cell["state"] == "stale":
        return STALE * len(PATH_ORDER)
    if cell["state"] == "unassigned":
        return UNASSIGNED * len(PATH_ORDER)
    paths = cell["paths"]
    if not paths:
        return UNKNOWN * len(PATH_ORDER)
    marks = []
    for name in PATH_ORDER:
        path = paths.get(name)
        if path is None:
            marks.append(NO_PATH)
        elif path["status"] == "ok":
            marks.append(OK)
        elif path["status"] == "unknown":
            marks.append(UNKNOWN)
        elif path.get("state") == "suspect":
            marks.append(SUSPECT)  # failing, not for long enough to say unreachable
        else:
            marks.append(FAILED)
    return "".join(marks)


def cell_rtt_s(cell: MatrixCellDocument) -> float | None:
    for name in PATH_ORDER:
        path = cell["paths"].get(name)
        if path is not None and path["status"] == "ok" and path["rtt_s"] is not None:
            return float(path["rtt_s"])
    return None


def cell_text(cell: MatrixCellDocument) -> str:
    marks = path_marks(cell)
    rtt = cell_rtt_s(cell)
    if cell["state"] in ("stale", "unassigned") or rtt is None:
        return marks
    return f"{marks} {format_duration(rtt)}"


def report_text(row: MatrixRowDocument) -> str:
    if row["probe_time"] is None or row["age_s"] is None:
        return "no report"
    age = f"{format_age(row['age_s'])} ago"
    if row["stale"]:
        return f"{age} STALE"
    if not row.get("degraded_since"):
        return age
    reasons = row.get("degraded_reasons")
    return f"{age} DEGRADED ({', '.join(reasons)})" if reasons else f"{age} DEGRADED"


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - len(text))


def format_matrix_text(
    doc: MatrixDocument,
    findings: Sequence[FindingJSON] = (),
    verdicts: Sequence[ClusterHealthDocument] = (),
) -> str:
    """The whole text, ending with a newline; the `verdicts` before the cell count,
    `findings` after the summary lines."""
    discounted = {d["node"] for v in verdicts for d in v["discounted_observers"]}
    nodes = [(n["cluster"], n["name"]) for n in doc["nodes"]]
    summary = doc["summary"]
    unassigned = summary.get("unassigned", 0)
    lines = [
        f"Health matrix at {doc['generated_at']}: each row is what its source node sees",
        LEGEND,
        *([LEGEND_UNASSIGNED] if unassigned else []),
        "",
    ]
    rows = doc["rows"]
    if not nodes:
        lines.append("No health reports (no agent has published yet).")
    else:
        widths = [max(MIN_CELL_WIDTH, len(node), len(cluster)) for cluster, node in nodes]
        for row in rows:
            for i, cell in enumerate(row["cells"]):
                widths[i] = max(widths[i], len(cell_text(cell)))
        sources = [f"{row['cluster']}/{row['name']}" for row in rows]
        reports = [
            f"{report_text(row)} {DISCOUNTED}" if source in discounted else report_text(row)
            for row, source in zip(rows, sources, strict=True)
        ]
        source_w = max([len("source"), *map(len, sources)])
        report_w = max([len("report"), *map(len, reports)])
        lead = " " * (source_w + len(GAP) + report_w + len(GAP))
        cluster_heads = []
        for i, (cluster, _) in enumerate(nodes):
            first = i == 0 or nodes[i - 1][0] != cluster
            cluster_heads.append(_pad(cluster if first else "", widths[i]))
        lines.append((lead + GAP.join(cluster_heads)).rstrip())
        head = _pad("source", source_w) + GAP + _pad("report", report_w) + GAP
        lines.append(
            (head + GAP.join(_pad(n, w) for (_, n), w in zip(nodes, widths, strict=True))).rstrip()
        )
        for row, source, report in zip(rows, sources, reports, strict=True):
            cells = GAP.join(
                _pad(cell_text(c), w) for c, w in zip(row["cells"], widths, strict=True)
            )
            lines.append(
                (_pad(source, source_w) + GAP + _pad(report, report_w) + GAP + cells).rstrip()
            )
    if discounted:
        lines.append(LEGEND_DISCOUNTED)
    now = parse_iso_time(doc["generated_at"]) if doc["generated_at"] else None
    for verdict in verdicts:
        named = len(verdicts) > 1
        head = f"Cluster health {verdict['cluster']}:" if named else "Cluster health:"
        lines.append(f"{head}   {summary_verdict_text(verdict, now)}")
    suspect = summary.get("suspect", 0)
    suspects = f"{suspect} suspect, " if suspect else ""
    if unassigned:
        lines.append(
            f"Reachable:   {summary['reachable']}/{summary['cells'] - unassigned} assigned cells   "
            f"({summary['unreachable']} unreachable, {suspects}{summary['stale']} stale, "
            f"{summary['unknown']} unknown; {unassigned} not assigned this epoch)"
        )
    else:
        lines.append(
            f"Reachable:   {summary['reachable']}/{summary['cells']} cells   "
            f"({summary['unreachable']} unreachable, {suspects}{summary['stale']} stale, "
            f"{summary['unknown']} unknown)"
        )
    lines += summary["lines"]
    lines += [finding_line(f) for f in findings]
    for item in doc["unavailable_clusters"]:
        lines.append(
            f"Warning:   cluster {item['cluster']}: {item['error']}: its nodes' reports are missing"
        )
    return escape_lines("\n".join(lines)) + "\n"  # names, reasons: from etcd


def format_matrix_json(doc: MatrixDocument) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
