"""The text of `meshhealth diagnose` (cli/format_findings.py): golden files per matrix
story, and the columns of one line."""

from __future__ import annotations

import json

import pytest

from meshhealth.cli.format_findings import (
    HEADER,
    finding_columns,
    format_findings_json,
    format_findings_text,
)
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import FindingJSON, FindingsJSON, findings_json
from meshhealth.diagnosis.from_matrix import matrix_view
from meshhealth.documents.matrix import build_matrix
from tests import diagnosis_builders as B
from tests import matrix_stories as S
from tests.golden_files import check_golden


def _doc(story: str) -> FindingsJSON:
    matrix = build_matrix(S.STORIES[story](), now=S.NOW)
    return findings_json(diagnose(matrix_view(matrix)), generated_at=S.NOW)


@pytest.mark.parametrize("story", ["healthy", "node_unreachable", "endpoint_forward_drop"])
def test_text_matches_golden(story: str) -> None:
    check_golden(f"diagnose_{story}.txt", format_findings_text(_doc(story)))


def test_several_findings_line_up_golden() -> None:
    """A partition ({a,b,c} | {d,e}) and an endpoint down on a: one line each."""
    cells = {(o, t): "down" for o in "abc" for t in "de"}
    cells |= {(o, t): "down" for o in "de" for t in "abc"}
    cells |= {(o, "a"): "endpoint" for o in "bc"}
    findings = diagnose(B.mesh("abcde", cells=cells))
    doc = findings_json(findings, generated_at=B.NOW)
    assert [f["kind"] for f in doc["findings"]] == ["partition", "endpoint-down"]
    text = format_findings_text(doc)
    lines = text.splitlines()
    assert len(lines) == 2 + len(findings)
    # Every column starts at the same place on every line.
    starts = lines[1].index("NODES"), lines[1].index("CONFIDENCE"), lines[1].index("SINCE")
    for line in lines[2:]:
        assert [line[s - 2 : s] for s in starts] == ["  "] * 3
        assert all(line[s] != " " for s in starts)
    check_golden("diagnose_partition.txt", text)


def test_no_findings_is_one_line() -> None:
    text = format_findings_text(_doc("healthy"))
    assert text == "No findings at 2026-11-18T11:06:40Z\n"


def test_columns_of_one_finding() -> None:
    finding: FindingJSON = {
        "kind": "path",
        "nodes": ["lab1/a", "lab1/b"],
        "confidence": 0.5,
        "since": "2026-11-18T11:05:25Z",
        "evidence": "lab1/a -> lab1/b only",
    }
    assert finding_columns(finding, "2026-11-18T11:06:40Z") == (
        "path",
        "lab1/a,lab1/b",
        "0.50",
        "2026-11-18T11:05:25Z (1m15s)",
        "lab1/a -> lab1/b only",
    )
    assert finding_columns({**finding, "since": None}, None)[3] == "-"
    assert finding_columns(finding, None)[3] == "2026-11-18T11:05:25Z"
    assert len(HEADER) == 5


def test_json_is_the_document() -> None:
    doc = _doc("endpoint_forward_drop")
    assert json.loads(format_findings_json(doc)) == doc
    (finding,) = doc["findings"]
    assert finding["kind"] == "endpoint-down"
    assert finding["nodes"] == ["lab1/node2"]
    assert finding["since"] == "2026-11-18T11:06:38Z"
