"""Subset probing end to end: 20 real agents on a real etcd with --probe-targets 3.

Each agent probes its 3 plan targets and itself, and the health reports the agents
publish say, to any reader of etcd, who probed whom in which epoch: every node has at
least 3 probers, and each report's targets are the plan's (build_plan over the node
list, the published epoch and settings).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshhealth.model import HealthReport
from meshhealth.probe.assignment import FULL_MESH_ALWAYS, build_plan
from meshhealth.wire import keys
from meshhealth.wire.health import decode_health_report
from tests.agent_cluster import AgentCluster, AgentProcess, wait_for
from tests.etcd_helpers import etcdctl_get_prefix
from tests.plugins.etcd_server import EtcdServer

N_AGENTS = 20
K = 3
INTERVAL_S = 3.0  # epochs of 6 x 3 s = 18 s: several rounds per epoch even under load


@pytest.fixture
def planned(tmp_path: Path, etcd_server: EtcdServer) -> Iterator[AgentCluster]:
    with AgentCluster(
        tmp_path,
        etcd_server.endpoint,
        interval_s=INTERVAL_S,
        timeout_s=2.0,
        extra_args=["--probe-targets", str(K)],
    ) as cluster:
        yield cluster


def _reports(etcd: EtcdServer) -> dict[str, HealthReport]:
    found = etcdctl_get_prefix(etcd, keys.health_prefix("c1"))
    reports = [decode_health_report(value) for value in found.values()]
    return {report.node: report for report in reports}


def _one_epoch_of_everyone(reports: dict[str, HealthReport]) -> bool:
    """Every agent published a round of one and the same epoch, planned over all nodes."""
    plans = [report.plan for report in reports.values()]
    return (
        len(reports) == N_AGENTS
        and all(plan is not None and plan.nodes == N_AGENTS for plan in plans)
        and len({plan.epoch for plan in plans if plan is not None}) == 1
    )


def _status(agent: AgentProcess) -> dict[str, Any]:
    code, doc = agent.admin("GET", "/v1/status", timeout_s=30.0)
    assert code == 200
    return doc


def _status_nodes(agent: AgentProcess) -> list[str]:
    return sorted(node["name"] for node in _status(agent)["nodes"])


def test_twenty_agents_probe_three_each_and_every_node_has_three_probers(
    planned: AgentCluster, etcd_server: EtcdServer
) -> None:
    names = [f"n{i:02d}" for i in range(N_AGENTS)]
    agents = [planned.start(name, wait=False) for name in names]
    for agent in agents:
        planned.wait_admin(agent, timeout_s=240.0)

    reports, _ = wait_for(
        lambda: _reports(etcd_server),
        _one_epoch_of_everyone,
        300.0,
        what="20 health reports of one epoch, each planned over 20 nodes",
        interval_s=0.5,
    )

    plan_info = next(iter(reports.values())).plan
    assert plan_info is not None
    assert (plan_info.k, plan_info.rotation_rounds, plan_info.full_mesh) == (K, 6, False)
    assert plan_info.subset and plan_info.targets_per_node == K
    # What any reader of etcd can compute from the published settings alone.
    plan = build_plan(
        [("c1", name) for name in names],
        plan_info.epoch,
        plan_info.k,
        full_mesh_max_nodes=FULL_MESH_ALWAYS
        if plan_info.full_mesh
        else plan_info.full_mesh_max_nodes,
    )
    probers: Counter[str] = Counter()
    for name, report in reports.items():
        probed = {target.node for target in report.targets}
        assert name in probed, f"{name} does not probe itself"
        others = probed - {name}
        assert len(others) == K, f"{name} probes {sorted(others)}"
        assert others == {node for _, node in plan.targets_of(("c1", name))}
        probers.update(others)
    assert set(probers) == set(names)
    assert min(probers.values()) >= K, probers

    # The agent's own status lists its direct targets (K and itself) and its plan.
    for agent in agents[:3]:
        nodes, _ = wait_for(
            lambda agent=agent: _status_nodes(agent),
            lambda found: len(found) == K + 1,
            120.0,
            what=f"{agent.name}'s status lists {K} targets and itself",
        )
        assert agent.name in nodes
        plan_doc = _status(agent)["probe_plan"]
        assert (plan_doc["k"], plan_doc["targets"], plan_doc["nodes"]) == (K, K, N_AGENTS)
        assert plan_doc["subset"] is True
        samples = agent.metrics_text(timeout_s=30.0)
        assert re.search(rf"^meshhealth_probe_plan_targets {K}(\.0)?$", samples, re.M)
        assert re.search(rf"^meshhealth_probe_plan_nodes {N_AGENTS}(\.0)?$", samples, re.M)

    # What `meshhealth status` prints (one agent: the CLI is slow to start under load).
    text = agents[0].status_cli(timeout_s=120.0).stdout
    assert re.search(rf"^Direct targets:\s+\d+/{K + 1} reachable", text, re.M), text
    assert f"Probing {K} of {N_AGENTS} nodes (k={K}, epoch " in text

    # The matrix (as the agent reads it from etcd): K + 1 assigned cells per row, the
    # rest unassigned, never failed; every node has at least K observers.
    def matrix() -> dict[str, Any]:
        code, doc = agents[0].admin("GET", "/v1/matrix", timeout_s=20.0)
        assert code == 200
        return doc

    def covered(doc: dict[str, Any]) -> bool:
        return len(doc["rows"]) == N_AGENTS and all(node["observers"] >= K for node in doc["nodes"])

    doc, _ = wait_for(matrix, covered, 180.0, what=f"every node with {K} observers")
    # (Probes may time out on a machine this loaded: failures are allowed, but a cell
    # is failed only where the source was assigned, and unassigned everywhere else.)
    fresh = [row for row in doc["rows"] if not row["stale"]]
    assert fresh
    for row in fresh:
        states = Counter(cell["state"] for cell in row["cells"])
        assert states["unassigned"] == N_AGENTS - K - 1, (row["name"], states)
        assigned = sum(n for state, n in states.items() if state != "unassigned")
        assert assigned == K + 1, states  # reachable, suspect, unreachable or unknown
        assert row["plan"]["subset"] is True
    assert doc["summary"]["unassigned"] == len(fresh) * (N_AGENTS - K - 1)
    assert any(
        line.startswith(f"Coverage:  subset probing (k={K}") for line in doc["summary"]["lines"]
    )
