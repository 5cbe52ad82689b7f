"""End to end: real agents (loopback mode) on a real etcd elect one aggregator, and every
agent's `status` shows the cluster verdict and the findings from its summary; a node
that stops shows up as a finding everywhere (status text and JSON, metrics), and the
finding (and its metric series) ends when the node comes back."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshhealth.model import HealthReport, PathHealth, ProbeStatus, TargetHealth
from meshhealth.wire import keys
from meshhealth.wire.health import encode_health_report
from tests.agent_cluster import AgentCluster, AgentProcess, put_entries, wait_for
from tests.plugins.etcd_server import EtcdServer

NAMES = ("n1", "n2", "n3")
# Long enough that a stopped agent's node stays registered (its lease alive) while the
# others see it fail: the finding is about a node that is there but does not answer.
LEASE_TTL_S = 90
CONVERGE_S = 60  # generous: load on the test machine reaches 40


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: EtcdServer) -> Iterator[AgentCluster]:
    with AgentCluster(
        tmp_path, etcd_server.endpoint, interval_s=1.0, lease_ttl_s=LEASE_TTL_S
    ) as agents:
        yield agents


def verdict(doc: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = doc["cluster_health"][0]
    return first


def metric_value(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = rf"^{name}{{{re.escape(wanted)}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else None


def _stop(agent: AgentProcess, signum: int) -> None:
    """SIGSTOP / SIGCONT the agent and its health endpoint: the node answers ICMP (the
    kernel) and nothing else, as a hung node's agent does."""
    for pid in agent.responder_children():
        os.kill(pid, signum)
    agent.signal(signum)


def test_every_agent_shows_the_verdict_and_findings_from_one_summary(
    cluster: AgentCluster,
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
    docs = {agent.name: agent.status_json() for agent in agents}
    aggregator = verdict(docs["n1"])["aggregator"]
    assert {verdict(doc)["aggregator"] for doc in docs.values()} == {aggregator}
    assert all(doc["findings"] == [] for doc in docs.values())

    # Who reads what: one agent aggregates (and writes the summary), the others only read.
    metrics = {agent.name: agent.metrics_text() for agent in agents}
    holders = [
        n for n, text in metrics.items() if metric_value(text, "meshhealth_cluster_aggregator") == 1
    ]
    assert [f"c1/{name}" for name in holders] == [aggregator]
    for name, text in metrics.items():
        writes = metric_value(text, "meshhealth_kvstore_writes_total", key_kind="summary")
        assert (writes or 0) > 0 if name in holders else not writes, (name, writes)
        assert metric_value(text, "meshhealth_cluster_nodes", cluster="c1", state="reachable") == 3

    # A report nobody registered (no ip entry) is in no agent's matrix, as in no summary.
    ok = {p: PathHealth(ProbeStatus.OK, 0.001, 0.0) for p in ("node/icmp", "node/http")}
    forged = HealthReport("ghost", "c1", time.time(), 1.0, (TargetHealth("c1", "n1", ok),))
    put_entries(
        cluster.etcd_endpoint,
        [(keys.health_key("c1", "ghost"), encode_health_report(forged))],
        None,
    )
    code, matrix = agents[0].admin("GET", "/v1/matrix")
    assert code == 200 and [r["name"] for r in matrix["rows"]] == list(NAMES), matrix["rows"]

    victim = next(a for a in agents if f"c1/{a.name}" != aggregator)
    watchers = [a for a in agents if a is not victim]
    text = watchers[0].status_cli()
    # Right after convergence one node may still have only one observer's report in (the
    # summary then says "1+ observers each, median 2"); both forms are the product's text.
    assert re.search(
        r"Cluster health:\s+3/3 reachable \((\d+ observers? each|\d\+ observers each, median \d+)\)"
        r"\s+\(aggregator c1/n\d, updated ",
        text.stdout,
    ), text.stdout

    _stop(victim, signal.SIGSTOP)
    try:
        culprit = f"c1/{victim.name}"
        node_kinds = ("agent-down", "node-down", "node-isolated")
        for agent in watchers:
            # While only one observer's failures are in, diagnosis gives a `path` finding
            # (held back from the summary while it is new); the node-level finding
            # follows once both observers' reports say so.
            doc, _ = wait_for(
                agent.status_json,
                lambda doc: (
                    any(culprit in f["nodes"] and f["kind"] in node_kinds for f in doc["findings"])
                    and (verdict(doc)["reachable"], verdict(doc)["unreachable"]) == (2, 1)
                ),
                CONVERGE_S,
                what=f"{agent.name} shows a finding against {culprit}",
            )
            assert verdict(doc)["source"] == "summary"
            assert verdict(doc)["total"] == 3
            finding = next(
                f for f in doc["findings"] if culprit in f["nodes"] and f["kind"] in node_kinds
            )
            kind = finding["kind"]
            out = agent.status_cli().stdout
            assert re.search(r"Cluster health:\s+2/3 reachable .*1 unreachable", out), out
            assert re.search(rf"Finding:\s+{finding['kind']} {culprit} \(confidence", out), out
            wait_for(
                agent.metrics_text,
                lambda text, kind=kind: (
                    metric_value(
                        text, "meshhealth_finding", kind=kind, node=culprit, expected="false"
                    )
                    == 1
                ),
                CONVERGE_S,
                what=f"{agent.name} exports meshhealth_finding for {culprit}",
            )
    finally:
        _stop(victim, signal.SIGCONT)

    # The node is back: the finding ends, and so does its metric series.
    for agent in agents:
        wait_for(
            agent.status_json,
            lambda doc: doc["findings"] == [] and verdict(doc)["reachable"] == 3,
            CONVERGE_S,
            what=f"{agent.name} shows the finding ended",
        )
        wait_for(
            agent.metrics_text,
            lambda text: "meshhealth_finding{" not in text,
            CONVERGE_S,
            what=f"{agent.name} removed the finding's series",
        )
