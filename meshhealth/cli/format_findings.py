"""Text (and JSON) of the findings (pure): `meshhealth diagnose`.

    Findings at 2026-11-18T11:06:40Z: 1
    KIND           NODES       CONFIDENCE  SINCE                        EVIDENCE
    endpoint-down  lab1/node2  0.75        2026-11-18T11:06:38Z (2s)    host paths are ok ...

One line per finding, most confident first (diagnosis's order); SINCE is followed by how
long before `generated_at` it was. Input: the document of
meshhealth.diagnosis.findings.findings_json, so the text is a function of the document
alone.
"""

from __future__ import annotations

import json

from meshhealth.documents.findings import FindingJSON, FindingsJSON
from meshhealth.documents.maintenance import IN_MAINTENANCE
from meshhealth.terminal_text import escape
from meshhealth.timefmt import format_age, parse_iso_time

HEADER = ("KIND", "NODES", "CONFIDENCE", "SINCE", "EVIDENCE")
GAP = "  "


def _since(finding: FindingJSON, generated_at: str | None) -> str:
    since = finding["since"]
    if since is None:
        return "-"
    if generated_at is None:
        return since
    return f"{since} ({format_age(parse_iso_time(generated_at) - parse_iso_time(since))})"


EXPECTED = f"expected: {IN_MAINTENANCE}"


def evidence_text(evidence: str, expected: bool) -> str:
    """The evidence, after `(expected: in maintenance)` when its culprits are in planned
    maintenance (a finding's, or a timeline event's)."""
    return f"({EXPECTED}) {evidence}" if expected else evidence


def expected_suffix(expected: bool) -> str:
    """`, expected: in maintenance` (after a confidence) when it is; else nothing."""
    return f", {EXPECTED}" if expected else ""


def finding_columns(finding: FindingJSON, generated_at: str | None) -> tuple[str, ...]:
    """The five columns of one finding's line (a partition's evidence names its
    groups)."""
    return tuple(
        escape(cell)
        for cell in (
            finding["kind"],
            ",".join(finding["nodes"]),
            f"{finding['confidence']:.2f}",
            _since(finding, generated_at),
            evidence_text(finding["evidence"], finding.get("expected", False)),
        )
    )


FINDING_LABEL = "Finding:   "


def _finding_head(finding: FindingJSON) -> str:
    """`Finding:   endpoint-down lab1/node2 (confidence 0.75):` (escaped; `, expected:
    in maintenance` after the confidence when its nodes are in planned maintenance)."""
    nodes = ",".join(finding["nodes"])
    expected = expected_suffix(finding.get("expected", False))
    return FINDING_LABEL + escape(
        f"{finding['kind']} {nodes} (confidence {finding['confidence']:.2f}{expected}):"
    )


def finding_line(finding: FindingJSON) -> str:
    """`Finding:   endpoint-down lab1/node2 (confidence 0.75): evidence` (one line under
    `meshhealth matrix` and `meshhealth status`)."""
    return f"{_finding_head(finding)} {escape(finding['evidence'])}"


def finding_lines(finding: FindingJSON, width: int) -> list[str]:
    """`finding_line` wrapped at `width` columns for `watch`'s banner: at spaces between
    words (a word longer than a whole line is cut), the kind, culprit and confidence on
    the first line whatever the width, the rest indented under the kind."""
    indent = " " * len(FINDING_LABEL)
    room = max(width - len(indent), 1)  # of a continuation line
    lines = [_finding_head(finding)]
    for word in escape(finding["evidence"]).split():
        if len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
            continue
        # no space to break at inside a word longer than a line: cut it
        lines += [indent + word[i : i + room] for i in range(0, len(word), room)]
    return lines


def format_findings_text(doc: FindingsJSON) -> str:
    """`Findings at T: N`, then a header and one line per finding (none: one line)."""
    at = doc["generated_at"] or "unknown time"
    findings = doc["findings"]
    if not findings:
        return f"No findings at {at}\n"
    rows = [HEADER, *(finding_columns(f, doc["generated_at"]) for f in findings)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    lines = [f"Findings at {at}: {len(findings)}"]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append(GAP.join([*cells, row[-1]]))
    return "\n".join(lines) + "\n"


def format_findings_json(doc: FindingsJSON) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
