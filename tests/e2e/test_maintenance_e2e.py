"""End to end: real agents (loopback mode) on a real etcd. A node put in planned
maintenance with `meshhealth maintenance start` stops answering (its agent SIGSTOPped):
every agent's headline leaves it out (`2/2 reachable, 1 in maintenance`), its finding is
kept but marked expected (status text and JSON, metrics, `meshhealth diagnose`); once
the window is ended it counts again: unreachable, the finding no longer expected."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent_cluster import AgentCluster, wait_for
from tests.e2e.test_cluster_view_e2e import _stop, metric_value, verdict
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

NAMES = ("n1", "n2", "n3")
LEASE_TTL_S = 90  # the stopped node stays registered: it is there but does not answer
CONVERGE_S = 60  # generous: load on the test machine reaches 40
NODE_KINDS = ("agent-down", "node-down", "node-isolated")


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: EtcdServer) -> Iterator[AgentCluster]:
    with AgentCluster(
        tmp_path, etcd_server.endpoint, interval_s=1.0, lease_ttl_s=LEASE_TTL_S
    ) as agents:
        yield agents


def cli(etcd: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    env["MESHHEALTH_ETCD"] = etcd
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def node_findings(doc: dict[str, Any], culprit: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if culprit in f["nodes"] and f["kind"] in NODE_KINDS]


def test_a_node_in_maintenance_is_left_out_until_its_window_ends(
    cluster: AgentCluster, etcd_server: EtcdServer
) -> None:
    agents = [cluster.start(name, wait=False) for name in NAMES]
    for agent in agents:
        cluster.wait_admin(agent, timeout_s=CONVERGE_S)
    for agent in agents:
        wait_for(
            agent.status_json,
            lambda doc: verdict(doc)["source"] == "summary" and verdict(doc)["reachable"] == 3,
            CONVERGE_S,
            what=f"{agent.name} shows 3/3 reachable from the cluster summary",
        )
    aggregator = verdict(agents[0].status_json())["aggregator"]
    victim = next(a for a in agents if f"c1/{a.name}" != aggregator)
    watchers = [a for a in agents if a is not victim]
    culprit = f"c1/{victim.name}"

    started = cli(
        etcd_server.endpoint, "maintenance", "start", victim.name, "--cluster", "c1",
        "--reason", "kernel upgrade", "--for", "30m", "--by", "ops",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    for agent in agents:  # the headline says so before anything fails
        wait_for(
            agent.status_json,
            lambda doc: (verdict(doc)["reachable"], verdict(doc)["maintenance"]) == (2, 1),
            CONVERGE_S,
            what=f"{agent.name} shows 2/2 reachable, 1 in maintenance",
        )

    _stop(victim, signal.SIGSTOP)
    try:
        for agent in watchers:
            doc, _ = wait_for(
                agent.status_json,
                lambda doc: (
                    bool(node_findings(doc, culprit))
                    and verdict(doc)["maintenance_nodes"][0]["state"] == "unreachable"
                ),
                CONVERGE_S,
                what=f"{agent.name} shows {culprit} unreachable, in maintenance",
            )
            counts = verdict(doc)
            assert (counts["reachable"], counts["unreachable"], counts["total"]) == (2, 0, 2)
            assert counts["node_states"] == {}
            [note] = counts["maintenance_nodes"]
            assert (note["node"], note["reason"], note["by"]) == (culprit, "kernel upgrade", "ops")
            assert all(f.get("expected") is True for f in node_findings(doc, culprit))
            kind = node_findings(doc, culprit)[0]["kind"]
            out = agent.status_cli().stdout
            assert re.search(r"Cluster health:\s+2/2 reachable .*, 1 in maintenance", out), out
            assert re.search(
                rf"In maintenance:\s+{culprit} in maintenance \(unreachable\) until .* by ops: "
                "kernel upgrade",
                out,
            ), out
            assert f"{culprit} (in maintenance):" in out  # its title in the node list
            assert re.search(rf"Finding:\s+{kind} {culprit} \(confidence [\d.]+, expected: ", out)
            wait_for(
                agent.metrics_text,
                lambda text, kind=kind: (
                    metric_value(text, "meshhealth_node_maintenance", cluster="c1", node=culprit)
                    == 1
                    and metric_value(
                        text, "meshhealth_finding", kind=kind, node=culprit, expected="true"
                    )
                    == 1
                ),
                CONVERGE_S,
                what=f"{agent.name} exports {culprit} in maintenance, its finding expected",
            )
        # `meshhealth diagnose` reads the window from etcd too
        diagnosed = cli(etcd_server.endpoint, "diagnose", "--cluster", "c1", "-o", "json")
        found = json.loads(diagnosed.stdout)["findings"]
        assert found and all(f.get("expected") is True for f in found), found
        assert diagnosed.returncode == 0, diagnosed.stderr  # expected findings only

        ended = cli(etcd_server.endpoint, "maintenance", "end", victim.name, "--cluster", "c1")
        assert ended.returncode == 0, ended.stderr
        for agent in watchers:  # it counts again
            doc, _ = wait_for(
                agent.status_json,
                lambda doc: (
                    (verdict(doc)["reachable"], verdict(doc)["unreachable"]) == (2, 1)
                    and bool(node_findings(doc, culprit))
                ),
                CONVERGE_S,
                what=f"{agent.name} counts {culprit} unreachable again",
            )
            assert verdict(doc)["maintenance"] == 0 and verdict(doc)["maintenance_nodes"] == []
            assert not any(f.get("expected") for f in node_findings(doc, culprit))
            out = agent.status_cli().stdout
            assert re.search(r"Cluster health:\s+2/3 reachable .*1 unreachable", out), out
            assert "in maintenance" not in out
            wait_for(
                agent.metrics_text,
                lambda text: "meshhealth_node_maintenance{" not in text,
                CONVERGE_S,
                what=f"{agent.name} removed the maintenance series",
            )
    finally:
        _stop(victim, signal.SIGCONT)
