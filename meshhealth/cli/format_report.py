"""`meshhealth report -o text` and `-o json`: the report document (documents/report.py)
as a terminal reads it. Every string read from etcd is escaped (terminal_text)."""

from __future__ import annotations

import json

from meshhealth.documents.report import ReportDocument, WindowDoc
from meshhealth.terminal_text import escape
from meshhealth.timefmt import format_duration, format_interval


def format_report_json(doc: ReportDocument) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def percent(availability: float) -> str:
    """`99.931%`: three decimals, so 99.9995% does not read as 100%."""
    text = f"{availability * 100:.3f}%"
    return "99.999%" if text == "100.000%" and availability < 1.0 else text


def _window(window: WindowDoc) -> str:
    failed = f"{window['failures']}/{window['probes']} failed"
    length = format_interval(window["seconds"])
    return f"{window['start']} +{length} {percent(window['availability'])} ({failed})"


def _p95(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        return "  ".join(cells).rstrip()

    return [line(header), *(line(row) for row in rows)]


def format_report_text(doc: ReportDocument) -> str:
    lines = [
        f"Roll-ups of {doc['values']} nodes, {doc['since']} .. {doc['until']}",
    ]
    if not doc["pairs"]:
        lines.append("No probes in this span.")
        return "\n".join(lines) + "\n"
    lines += ["", f"Least available pairs ({len(doc['pairs'])} of {doc['pairs_total']}):"]
    pair_rows = [
        [
            escape(row["observer"]),
            escape(row["target"]),
            escape(row["path"]),
            percent(row["availability"]),
            str(row["probes"]),
            _p95(row["worst_rtt_p95_s"]),
            _window(row["worst_window"]),
        ]
        for row in doc["pairs"]
    ]
    header = ["OBSERVER", "TARGET", "PATH", "AVAILABILITY", "PROBES", "WORST P95"]
    lines += _table([*header, "WORST WINDOW"], pair_rows, {3, 4, 5})
    lines += [
        "",
        f"Least available nodes, as targets ({len(doc['nodes'])} of {doc['nodes_total']}):",
    ]
    node_rows = [
        [
            escape(row["node"]),
            str(row["observers"]),
            percent(row["availability"]),
            str(row["probes"]),
            _p95(row["worst_rtt_p95_s"]),
            _window(row["worst_window"]),
        ]
        for row in doc["nodes"]
    ]
    header = ["NODE", "OBSERVERS", "AVAILABILITY", "PROBES", "WORST P95", "WORST WINDOW"]
    lines += _table(header, node_rows, {1, 2, 3, 4})
    return "\n".join(lines) + "\n"
