"""The text of `meshhealth diagnose` (cli/format_findings.py): golden files per matrix
story, and the columns of one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.cli.format_findings import (
    FINDING_LABEL,
    HEADER,
    finding_columns,
    finding_line,
    finding_lines,
    format_findings_json,
    format_findings_text,
)
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import findings_json
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.findings import FindingJSON, FindingsJSON
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


ENDPOINT_DOWN: FindingJSON = {
    "kind": "endpoint-down",
    "nodes": ["lab1/node2"],
    "confidence": 0.88,
    "since": None,
    "evidence": "host paths are ok but its health endpoint (HealthIP) fails from 3 of 3 "
    "observers (lab1/node1, lab1/node3, lab1/node4)",
}


@pytest.mark.parametrize(
    ("width", "lines"),
    [
        # wide enough: the one line of `status`
        (200, [finding_line(ENDPOINT_DOWN)]),
        (
            80,
            [
                "Finding:   endpoint-down lab1/node2 (confidence 0.88): host paths are ok but its",
                "           health endpoint (HealthIP) fails from 3 of 3 observers (lab1/node1,",
                "           lab1/node3, lab1/node4)",
            ],
        ),
        (
            60,
            [
                "Finding:   endpoint-down lab1/node2 (confidence 0.88): host",
                "           paths are ok but its health endpoint (HealthIP)",
                "           fails from 3 of 3 observers (lab1/node1,",
                "           lab1/node3, lab1/node4)",
            ],
        ),
        # narrower than kind and culprit: they stay together on the first line
        (
            30,
            [
                "Finding:   endpoint-down lab1/node2 (confidence 0.88):",
                "           host paths are ok",
                "           but its health",
                "           endpoint (HealthIP)",  # 30 columns: fits
                "           fails from 3 of 3",
                "           observers",
                "           (lab1/node1,",
                "           lab1/node3,",
                "           lab1/node4)",
            ],
        ),
    ],
)
def test_finding_lines_wrap_at_words(width: int, lines: list[str]) -> None:
    assert finding_lines(ENDPOINT_DOWN, width) == lines


def test_finding_lines_cut_only_a_word_longer_than_a_line() -> None:
    finding: FindingJSON = {**ENDPOINT_DOWN, "evidence": "see " + "x" * 25 + " now"}
    assert finding_lines(finding, 30) == [
        "Finding:   endpoint-down lab1/node2 (confidence 0.88):",
        "           see",
        "           " + "x" * 19,
        "           " + "x" * 6 + " now",
    ]


@given(
    st.lists(st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=30)),
    st.integers(min_value=1, max_value=200),
)
def test_finding_lines_lose_no_word_and_fit(words: list[str], width: int) -> None:
    finding: FindingJSON = {**ENDPOINT_DOWN, "evidence": " ".join(words)}
    lines = finding_lines(finding, width)
    assert lines[0].startswith("Finding:   endpoint-down lab1/node2 (confidence 0.88):")
    assert all(len(line) <= max(width, len(FINDING_LABEL) + 1) for line in lines[1:])
    joined = " ".join(line.strip() for line in lines)
    assert "".join(joined.split()) == "".join(finding_line(finding).split())
