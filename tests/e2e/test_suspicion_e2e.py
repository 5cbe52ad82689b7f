"""Suspicion with real agents on loopback (one etcd, three agents, interval 1 s): a
failed probe makes a path `suspect`, never `unreachable` at once; a node whose agent
really stops answering turns `unreachable` within the suspicion floor .. ceiling; the
published report carries the verdict."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshhealth.timefmt import parse_iso_time
from tests.agent_cluster import AgentCluster, AgentProcess, all_paths_ok, node_of, wait_for
from tests.plugins.etcd_server import EtcdServer

NAMES = ("n1", "n2", "n3")
INTERVAL_S = 1.0
# 3 nodes: floor = 0.5 x max(1, log10 3) x 1 s = 0.5 s, ceiling 6 x that = 3 s.
FLOOR_S, CEILING_S = 0.5, 3.0


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: EtcdServer) -> Iterator[AgentCluster]:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=INTERVAL_S, timeout_s=0.5) as c:
        yield c


def _start_three(cluster: AgentCluster) -> list[AgentProcess]:
    agents = [cluster.start(name) for name in NAMES]
    for agent in agents:
        wait_for(
            agent.status_json, lambda d: all_paths_ok(d, NAMES), 30, what=f"{agent.name} healthy"
        )
    return agents


def _http(doc: dict[str, Any], name: str) -> dict[str, Any]:
    node = node_of(doc, name)
    assert node is not None, doc
    path: dict[str, Any] = node["host"]["primary_address"]["http"]
    return path


def test_one_failed_probe_is_suspect_not_unreachable(cluster: AgentCluster) -> None:
    n1, _, n3 = _start_three(cluster)
    seen: list[dict[str, Any]] = []

    def failing(doc: dict[str, Any]) -> bool:
        seen.append(_http(doc, "n3"))
        return _http(doc, "n3")["status"] != "ok"

    n3.signal(signal.SIGSTOP)  # its agent stops answering HTTP: one probe fails
    try:
        doc, _ = wait_for(
            n1.status_json, failing, 15, what="n1 sees n3's HTTP fail", interval_s=0.05
        )
    finally:
        n3.signal(signal.SIGCONT)
    first = _http(doc, "n3")
    assert first["consecutive_failures"] >= 1
    if first["consecutive_failures"] == 1:
        assert first["state"] == "suspect", first
    node = node_of(doc, "n3")
    assert node is not None and node["state"] in ("suspect", "unreachable")
    text = n1.status_cli().stdout

    def recovered(doc: dict[str, Any]) -> bool:
        seen.append(_http(doc, "n3"))
        return all_paths_ok(doc, NAMES)

    wait_for(n1.status_json, recovered, 20, what="n3 recovers", interval_s=0.05)
    # never unreachable from a single failure, whenever n1 was asked
    for path in seen:
        if path["consecutive_failures"] < 2:
            assert path["state"] != "unreachable", path
    assert "Cluster health:" in text


def test_a_stopped_agent_is_unreachable_within_the_suspicion_time(
    cluster: AgentCluster,
) -> None:
    n1, n2, n3 = _start_three(cluster)
    n3.signal(signal.SIGSTOP)
    try:
        suspect_doc, _ = wait_for(
            n1.status_json,
            lambda d: _http(d, "n3")["state"] in ("suspect", "unreachable"),
            15,
            what="n3's HTTP failing",
            interval_s=0.05,
        )
        done, _ = wait_for(
            n1.status_json,
            lambda d: _http(d, "n3")["state"] == "unreachable",
            CEILING_S + 4 * INTERVAL_S + 20,  # generous: the machine is loaded
            what="n3's HTTP unreachable",
        )
        path = _http(done, "n3")
        # From the first failure (the failing run's start) to unreachable: at least
        # the floor and two failures, at most the ceiling plus one interval (it turns
        # at the probe or timer after the time is up); stamps are whole seconds.
        first_failure_s = parse_iso_time(path["last_success"]) + INTERVAL_S
        became_s = parse_iso_time(path["state_since"])
        took_s = became_s - first_failure_s
        assert FLOOR_S - 2.0 <= took_s <= CEILING_S + INTERVAL_S + 2.0, (path, suspect_doc)
        assert path["consecutive_failures"] >= 2
        assert "Connection timed out" in n1.status_cli().stdout
        # The published report carries the verdict: the matrix n2 reads from etcd.
        code, matrix = n2.admin("GET", "/v1/matrix")
        assert code == 200, matrix

        def published(doc: tuple[int, dict[str, Any]]) -> bool:
            rows = {r["name"]: r for r in doc[1]["rows"]}
            cells = {c["name"]: c for c in rows["n1"]["cells"]}
            http = cells["n3"]["paths"].get("node/http", {})
            return http.get("state") in ("suspect", "unreachable")

        matrix_doc, _ = wait_for(
            lambda: n2.admin("GET", "/v1/matrix"), published, 20, what="n1's verdict in etcd"
        )
        assert "n3" in json.dumps(matrix_doc[1])
    finally:
        n3.signal(signal.SIGCONT)
    wait_for(n1.status_json, lambda d: all_paths_ok(d, NAMES), 20, what="n3 recovers")
