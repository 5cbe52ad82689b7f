"""Metric cardinality with real agents: per-target series exist only for the agent's
current direct targets, and a target that leaves the probe set takes its series with it;
the aggregates are a fixed number of series (docs/metrics.md, "Cardinality")."""

from __future__ import annotations

import re
from pathlib import Path

from meshhealth.model import PATH_STATES
from tests.agent_cluster import AgentCluster, AgentProcess, wait_for
from tests.plugins.etcd_server import EtcdServer

PER_TARGET_FAMILIES = (
    "meshhealth_node_connectivity_status",
    "meshhealth_node_connectivity_latency_seconds_bucket",
)
SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$", re.MULTILINE)


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    found = []
    for name, labels, value in SERIES.findall(text):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        found.append((name, pairs, float(value)))
    return found


def targets_with_series(agent: AgentProcess) -> set[str]:
    """target_node of every per-target series the agent exports now."""
    return {
        labels["target_node"]
        for name, labels, _ in series(agent.metrics_text())
        if name in PER_TARGET_FAMILIES
    }


def probe_paths(agent: AgentProcess) -> dict[str, float]:
    return {
        labels["status"]: value
        for name, labels, value in series(agent.metrics_text())
        if name == "meshhealth_probe_paths"
    }


def test_series_of_a_target_that_left_are_removed(tmp_path: Path, etcd_server: EtcdServer) -> None:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        n1 = cluster.start("n1")
        cluster.start("n2")
        n3 = cluster.start("n3")
        # Every target has its status series and, once probed OK, its latency histogram.
        wait_for(lambda: targets_with_series(n1), lambda t: t == {"n1", "n2", "n3"}, 30,
                 what="n1's series of its three targets")  # fmt: skip
        # 6 paths a target: 4, the don't-fragment MTU probe's and the UDP echo's (both on
        # by default)
        wait_for(lambda: probe_paths(n1), lambda p: p.get("reachable") == 18, 30,
                 what="n1's 18 paths reachable")  # fmt: skip
        assert set(probe_paths(n1)) == set(PATH_STATES)  # a fixed set at any N

        # n3 leaves (its lease is revoked): n1 stops probing it and drops its series,
        # not leaving them at their last value.
        cluster.stop(n3)
        wait_for(lambda: targets_with_series(n1), lambda t: t == {"n1", "n2"}, 30,
                 what="n3's series gone from n1")  # fmt: skip
        text = n1.metrics_text()
        assert 'target_node="n3"' not in text
        paths = probe_paths(n1)
        assert sum(paths.values()) == 12 and paths["reachable"] == 12  # 2 targets x 6 paths
        assert re.search(r"^meshhealth_probe_targets 2$", text, re.MULTILINE)
        # n2 is still there, with both families
        names = {name for name, labels, _ in series(text) if labels.get("target_node") == "n2"}
        assert set(PER_TARGET_FAMILIES) <= names
