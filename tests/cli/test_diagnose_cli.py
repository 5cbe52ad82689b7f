"""`meshhealth diagnose` against a real etcd: health reports written by the codec, the
command run as users run it (a subprocess), exit codes and output."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from meshhealth.model import HealthReport
from meshhealth.wire.health import encode_health_report
from meshhealth.wire.keys import health_key
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


def test_a_healthy_cluster_has_no_findings_exit_0(etcd_server: EtcdServer) -> None:
    put_reports(etcd_server, S.healthy)
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("No findings at ")
    assert result.stdout.count("\n") == 1
    as_json = diagnose_cli("--etcd", etcd_server.endpoint, "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["findings"] == []
    assert doc["generated_at"].endswith("Z")


def test_an_endpoint_down_is_one_finding_exit_1(etcd_server: EtcdServer) -> None:
    put_reports(etcd_server, S.endpoint_forward_drop)
    result = diagnose_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith(": 1")
    assert lines[1].split()[:5] == ["KIND", "NODES", "CONFIDENCE", "SINCE", "EVIDENCE"]
    assert lines[2].split()[:3] == ["endpoint-down", "lab1/node2", "0.75"]
    assert "from 2 of 2 observers (lab1/node1, lab1/node3)" in lines[2]
    assert len(lines) == 3
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
    assert result.stdout.startswith("No findings at ")
    assert result.stderr.splitlines() == [f"meshhealth diagnose: {said}"]
    matrix = diagnose_cli("--etcd", etcd_server.endpoint, "--cluster", "lab1", command="matrix")
    assert matrix.returncode == 0, matrix.stderr
    assert "Reachable:   9/9 cells" in matrix.stdout and "x1" not in matrix.stdout
    assert matrix.stderr.splitlines() == [f"meshhealth matrix: {said}"]


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
