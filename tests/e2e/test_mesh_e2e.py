"""End to end: two clusters, each with its own etcd and real agents (loopback mode), meshed.

lab1: n1, n2 on etcd A, meshed with `--mesh lab2=URL_B`; lab2: n1 with `--mesh lab1=URL_A`,
n2 with `--mesh-dir` holding a Cilium-style `lab1` file. The story, in one test (agents
take a while to start): every agent sees and probes all four nodes; `meshhealth matrix
--etcd` from either etcd and `meshhealth status --matrix` show the right cells; the
health-entry writes stay flat in a steady cluster; lab2's etcd stopped -> lab1 keeps
probing and shows lab2 as etcd_down (status and metrics); lab2's etcd back -> up again;
lab2/n2's agent killed -> lab1 keeps it in view as agent-down.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from meshhealth import defaults
from tests.agent_cluster import AgentCluster, AgentProcess, all_paths_ok, wait_for
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import LocalEtcd
from tests.repo_paths import REPO_ROOT

INTERVAL_S = 1.0
NAMES = ("n1", "n2")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=REPO_ROOT,
    )


def _matrix(endpoint: str, *extra: str) -> dict[str, Any]:
    done = _cli("matrix", "--etcd", endpoint, "-o", "json", *extra)
    if done.returncode != 0:
        raise ValueError(f"matrix exit {done.returncode}: {done.stderr.strip()}")
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _cells(doc: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(source, target) as `cluster/node` -> cell state."""
    return {
        (f"{row['cluster']}/{row['name']}", f"{cell['cluster']}/{cell['name']}"): cell["state"]
        for row in doc["rows"]
        for cell in row["cells"]
    }


HEALTH_WRITES = 'meshhealth_kvstore_writes_total{key_kind="health"}'
ALL = [f"{c}/{n}" for c in ("lab1", "lab2") for n in NAMES]


def _all_reachable(doc: dict[str, Any], sources: list[str]) -> bool:
    cells = _cells(doc)
    wanted = {(s, t) for s in sources for t in ALL}
    return set(cells) == wanted and all(cells[k] == "reachable" for k in wanted)


def _metric(agent: AgentProcess, name: str) -> float:
    pattern = re.compile(rf"^{re.escape(name)} ([0-9.e+-]+)$", re.MULTILINE)
    match = pattern.search(agent.metrics_text())
    return float(match.group(1)) if match else 0.0


def _cluster_state(doc: dict[str, Any], name: str) -> str | None:
    for cluster in doc.get("clusters", []):
        if cluster["name"] == name:
            state: str = cluster["state"]
            return state
    return None


def other(cluster: str) -> str:
    return "lab2" if cluster == "lab1" else "lab1"


def test_two_meshed_clusters(
    tmp_path: Path, etcd_server: EtcdServer, second_etcd_server: LocalEtcd
) -> None:
    started = time.monotonic()
    url_a, url_b = etcd_server.endpoint, second_etcd_server.endpoint
    mesh_dir = tmp_path / "mesh"
    mesh_dir.mkdir()
    (mesh_dir / "lab1").write_text(f"endpoints:\n- {url_a}\n")  # Cilium's clustermesh shape
    (mesh_dir / "ca.crt").write_text("not a cluster\n")  # skipped: not a cluster name
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        AgentCluster(tmp_path / "a", url_a, cluster="lab1", interval_s=INTERVAL_S) as lab1,
        AgentCluster(tmp_path / "b", url_b, cluster="lab2", interval_s=INTERVAL_S) as lab2,
    ):
        while lab2.octet == lab1.octet:
            lab2.octet = (lab2.octet + 1) % 250 or 64
        lab2.http_port = lab1.http_port  # one port for the whole mesh, as in real clusters
        a1 = lab1.start("n1", "--mesh", f"lab2={url_b}")
        a2 = lab1.start("n2", "--mesh", f"lab2={url_b}")
        b1 = lab2.start("n1", "--mesh", f"lab1={url_a}", "--cluster-id", "7")
        b2 = lab2.start("n2", "--mesh-dir", str(mesh_dir), "--cluster-id", "7")
        agents = (a1, a2, b1, b2)

        # Every agent sees and probes all four nodes.
        for agent in agents:
            wait_for(
                agent.status_json,
                lambda doc: (
                    all_paths_ok(doc, list(NAMES) * 2)
                    and {n["cluster"] for n in doc["nodes"]} == {"lab1", "lab2"}
                ),
                30,
                what=f"{agent.cluster}/{agent.name} sees all four nodes healthy",
            )
        doc = a1.status_json()
        assert [(c["name"], c["id"], c["local"], c["state"]) for c in doc["clusters"]] == [
            ("lab1", 195, True, "ok"),
            ("lab2", 7, False, "ok"),
        ]
        assert [f"{n['cluster']}/{n['name']}" for n in doc["nodes"]] == ALL
        text = a1.status_cli().stdout
        assert "Clusters:\n  lab1 (local, id 195):   etcd connected, 2 nodes\n" in text

        # Each cluster's verdict from its own aggregator: every agent follows the summary
        # of its cluster and, through the remote's etcd, of the meshed one.
        for agent in agents:
            expected = [(agent.cluster, "summary", 2), (other(agent.cluster), "summary", 2)]
            doc, _ = wait_for(
                agent.status_json,
                lambda doc, expected=expected: (
                    [(v["cluster"], v["source"], v["reachable"]) for v in doc["cluster_health"]]
                    == expected
                ),
                60,
                what=f"{agent.cluster}/{agent.name} shows both clusters' summaries",
            )
            aggregators = {v["cluster"]: v["aggregator"] for v in doc["cluster_health"]}
            assert aggregators["lab1"].startswith("lab1/")
            assert aggregators["lab2"].startswith("lab2/")
        text = b1.status_cli().stdout
        assert re.search(r"Cluster health:\s+2/2 reachable .*\(aggregator lab2/n\d", text), text
        assert re.search(r"Cluster health lab1:\s+2/2 reachable .*\(aggregator lab1/n\d", text)

        # The matrix, from either etcd, and through the agent (both clusters' rows).
        wait_for(lambda: _matrix(url_a), lambda d: _all_reachable(d, ALL[:2]), 15,
                 what="matrix from lab1's etcd")  # fmt: skip
        wait_for(lambda: _matrix(url_b), lambda d: _all_reachable(d, ALL[2:]), 15,
                 what="matrix from lab2's etcd")  # fmt: skip
        both = _matrix(url_a, "--mesh", f"lab2={url_b}")
        assert _all_reachable(both, ALL)
        via_agent = a1.admin("GET", "/v1/matrix")[1]
        assert _all_reachable(via_agent, ALL)
        matrix_text = a1.status_cli("--matrix")
        assert matrix_text.returncode == 0, matrix_text.stderr
        assert "Reachable:   16/16 cells" in matrix_text.stdout
        (tmp_path / "matrix.txt").write_text(matrix_text.stdout)

        # Steady cluster: health writes stay flat (no change, and the liveness refresh
        # comes once a minute: at most one in these rounds).
        before = {a.socket: _metric(a, HEALTH_WRITES) for a in agents}
        rounds_before = _metric(a1, "meshhealth_rounds_total")
        time.sleep(8 * INTERVAL_S)  # the quantity measured is a rate over real rounds
        rounds = _metric(a1, "meshhealth_rounds_total") - rounds_before
        writes = [_metric(a, HEALTH_WRITES) - before[a.socket] for a in agents]
        print(f"steady: {rounds:g} rounds, health writes per agent {writes}")
        assert rounds >= 6
        for value in writes:
            assert value <= 1

        # lab2's etcd stops: lab1 keeps probing its own nodes, shows lab2 degraded.
        second_etcd_server.kill()
        wait_for(
            a1.status_json,
            lambda doc: _cluster_state(doc, "lab2") == "etcd_down",
            15,
            what="lab1/n1 shows lab2's etcd down",
        )
        wait_for(  # the metrics follow every second
            lambda: _metric(a1, 'meshhealth_etcd_up{cluster="lab2"}'),
            lambda value: value == 0,
            5,
            what="etcd_up{cluster=lab2} = 0",
        )
        assert _metric(a1, 'meshhealth_etcd_up{cluster="lab1"}') == 1
        assert _metric(a1, 'meshhealth_etcd_errors_total{cluster="lab2"}') >= 1
        completed = a1.status_json()["round"]["completed"]
        doc, _ = wait_for(
            a1.status_json,
            lambda d: d["round"]["completed"] >= completed + 2,
            10,
            what="lab1/n1 keeps probing",
        )
        assert _cluster_state(doc, "lab1") == "ok"
        for name in NAMES:
            node = next(n for n in doc["nodes"] if n["cluster"] == "lab1" and n["name"] == name)
            assert node["reachable"], node
        degraded = a1.status_cli().stdout
        assert "lab2 (id 7):   etcd unreachable since" in degraded
        via_agent = a1.admin("GET", "/v1/matrix", timeout_s=10)[1]
        assert [u["cluster"] for u in via_agent["unavailable_clusters"]] == ["lab2"]
        assert _all_reachable(_matrix(url_a), ALL[:2])

        # lab2's etcd back: lab1 sees it up again (retried, no restart).
        second_etcd_server.restart()
        wait_for(
            a1.status_json,
            lambda doc: _cluster_state(doc, "lab2") == "ok",
            20,
            what="lab1/n1 shows lab2 ok again",
        )

        # A crashed agent of lab2: once its lease expires, lab2's keeper (n1) stamps its
        # retained entry and lab1's agents, which only read it, keep lab2/n2 in view as
        # agent-down instead of seeing it vanish.
        b2.signal(signal.SIGKILL)
        b2.proc.wait(5)  # type: ignore[union-attr]

        def remote_agent_down(doc: dict[str, Any]) -> bool:
            return any(
                n["cluster"] == "lab2" and n["name"] == "n2" and "agent_down_since" in n
                for n in doc["nodes"]
            )

        wait_for(
            a1.status_json,
            remote_agent_down,
            defaults.LEASE_TTL_S + 25,
            what="lab1/n1 shows lab2/n2 as agent-down",
        )
    print(f"mesh e2e took {time.monotonic() - started:.1f}s")
