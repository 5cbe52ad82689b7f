"""`meshhealth diagnose` against a real etcd: health reports and cluster summaries written
by the codec, the command run as users run it (a subprocess), exit codes and output: the
aggregator's published findings when its summary is in etcd, else (or with --recompute)
findings recomputed from the reports, the first line saying which and why."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from meshhealth.model import HealthReport
from meshhealth.wire.health import encode_health_report
from meshhealth.wire.keys import health_key, summary_key
from meshhealth.wire.summary import ClusterSummary, NodeCounts, SummaryFinding, encode_summary
from tests import matrix_stories as S
from tests.etcd_helpers import registration
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import free_loopback_port
from tests.repo_paths import REPO_ROOT


def diagnose_cli(*args: str, command: str = "diagnose") -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() != "http_proxy" and not k.startswith("MESHHEALTH_")
    }
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", command, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def put_reports(server: EtcdServer, story: Callable[[], list[HealthReport]]) -> None:
    """The story's reports, as fresh as they were at the story's NOW, and the entries
    that register each reporter."""
    shift = time.time() - S.NOW
    for report in story():
        fresh = dataclasses.replace(report, probe_time=report.probe_time + shift)
        key = health_key(report.cluster, report.node)
        server.etcdctl("put", key, input_bytes=encode_health_report(fresh))
        for key, value in registration(report.cluster, report.node):
            server.etcdctl("put", key, input_bytes=value)


NO_SUMMARY = (
    "Findings recomputed from the health reports now: lab1 has no summary in etcd (no aggregator)"
)


def test_a_healthy_cluster_has_no_findings_exit_0(etcd_server: EtcdServer) -> None:
    put_reports(etcd_server, S.healthy)
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == NO_SUMMARY
    assert second.startswith("No findings at ")
    as_json = diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["findings"] == []
    assert doc["generated_at"].endswith("Z")
    assert doc["source"] == "recomputed"


def test_an_endpoint_down_is_one_finding_exit_1(etcd_server: EtcdServer) -> None:
    put_reports(etcd_server, S.endpoint_forward_drop)
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == NO_SUMMARY
    assert lines[1].endswith(": 1")
    assert lines[2].split()[:5] == ["KIND", "NODES", "CONFIDENCE", "SINCE", "EVIDENCE"]
    assert lines[3].split()[:3] == ["endpoint-down", "lab1/node2", "0.75"]
    assert "from 2 of 2 observers (lab1/node1, lab1/node3)" in lines[3]
    assert len(lines) == 4
    as_json = diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json", "--cluster", "lab1")
    assert as_json.returncode == 1, as_json.stderr
    (finding,) = json.loads(as_json.stdout)["findings"]
    assert (finding["kind"], finding["nodes"], finding["confidence"]) == (
        "endpoint-down",
        ["lab1/node2"],
        0.75,
    )


def test_the_matrix_text_ends_with_the_findings(etcd_server: EtcdServer) -> None:
    put_reports(etcd_server, S.endpoint_forward_drop)
    result = diagnose_cli("--etcd", etcd_server.endpoint, command="matrix")
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("Finding:   endpoint-down lab1/node2 (confidence 0.75): host paths")


def test_a_node_everyone_loses_exit_1(etcd_server: EtcdServer) -> None:
    put_reports(etcd_server, S.node_unreachable_by_all)
    result = diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json")
    assert result.returncode == 1, result.stderr
    kinds = [(f["kind"], f["nodes"]) for f in json.loads(result.stdout)["findings"]]
    assert kinds == [("node-isolated", ["lab1/node3"])]


def test_reports_of_unregistered_nodes_are_ignored_and_said(etcd_server: EtcdServer) -> None:
    """Two forged reports (no ip entry registers their nodes) say node3 is down: the
    commands leave them out, as the aggregator does, and say so on stderr."""
    put_reports(etcd_server, S.healthy)
    shift = time.time() - S.NOW
    down = S.paths((S.TIMEOUT,) * 4)
    for name in ("x1", "x2"):
        forged = S.report(f"lab1/{name}", {"lab1/node3": down})
        fresh = dataclasses.replace(forged, probe_time=forged.probe_time + shift)
        etcd_server.etcdctl(
            "put", health_key("lab1", name), input_bytes=encode_health_report(fresh)
        )
    said = "ignored 2 health reports from unregistered nodes: lab1/x1, lab1/x2"
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[1].startswith("No findings at ")
    assert result.stderr.splitlines() == [f"meshhealth diagnose: {said}"]
    matrix = diagnose_cli("--etcd", etcd_server.endpoint, "--cluster", "lab1", command="matrix")
    assert matrix.returncode == 0, matrix.stderr
    assert "Reachable:   9/9 cells" in matrix.stdout and "x1" not in matrix.stdout
    assert matrix.stderr.splitlines() == [f"meshhealth matrix: {said}"]


def published_summary(generated_at: float) -> ClusterSummary:
    """What node2, lab1's aggregator, published about S.endpoint_forward_drop: the same
    finding as diagnosis of the reports gives (0.75), but surer (0.94, as after more
    rounds) and in other words, so a test tells which of the two was printed."""
    return ClusterSummary(
        cluster="lab1",
        aggregator="node2",
        generated_at=generated_at,
        nodes=NodeCounts(reachable=3),
        observers_min=2,
        observers_median=2.0,
        findings=(
            SummaryFinding(
                kind="endpoint-down",
                nodes=("lab1/node2",),
                confidence=0.94,
                since=generated_at - 30,
                evidence="as published by the aggregator",
            ),
        ),
    )


def put_summary(server: EtcdServer, value: bytes) -> None:
    server.etcdctl("put", summary_key("lab1"), input_bytes=value)


def test_a_summary_in_etcd_gives_its_findings_and_says_whose(etcd_server: EtcdServer) -> None:
    """The aggregator's summary is in etcd: diagnose prints its findings (0.94, its
    evidence: what `status`, `watch` and the page show), not a diagnosis of the reports
    (0.75), and its first line names the aggregator and the summary's age."""
    put_reports(etcd_server, S.endpoint_forward_drop)
    put_summary(etcd_server, encode_summary(published_summary(time.time() - 3)))
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"Findings from lab1's aggregator \(node2\), updated \d+s ago", lines[0])
    assert lines[1].endswith(": 1")
    assert lines[3].split()[:3] == ["endpoint-down", "lab1/node2", "0.94"]
    assert lines[3].endswith("as published by the aggregator")
    assert len(lines) == 4
    as_json = diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json", "--cluster", "lab1")
    assert as_json.returncode == 1, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["source"] == "summary"
    (finding,) = doc["findings"]
    assert (finding["confidence"], finding["evidence"]) == (0.94, "as published by the aggregator")


def test_recompute_diagnoses_the_reports_though_a_summary_is_there(
    etcd_server: EtcdServer,
) -> None:
    put_reports(etcd_server, S.endpoint_forward_drop)
    put_summary(etcd_server, encode_summary(published_summary(time.time() - 3)))
    result = diagnose_cli("--etcd", etcd_server.endpoint, "--recompute")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Findings recomputed from the health reports now (--recompute)"
    assert lines[3].split()[:3] == ["endpoint-down", "lab1/node2", "0.75"]
    assert "from 2 of 2 observers (lab1/node1, lab1/node3)" in lines[3]
    as_json = diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json", "--recompute")
    doc = json.loads(as_json.stdout)
    assert doc["source"] == "recomputed"
    assert [f["confidence"] for f in doc["findings"]] == [0.75]


def test_an_undecodable_summary_is_recomputed_and_said(etcd_server: EtcdServer) -> None:
    """A summary that does not decode is not trusted: the findings are recomputed and
    the first line says why, with etcd's bytes escaped."""
    put_reports(etcd_server, S.endpoint_forward_drop)
    put_summary(etcd_server, b"\x1b[31m not msgpack")
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "Findings recomputed from the health reports now: lab1's summary does not decode: "
    )
    assert "\x1b" not in result.stdout
    assert lines[3].split()[:3] == ["endpoint-down", "lab1/node2", "0.75"]
    doc = json.loads(diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json").stdout)
    assert doc["source"] == "recomputed"


def test_unreachable_etcd_is_one_line_exit_2() -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"
    result = diagnose_cli("--etcd", url, "--timeout", "2")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"meshhealth diagnose: etcd {url} unreachable: connection refused\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--mesh", "lab2"], "--mesh: expected NAME=URLS"),
        (["-o", "yaml"], "yaml"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], says: str) -> None:
    result = diagnose_cli("--etcd", "http://127.0.0.1:1", *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr


def test_mesh_gives_each_clusters_published_findings_and_names_a_lost_etcd(
    etcd_server: EtcdServer, second_etcd_server: EtcdServer
) -> None:
    """`--mesh lab2=URLS` reads lab2's summary from lab2's own etcd: the findings of both
    clusters, the first line naming both aggregators. When lab2's etcd does not answer,
    the one line says which etcd failed, and lab1's findings are still there."""
    put_reports(etcd_server, S.endpoint_forward_drop)
    put_summary(etcd_server, encode_summary(published_summary(time.time() - 3)))
    lab1 = published_summary(time.time() - 5)
    lab2 = dataclasses.replace(
        lab1,
        cluster="lab2",
        aggregator="node7",
        findings=(
            dataclasses.replace(
                lab1.findings[0], kind="node-down", nodes=("lab2/node9",), evidence="lab2's own"
            ),
        ),
    )
    second_etcd_server.etcdctl("put", summary_key("lab2"), input_bytes=encode_summary(lab2))
    mesh = f"lab2={second_etcd_server.endpoint}"
    result = diagnose_cli("--etcd", etcd_server.endpoint, "--mesh", mesh)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(
        r"Findings from lab1's aggregator \(node2\), updated \d+s ago; "
        r"Findings from lab2's aggregator \(node7\), updated \d+s ago",
        lines[0],
    ), lines[0]
    assert lines[1].endswith(": 2")
    found = {tuple(line.split()[:2]) for line in lines[3:]}
    assert found == {("endpoint-down", "lab1/node2"), ("node-down", "lab2/node9")}
    doc = json.loads(
        diagnose_cli("--etcd", etcd_server.endpoint, "--mesh", mesh, "-o", "json").stdout
    )
    assert doc["source"] == "summary"
    assert sorted(f["evidence"] for f in doc["findings"]) == [
        "as published by the aggregator",
        "lab2's own",
    ]

    # lab2's etcd is gone: lab1's published findings (not recomputed: lab2's reports are
    # behind the same dead etcd), the loss named on the first line and on stderr.
    lost = f"lab2=http://127.0.0.1:{free_loopback_port()}"
    for output in ("text", "json"):
        result = diagnose_cli("--etcd", etcd_server.endpoint, "--mesh", lost, "-o", output)
        assert result.returncode == 1, result.stderr
        assert re.fullmatch(
            r"meshhealth diagnose: etcd http://127\.0\.0\.1:\d+ unreachable: [^\n]+\n",
            result.stderr,
        ), result.stderr
        if output == "json":
            doc = json.loads(result.stdout)
            assert doc["source"] == "summary"
            assert [f["evidence"] for f in doc["findings"]] == ["as published by the aggregator"]
        else:
            first, _, _, finding = result.stdout.splitlines()
            assert re.fullmatch(
                r"Findings from lab1's aggregator \(node2\), updated \d+s ago; "
                r"not read: etcd http://127\.0\.0\.1:\d+ unreachable: .+",
                first,
            ), first
            assert finding.split()[:3] == ["endpoint-down", "lab1/node2", "0.94"]
    result = diagnose_cli("--etcd", etcd_server.endpoint, "--mesh", lost, "--recompute")
    assert result.returncode == 1 and "unreachable" in result.stderr, result
    assert result.stdout.splitlines()[3].split()[:3] == ["endpoint-down", "lab1/node2", "0.75"]
