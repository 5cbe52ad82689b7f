"""End to end: real `meshhealth agent` processes (loopback mode) on a real etcd.

Each test starts its agents with tests/agent_cluster.py (unique 127.<k>.x.y addresses,
sockets in tmp_path, every process stopped by PID at the end) and reads what users read:
`meshhealth status` (a subprocess), the admin socket, the Prometheus endpoint, etcd.
Synchronisation is always a poll with a deadline.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshhealth.wire import keys
from meshhealth.wire.ip_entry import decode_ip_entry
from meshhealth.wire.retained import decode_retained
from tests.agent_cluster import (
    AgentCluster,
    AgentProcess,
    all_paths_ok,
    dead_target_entries,
    netns_etcd,
    node_of,
    path_status,
    pid_alive,
    put_entries,
    wait_for,
)
from tests.etcd_helpers import etcdctl_get_prefix
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import free_loopback_port
from tests.plugins.netns import NetnsFactory
from tests.repo_paths import REPO_ROOT

NAMES = ("n1", "n2", "n3")


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: EtcdServer) -> Iterator[AgentCluster]:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as c:
        yield c


def _keys_of(etcd: EtcdServer, cluster: str, node: str) -> list[str]:
    """Every key in etcd that belongs to `node` (its node entry and its ip entries)."""
    found = etcdctl_get_prefix(etcd, "meshhealth/state/")
    out = []
    for key, value in found.items():
        parsed = keys.parse_key(key)
        if parsed.cluster != cluster:
            continue
        owner = decode_ip_entry(value).node if parsed.kind == keys.KeyKind.IP else parsed.name
        if owner == node:
            out.append(key)
    return sorted(out)


def _start_three(cluster: AgentCluster) -> list[AgentProcess]:
    agents = [cluster.start(name) for name in NAMES]
    for agent in agents:
        wait_for(
            agent.status_json,
            lambda doc: (
                all_paths_ok(doc, NAMES)
                and doc["cluster_health"][0]["source"] == "summary"
                and doc["cluster_health"][0]["reachable"] == 3
            ),
            20,
            what=f"{agent.name} sees 3 nodes with all paths OK, and so does the cluster verdict",
        )
    return agents


# --- a healthy cluster --------------------------------------------------------------


def test_three_agents_status_text_json_and_metrics(cluster: AgentCluster) -> None:
    agents = _start_three(cluster)
    for agent in agents:
        text = agent.status_cli()
        assert text.returncode == 0, text.stderr
        out = text.stdout
        assert out.startswith("Probe time:")
        assert re.search(r"Cluster health:\s+3/3 reachable", out), out
        assert f"c1/{agent.name} (localhost):" in out
        for other in agents:
            assert f"Host connectivity to {other.node_ip}:" in out
            assert f"Endpoint connectivity to {other.health_ip}:" in out
        assert len(re.findall(r"ICMP to stack:\s+OK, RTT=", out)) == 6
        assert len(re.findall(r"HTTP to agent:\s+OK, RTT=", out)) == 6

        doc = agent.status_json()
        assert doc["v"] == 1
        assert doc["local"] == {
            "cluster": "c1",
            "name": agent.name,
            "node_ip": agent.node_ip,
            "health_ip": agent.health_ip,
        }
        assert doc["probe_interval_s"] == 1.0
        assert doc["etcd"]["up"] is True
        assert doc["etcd"]["last_error"] is None
        assert doc["summary"] == {
            "reachable": 3,
            "unreachable": 0,
            "suspect": 0,
            "unknown": 0,
            "total": 3,
        }
        assert doc["nodes"][0]["name"] == agent.name and doc["nodes"][0]["is_local"]
        for node in doc["nodes"]:
            assert node["reachable"] is True and node["state"] == "reachable"
            assert node["host_state"] == node["health_endpoint_state"] == "reachable"
            for address in ("host", "health_endpoint"):
                for protocol in ("icmp", "http"):
                    path = node[address]["primary_address"][protocol]
                    assert path["text"] == "OK"
                    assert 0 < path["latency_s"] < 0.5
                    assert path["last_probed"] is not None

    # Prometheus: one status series per target and path, reachable = 1.
    metrics = agents[0].metrics_text()
    for other in agents:
        for target_type in ("node", "endpoint"):
            for protocol in ("icmp", "http"):
                series = (
                    'meshhealth_node_connectivity_status{source_cluster="c1",source_node="n1",'
                    f'target_cluster="c1",target_node="{other.name}",target_type="{target_type}",'
                    f'protocol="{protocol}",family="ipv4",status="reachable"}} 1'
                )
                assert series in metrics, series


def test_status_probe_runs_a_fresh_round(cluster: AgentCluster) -> None:
    agent = cluster.start("n1")
    first, _ = wait_for(
        agent.status_json, lambda d: d["round"]["completed"] >= 1, 10, what="first round"
    )
    done = agent.status_cli("--probe", "-o", "json")
    assert done.returncode == 0, done.stderr
    fresh = json.loads(done.stdout)
    assert fresh["round"]["completed"] > first["round"]["completed"]
    assert fresh["summary"]["reachable"] == 1


# --- the troubleshooting stories ----------------------------------------------------


def test_sigstop_shows_http_timing_out_with_icmp_ok_then_recovers(cluster: AgentCluster) -> None:
    agents = _start_three(cluster)
    stopped = agents[2]
    stopped.signal(signal.SIGSTOP)
    try:

        def shows_agent_stopped(doc: dict[str, Any]) -> bool:
            return (
                path_status(doc, "n3", "host", "http") == "timeout"
                and path_status(doc, "n3", "host", "icmp") == "ok"
                # the endpoint is a separate process, still running: it answers
                and path_status(doc, "n3", "health_endpoint", "icmp") == "ok"
            )

        for observer in agents[:2]:
            doc, _ = wait_for(
                observer.status_json, shows_agent_stopped, 15, what=f"{observer.name} sees n3"
            )
            assert doc["summary"]["reachable"] == 2
            text = observer.status_cli().stdout
            block = text.split("c1/n3:")[1].split("Endpoint connectivity")[0]
            assert re.search(r"ICMP to stack:\s+OK, RTT=", block), text
            assert re.search(r"HTTP to agent:\s+Connection timed out", block), text
            # The cluster verdict (the aggregator's summary) follows by a debounce.
            wait_for(
                lambda obs=observer: obs.status_cli().stdout,
                lambda out: re.search(r"Cluster health:\s+2/3 reachable", out) is not None,
                30,
                what=f"{observer.name}'s cluster verdict shows n3 down",
            )
    finally:
        stopped.signal(signal.SIGCONT)
    for observer in agents[:2]:
        wait_for(
            observer.status_json, lambda d: all_paths_ok(d, NAMES), 15, what="recovery after CONT"
        )


def test_sigkill_keeps_the_node_as_agent_down_then_drops_it(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    """A crashed agent does not make its node vanish: after its lease expires the node
    stays in every view as agent-down (its NodeIP still answers ICMP, nothing answers
    HTTP) for the retention time, then leaves with a log line and a metric."""
    ttl_s, retention_s = 3, 8.0
    with AgentCluster(
        tmp_path,
        etcd_server.endpoint,
        lease_ttl_s=ttl_s,
        extra_args=["--agent-down-retention", str(retention_s)],
    ) as cluster:
        agents = _start_three(cluster)
        victim = agents[2]
        responders = victim.responder_children()
        assert len(responders) == 1, responders
        assert keys.retained_key("c1", "n3") in _keys_of(etcd_server, "c1", "n3")

        victim.signal(signal.SIGKILL)
        victim.proc.wait(5)  # type: ignore[union-attr]
        killed_at = time.monotonic()

        # The orphaned health endpoint notices its parent is gone and exits.
        wait_for(
            lambda: [pid for pid in responders if pid_alive(pid)],
            lambda alive: not alive,
            5,
            what="orphaned responder exits",
        )

        def agent_down(doc: dict[str, Any]) -> bool:
            node = node_of(doc, "n3")
            return (
                node is not None
                and "agent_down_since" in node
                and node["health_endpoint"] is None  # gone with its agent: not probed
                and path_status(doc, "n3", "host", "icmp") == "ok"
                and path_status(doc, "n3", "host", "http") not in ("ok", "unknown", None)
                # HTTP first turns suspect, then (the suspicion time later) unreachable
                and doc["summary"]["unreachable"] == 1
                and doc["summary"]["total"] == 3
            )

        # Lease expiry (TTL + etcd's ~0.5 s lease check) + a round + the suspicion time +
        # a margin for slow CI.
        for observer in agents[:2]:
            wait_for(
                observer.status_json, agent_down, ttl_s + 15, what=f"{observer.name}: n3 agent-down"
            )
        # the lease's entries are gone, the retained one stays, stamped
        left = _keys_of(etcd_server, "c1", "n3")
        assert left == [keys.retained_key("c1", "n3")]
        stamped = decode_retained(
            etcdctl_get_prefix(etcd_server, keys.retained_prefix("c1"))[left[0]]
        )
        assert stamped.down_since is not None and stamped.node.node_ip == victim.node_ip
        text = agents[0].status_cli().stdout
        assert re.search(r"c1/n3 \(agent down since \S+: lease expired\):", text), text
        assert "meshhealth_agent_down_nodes 1" in agents[0].metrics_text()

        # After the retention time it leaves every view, and the keeper deletes the entry.
        for observer in agents[:2]:
            wait_for(
                observer.status_json,
                lambda d: node_of(d, "n3") is None,
                retention_s + 15,
                what=f"{observer.name} drops n3 after the retention",
            )
        dropped_after_s = time.monotonic() - killed_at
        assert dropped_after_s >= retention_s
        wait_for(
            lambda: _keys_of(etcd_server, "c1", "n3"), lambda k: k == [], 10, what="entry deleted"
        )
        assert "n3 dropped: agent down for" in agents[0].log_text()
        metrics = agents[0].metrics_text()
        assert "meshhealth_agent_down_dropped_total 1" in metrics
        assert "meshhealth_agent_down_nodes 0" in metrics
        wait_for(
            agents[0].metrics_text,
            lambda text: 'target_node="n3"' not in text,
            5,
            what="n3's metric series removed",
        )

        # Restart n3 with the same addresses: the endpoint binds (no orphan holds it).
        cluster.spawn(victim)
        cluster.wait_admin(victim)
        wait_for(
            victim.status_json,
            lambda d: all_paths_ok(d, NAMES),
            20,
            what="restarted n3 with a working endpoint",
        )
        assert "address already in use" not in victim.log_text().lower()
        print(f"n3 agent-down, then dropped {dropped_after_s:.2f}s after SIGKILL")


def test_sigterm_leaves_at_once_and_is_not_retained(
    cluster: AgentCluster, etcd_server: EtcdServer
) -> None:
    agents = _start_three(cluster)
    cluster.stop(agents[2])
    for observer in agents[:2]:
        wait_for(
            observer.status_json,
            lambda d: node_of(d, "n3") is None,
            5,
            what=f"{observer.name} drops n3 after a clean leave",
        )
    assert _keys_of(etcd_server, "c1", "n3") == []


def test_etcd_restart_agents_keep_serving_and_re_register(
    cluster: AgentCluster, etcd_server: EtcdServer
) -> None:
    agents = _start_three(cluster)
    answered: list[float] = []
    failures: list[str] = []
    stop = threading.Event()

    def hammer() -> None:  # the admin API must answer all the while
        while not stop.is_set():
            for agent in agents:
                start = time.monotonic()
                try:
                    code, _ = agent.admin("GET", "/v1/status", timeout_s=2.0)
                except OSError as exc:
                    failures.append(f"{agent.name}: {exc!r}")
                else:
                    if code != 200:
                        failures.append(f"{agent.name}: HTTP {code}")
                answered.append(time.monotonic() - start)
            time.sleep(0.05)

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        etcd_server.kill()
        for agent in agents:
            wait_for(
                lambda agent=agent: agent.admin("GET", "/v1/healthz")[1],
                lambda doc: doc["etcd"]["up"] is False,
                15,
                what=f"{agent.name} notices etcd down",
            )
        down_text = agents[0].status_cli().stdout
        assert "etcd unreachable since" in down_text, down_text
        etcd_server.start()  # same data dir and ports
        for agent in agents:
            wait_for(
                lambda agent=agent: agent.admin("GET", "/v1/healthz")[1],
                lambda doc: doc["etcd"]["up"] is True and doc["registered"] is True,
                20,
                what=f"{agent.name} back on etcd",
            )
        for name in NAMES:
            wait_for(
                lambda name=name: _keys_of(etcd_server, "c1", name),
                lambda found, name=name: keys.node_key("c1", name) in found and len(found) >= 3,
                20,
                what=f"{name}'s keys back in etcd",
            )
        for agent in agents:
            wait_for(
                agent.status_json,
                lambda d: all_paths_ok(d, NAMES) and d["etcd"]["up"],
                15,
                what="healthy after the etcd restart",
            )
    finally:
        stop.set()
        thread.join()
    assert failures == []
    assert len(answered) > 10
    assert max(answered) < 1.0


# --- admin API responsiveness -------------------------------------------------------


def _latencies(agent: AgentProcess, path: str, count: int) -> list[float]:
    out = []
    for _ in range(count):
        start = time.monotonic()
        code, _ = agent.admin("GET", path, timeout_s=2.0)
        out.append(time.monotonic() - start)
        assert code == 200
    return out


@pytest.mark.netns
def test_admin_api_fast_during_round_of_blackholed_targets(
    tmp_path: Path, netns_factory: NetnsFactory
) -> None:
    dead = 48
    lab = netns_factory.make_lab(live=0, dead=dead * 2)
    with netns_etcd(lab.client) as etcd:
        items = dead_target_entries("c1", lab.dead[:dead], lab.dead[dead:])
        put_entries(etcd.endpoint, items, lab.client)
        with AgentCluster(
            tmp_path, etcd.endpoint, interval_s=2.0, timeout_s=1.0, netns=lab.client
        ) as cluster:
            agent = cluster.start("n1", "--full-mesh")  # every dead node in each round
            doc, _ = wait_for(
                agent.status_json,
                lambda d: d["summary"]["total"] == dead + 1 and d["round"]["completed"] >= 1,
                15,
                what="a round over the dead targets",
            )
            # A failure makes a path suspect first; unreachable after the suspicion time.
            assert doc["summary"]["suspect"] + doc["summary"]["unreachable"] == dead
            assert path_status(doc, "dead0", "host", "icmp") == "timeout"
            assert path_status(doc, "dead0", "health_endpoint", "http") == "timeout"
            # Measure while rounds full of timeouts run (each takes ~1.5 s of a 2 s cycle).
            samples: list[float] = []
            busy = 0
            deadline = time.monotonic() + 6
            while time.monotonic() < deadline:
                samples += _latencies(agent, "/v1/status", 5)
                samples += _latencies(agent, "/v1/healthz", 5)
                status = agent.admin("GET", "/v1/status")[1]
                busy += status["round"]["running"]
            assert busy > 0, "no sample was taken while a round ran"
            samples.sort()
            p99 = samples[int(len(samples) * 0.99) - 1]
            print(
                f"admin API during dead rounds: n={len(samples)} "
                f"p50={statistics.median(samples) * 1000:.1f}ms p99={p99 * 1000:.1f}ms"
            )
            assert p99 < 0.2


def test_admin_api_answers_at_once_without_etcd(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_loopback_port()}"  # nobody listens there
    with AgentCluster(tmp_path, closed) as cluster:
        agent = cluster.spawn(cluster.make("n1"))
        doc = cluster.wait_admin(agent, timeout_s=10)
        first_answer_s = time.monotonic() - agent.started_at
        # Python start-up and imports are most of it; the bench measures the figure.
        assert first_answer_s < 5, first_answer_s
        assert doc["status"] == "ok"
        assert doc["etcd"]["up"] is False
        assert doc["registered"] is False
        text = agent.status_cli()
        assert text.returncode == 0
        assert "etcd unreachable" in text.stdout
        assert "c1/n1 (localhost):" in text.stdout


# --- shutdown and refusals ----------------------------------------------------------


def test_sigterm_exits_0_removes_socket_and_keys(
    cluster: AgentCluster, etcd_server: EtcdServer
) -> None:
    n1 = cluster.start("n1")
    n2 = cluster.start("n2")
    wait_for(
        lambda: _keys_of(etcd_server, "c1", "n2"),
        lambda found: len(found) >= 3,
        10,
        what="n2 registered",
    )
    wait_for(n1.status_json, lambda d: node_of(d, "n2") is not None, 10, what="n1 sees n2")
    responders = n2.responder_children()
    n2.signal(signal.SIGTERM)
    assert n2.proc is not None
    assert n2.proc.wait(10) == 0
    assert not Path(n2.socket).exists()
    assert _keys_of(etcd_server, "c1", "n2") == []  # revoked at once, not after the TTL
    assert not [pid for pid in responders if pid_alive(pid)]
    # The peer drops it without waiting for a lease to expire (default TTL 15 s).
    wait_for(n1.status_json, lambda d: node_of(d, "n2") is None, 5, what="n1 drops n2")
    assert "Traceback" not in n2.log_text()


def test_bad_flag_exits_2_with_one_line(tmp_path: Path) -> None:
    cases = [
        ["agent", "--node-ip", "127.0.0.1", "--health-mode", "none", "--interval", "soon"],
        ["agent", "--health-mode", "none"],
        ["agent", "--node-ip", "127.0.0.1", "--health-mode", "loopback", "--health-ip", "10.1.1.1"],
    ]
    for args in cases:
        done = subprocess.run(
            [sys.executable, "-m", "meshhealth", *args],
            capture_output=True,
            text=True,
            timeout=20,
            cwd=REPO_ROOT,
            check=False,
        )
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("meshhealth agent: --"), lines
    # An unknown flag is argparse's: usage, then one error line naming it; exit 2.
    done = subprocess.run(
        [sys.executable, "-m", "meshhealth", "agent", "--bogus"],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --bogus" in done.stderr.strip().splitlines()[-1]


def test_second_agent_with_same_name_or_socket_is_refused(
    cluster: AgentCluster, etcd_server: EtcdServer
) -> None:
    first = cluster.start("n1")
    wait_for(
        lambda: first.admin("GET", "/v1/healthz")[1], lambda d: d["registered"], 10, what="reg"
    )
    # Same node name, another socket and addresses.
    twin = cluster.make("n1-twin")
    twin.argv[twin.argv.index("--node") + 1] = "n1"
    cluster.spawn(twin)
    assert twin.proc is not None
    assert twin.proc.wait(20) != 0
    assert "already registered" in twin.log_text(), twin.log_text()
    assert "Traceback" not in twin.log_text()
    # The first agent is untouched.
    assert first.admin("GET", "/v1/healthz")[0] == 200
    assert keys.node_key("c1", "n1") in _keys_of(etcd_server, "c1", "n1")

    # Same socket path as a live agent.
    thief = cluster.make("n9")
    thief.argv[thief.argv.index("--socket") + 1] = first.socket
    cluster.spawn(thief)
    assert thief.proc is not None
    assert thief.proc.wait(20) == 2
    assert "refusing to start" in thief.log_text(), thief.log_text()
    assert Path(first.socket).exists()
    assert first.admin("GET", "/v1/healthz")[0] == 200


def test_the_etcd_password_is_not_inherited_by_the_agents_children(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    """MESHHEALTH_ETCD_PASSWORD is read into the agent's configuration and taken out of
    its environment: the health endpoint's process (and `ip`) never see it."""
    secret = "s3cret-password-for-the-test"
    with AgentCluster(
        tmp_path, etcd_server.endpoint, env={"MESHHEALTH_ETCD_PASSWORD": secret}
    ) as cluster:
        agent = cluster.start("n1")
        children, _ = wait_for(
            agent.responder_children, bool, 10, what="the health endpoint's process"
        )
        for pid in children:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert secret.encode() not in environ
            assert b"MESHHEALTH_ETCD_PASSWORD=" not in environ
