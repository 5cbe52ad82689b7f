"""Golden-file tests of the matrix text (`meshhealth matrix`, `meshhealth status --matrix`)
and of the `Clusters:` section of `meshhealth status` with clustermesh.

After an intended change of the output, regenerate and review the diff:

    MESHHEALTH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/cli/test_format_matrix.py
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from meshhealth.cli.format_matrix import cell_text, format_matrix_json, format_matrix_text
from meshhealth.cli.format_status import format_status_text
from meshhealth.diagnosis.cluster_summary import summaries_of
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import findings_json
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.cluster_health import SOURCE_REPORTS, summary_verdict_document
from meshhealth.documents.matrix import build_matrix
from meshhealth.documents.matrix_json import matrix_document
from meshhealth.documents.status import ClusterState, EtcdState, build_status_document
from meshhealth.model import Target
from tests import matrix_stories as S
from tests import status_stories
from tests.golden_files import check_golden

STORIES = S.STORIES


@pytest.mark.parametrize("story", sorted(STORIES))
def test_matrix_text_matches_golden(story: str) -> None:
    unavailable = {"lab3": "etcd http://127.0.0.1:2479 unreachable: connection refused"}
    matrix = build_matrix(
        STORIES[story](), now=S.NOW, unavailable=unavailable if story == "meshed" else None
    )
    diagnosed = diagnose(matrix_view(matrix))
    findings = findings_json(diagnosed, generated_at=S.NOW)["findings"]
    verdicts = [
        summary_verdict_document(summary, S.NOW, source=SOURCE_REPORTS)
        for _, summary in sorted(summaries_of(matrix, diagnosed).items())
    ]
    text = format_matrix_text(matrix_document(matrix), findings, verdicts)
    check_golden(f"matrix_{story}.txt", text)
    # A fault story shows its findings after the summary lines; a healthy one none.
    assert text.count("\nFinding:   ") == len(findings)
    assert bool(findings) == (
        story
        in (
            "endpoint_forward_drop",
            "node_unreachable",
            "subset",
            "suspect_and_degraded",
            "egress_blocked",
        )
    )


def test_reference_lines() -> None:
    """The lines users act on, verbatim (independent of the golden files)."""
    doc = matrix_document(build_matrix(S.node_unreachable_by_all(), now=S.NOW))
    lines = format_matrix_text(doc).splitlines()
    assert (
        lines[0] == "Health matrix at 2026-11-18T11:06:40Z: each row is what its source node sees"
    )
    assert lines[5] == "source      report  node1         node2         node3"
    assert lines[6] == "lab1/node1  2s ago  ✓✓✓✓ 400µs    ✓✓✓✓ 400µs    ✗✗✗✗"
    assert lines[-3:] == [
        "Reachable:   5/9 cells   (4 unreachable, 0 stale, 0 unknown)",
        "lab1/node3 is unreachable from every other node: look at lab1/node3 or its link",
        "lab1/node3 reaches no one: look at lab1/node3's own network",
    ]


@pytest.mark.parametrize(
    ("cell", "text"),
    [
        ({"state": "reachable", "paths": S.paths()}, "✓✓✓✓ 400µs"),
        ({"state": "unreachable", "paths": S.paths((S.OK, S.OK, S.TIMEOUT, S.REFUSED))},
         "✓✓✗✗ 400µs"),
        ({"state": "reachable", "paths": S.paths((S.OK, S.OK))}, "✓✓-- 400µs"),
        ({"state": "unreachable", "paths": S.paths((S.TIMEOUT,) * 4)}, "✗✗✗✗"),
        ({"state": "stale", "paths": S.paths()}, "~~~~"),
        ({"state": "unknown", "paths": {}}, "????"),
    ],
)  # fmt: skip
def test_cell_text(cell: dict, text: str) -> None:
    as_json = json.loads(json.dumps({k: v for k, v in cell.items() if k != "paths"}))
    as_json["paths"] = {
        name: {"status": p.status.value, "rtt_s": p.rtt_s, "loss": p.loss}
        for name, p in cell["paths"].items()
    }
    assert cell_text(as_json) == text


def test_empty_matrix() -> None:
    text = format_matrix_text(matrix_document(build_matrix([], now=S.NOW)))
    assert "No health reports (no agent has published yet)." in text
    assert "Reachable:   0/0 cells" in text


def test_json_is_the_document() -> None:
    doc = matrix_document(build_matrix(S.healthy(), now=S.NOW))
    assert json.loads(format_matrix_json(doc)) == doc


# --- `meshhealth status` with clustermesh ---------------------------------------------------


def _meshed_status() -> dict:
    inputs = status_stories.healthy()
    remote = Target("lab2", "node1", "10.77.1.1", "10.78.11.2")
    down = EtcdState(
        up=False,
        since=status_stories.NOW - 30,
        last_error="etcd http://10.77.255.2:2379 unreachable: connection refused",
    )
    clusters = [
        ClusterState("lab1", 195, True, "ok", inputs.etcd),
        ClusterState("lab2", 200, False, "etcd_down", down),
        ClusterState(
            "lab3", 195, False, "refused", EtcdState(up=True, since=status_stories.NOW - 60),
            error="cluster id 195 is also the id of lab1 (this cluster): give one of them "
            "another --cluster-id",
        ),
        ClusterState("lab4", None, False, "waiting", EtcdState(up=True),
                     error="no meshhealth/cluster-config/lab4 entry yet"),
    ]  # fmt: skip
    inputs = dataclasses.replace(inputs, targets=[*inputs.targets, remote], clusters=clusters)
    return build_status_document(inputs)


def test_status_clusters_section_matches_golden() -> None:
    doc = _meshed_status()
    assert [c["node_count"] for c in doc["clusters"]] == [3, 1, 0, 0]
    check_golden("status_meshed.txt", format_status_text(doc, verbose=False))


def test_status_without_mesh_has_no_clusters_section() -> None:
    doc = build_status_document(status_stories.healthy())
    assert [(c["name"], c["local"], c["state"]) for c in doc["clusters"]] == [("lab1", True, "ok")]
    assert "Clusters:" not in format_status_text(doc, verbose=False)


# --- the commands' errors ----------------------------------------------------------------------


def test_matrix_command_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from meshhealth.cli.main import main
    from tests.plugins.local_etcd import free_loopback_port

    url = f"http://127.0.0.1:{free_loopback_port()}"
    assert main(["matrix", "--etcd", url, "--timeout", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"meshhealth matrix: etcd {url} unreachable")
    assert main(["matrix", "--etcd", url, "--mesh", "lab2"]) == 2
    assert "--mesh: expected NAME=URLS" in capsys.readouterr().err
    assert main(["status", "--matrix", "--probe", "-H", "unix:///nonexistent.sock"]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_matrix_text_in_natural_order() -> None:
    text = format_matrix_text(
        matrix_document(build_matrix(S.healthy(["lab1/node10", "lab1/node2"]), now=S.NOW))
    )
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("source"))
    assert head.split()[2:] == ["node2", "node10"]
    sources = [line.split()[0] for line in lines if line.startswith("lab1/")]
    assert sources == ["lab1/node2", "lab1/node10"]
