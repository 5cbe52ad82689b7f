"""meshhealth.diagnosis.findings: the JSON of `meshhealth diagnose -o json`."""

from __future__ import annotations

import json

from meshhealth.diagnosis.cells import NodeId
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import Finding, FindingKind, findings_json, names
from tests.diagnosis_builders import NOW, column, mesh

A, B, C = NodeId("lab1", "a"), NodeId("lab1", "b"), NodeId("lab2", "c")


def test_no_findings() -> None:
    assert findings_json((), NOW) == {"findings": [], "generated_at": "2027-01-15T08:00:00Z"}


def test_a_finding() -> None:
    finding = Finding(
        FindingKind.NODE_DOWN, (C,), 0.93751, NOW - 30.5, "nothing answers", ((A, C), (B, C))
    )
    assert findings_json([finding], NOW) == {
        "findings": [
            {
                "kind": "node-down",
                "nodes": ["lab2/c"],
                "confidence": 0.94,
                "since": "2027-01-15T07:59:29Z",
                "evidence": "nothing answers",
            }
        ],
        "generated_at": "2027-01-15T08:00:00Z",
    }


def test_partition_has_groups_and_the_others_do_not() -> None:
    partition = Finding(FindingKind.PARTITION, (A,), 1.0, NOW, "split", groups=((B, C), (A,)))
    path = Finding(FindingKind.PATH, (A, B), 0.5, NOW, "a -> b")
    doc = findings_json([partition, path], NOW)
    assert doc["findings"][0]["groups"] == [["lab1/b", "lab2/c"], ["lab1/a"]]
    assert "groups" not in doc["findings"][1]
    assert doc["findings"][1]["nodes"] == ["lab1/a", "lab1/b"]  # observer, then target


def test_diagnosed_findings_serialise() -> None:
    view = mesh("abcd", cells=column("d", "abcd", "down"), stale="d")
    text = json.dumps(findings_json(diagnose(view), NOW))
    doc = json.loads(text)
    (finding,) = doc["findings"]
    assert finding["kind"] == "node-down"
    assert finding["nodes"] == ["lab1/d"]
    assert 0 < finding["confidence"] <= 1
    assert finding["since"] == "2027-01-15T07:59:00Z"
    assert set(finding) == {"kind", "nodes", "confidence", "since", "evidence"}


def test_names_are_capped() -> None:
    nodes = [NodeId("c", f"n{i}") for i in range(7)]
    assert names(nodes[:2]) == "c/n0, c/n1"
    assert names(nodes) == "c/n0, c/n1, c/n2, c/n3, c/n4 and 2 more"
