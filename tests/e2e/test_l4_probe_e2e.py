"""L4 probes with real agents on loopback: the UDP echo and TCP connect paths in status
(JSON and text), metrics, the matrix, and a node whose UDP port is elsewhere found as
udp-blocked while its ICMP and HTTP stay OK."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.agent_cluster import AgentCluster, node_of, wait_for
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import free_loopback_port


def _udp(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    node = node_of(doc, name)
    if node is None:
        return None
    udp: dict[str, Any] | None = node["host"]["primary_address"].get("udp")
    return udp


def _tcp(doc: dict[str, Any], name: str) -> dict[int, str]:
    """port -> status of the node's TCP connect paths."""
    node = node_of(doc, name)
    if node is None:
        return {}
    return {t["port"]: t["status"] for t in node["host"]["primary_address"].get("tcp", [])}


def _udp_status(name: str) -> Any:
    def check(doc: dict[str, Any]) -> str | None:
        udp = _udp(doc, name)
        return None if udp is None else udp["status"]

    return check


def test_udp_and_tcp_paths_in_status_metrics_and_matrix(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        n2 = cluster.start("n2")
        # n3 listens for UDP echoes on another port than its peers probe: they are refused
        n3 = cluster.start("n3", "--udp-port", str(free_loopback_port()))
        # n4 sends no UDP probe: no node/udp path in its status
        n4 = cluster.start("n4", "--udp-source-ports", "0")
        # n1 also connects to two TCP ports of every NodeIP: one open on n2 only
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((n2.node_ip, 0))
        listener.listen(64)
        open_port, closed_port = listener.getsockname()[1], free_loopback_port()
        n1 = cluster.start("n1", "--probe-tcp-ports", f"{open_port},{closed_port}")

        doc, _ = wait_for(
            n1.status_json,
            lambda d: _udp_status("n2")(d) == "ok" and _udp_status("n3")(d) == "refused",
            30,
            what="n1: UDP to n2 ok, to n3 refused",
        )
        ok = _udp(doc, "n2")
        assert ok is not None
        assert ok["text"] == "OK" and 0 < ok["latency_s"] < 0.5
        assert ok["state"] == "reachable"
        refused = _udp(doc, "n3")
        assert (
            refused is not None and refused["text"] == "Connection refused: ICMP port unreachable"
        )
        assert refused["detail"] == "ICMP port unreachable"
        # n3's ICMP and HTTP are fine, and n3 counts as reachable: UDP is no outage
        n3_doc = node_of(doc, "n3")
        assert n3_doc is not None and n3_doc["state"] == "reachable"
        for protocol in ("icmp", "http"):
            assert n3_doc["host"]["primary_address"][protocol]["status"] == "ok"
        # the UDP path belongs to the NodeIP only
        assert "udp" not in n3_doc["health_endpoint"]["primary_address"]

        text = n1.status_cli("--verbose")
        assert text.returncode == 0, text.stderr
        assert re.search(r"UDP to agent:\s+OK, RTT=", text.stdout), text.stdout
        assert re.search(r"UDP to agent:\s+Connection refused", text.stdout), text.stdout

        metrics = n1.metrics_text()
        series = (
            'meshhealth_node_connectivity_status{source_cluster="c1",source_node="n1",'
            'target_cluster="c1",target_node="n2",target_type="node",protocol="udp",'
            'family="ipv4",status="reachable"} 1'
        )
        assert series in metrics
        answered = re.search(r"^meshhealth_udp_echo_answered_total (\S+)$", n2.metrics_text(), re.M)
        assert answered is not None and float(answered.group(1)) >= 4

        # TCP: each port its own path, open -> ok, nothing listening -> refused
        doc, _ = wait_for(
            n1.status_json,
            lambda d: _tcp(d, "n2") == {open_port: "ok", closed_port: "refused"},
            30,
            what="n1: TCP to n2's open port ok, to its closed port refused",
        )
        tcp = node_of(doc, "n2")["host"]["primary_address"]["tcp"]
        assert [t["port"] for t in tcp] == sorted([open_port, closed_port])  # port order
        opened = next(t for t in tcp if t["port"] == open_port)
        assert 0 < opened["latency_s"] < 0.5
        n3_tcp = node_of(doc, "n3")["host"]["primary_address"]["tcp"]
        assert {t["status"] for t in n3_tcp} == {"refused"}
        assert node_of(doc, "n3")["state"] == "reachable"  # a closed port is no outage
        assert re.search(rf"TCP {open_port}:\s+OK, RTT=", n1.status_cli().stdout)
        assert re.search(rf"TCP {closed_port}:\s+Connection refused", n1.status_cli().stdout)
        tcp_series = (
            'meshhealth_node_connectivity_status{source_cluster="c1",source_node="n1",'
            f'target_cluster="c1",target_node="n2",target_type="node",protocol="tcp:{open_port}",'
            'family="ipv4",status="reachable"} 1'
        )
        assert tcp_series in n1.metrics_text()
        assert "tcp" not in node_of(n2.status_json(), "n1")["host"]["primary_address"]
        listener.close()

        four = n4.status_json()
        assert all("udp" not in n["host"]["primary_address"] for n in four["nodes"])

        # The aggregator's diagnosis: UDP to and from n3 fails, ICMP and HTTP pass.
        def udp_findings(d: dict[str, Any]) -> list[tuple[str, list[str]]]:
            return [(f["kind"], f["nodes"]) for f in d.get("findings", [])]

        wait_for(
            n2.status_json,
            lambda d: ("udp-blocked", ["c1/n3"]) in udp_findings(d),
            60,
            what="a udp-blocked finding on n3",
        )

        # The matrix JSON carries it in the cell's extra_paths, not in its state.
        out = subprocess.run(
            [sys.executable, "-m", "meshhealth", "matrix", "--etcd", etcd_server.endpoint,
             "--cluster", "c1", "-o", "json"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        matrix = json.loads(out.stdout)
        row = next(r for r in matrix["rows"] if r["name"] == "n1")
        cell = next(c for c in row["cells"] if c["name"] == "n3")
        assert cell["extra_paths"]["node/udp"]["status"] == "refused"
        assert "node/udp" not in cell["paths"]
        assert cell["state"] == "reachable"
        assert n3.alive
