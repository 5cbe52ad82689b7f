"""Golden-file tests of `meshhealth status` text.

The goldens in tests/golden/status_*.txt pin what users and their scripts read. After an
intended change of the output, regenerate them and review the diff:

    MESHHEALTH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/cli/test_format_status.py
"""

from __future__ import annotations

import dataclasses

import pytest

from meshhealth.cli.format_status import format_status_text, path_line
from meshhealth.documents.status import LocalNode, build_status_document
from meshhealth.model import Target
from tests import status_stories
from tests.golden_files import check_golden

CASES = [
    ("healthy", False),
    ("endpoint_forward_drop", False),
    ("icmp_drop", False),
    ("agent_down", False),
    ("etcd_down", False),
    ("never_probed", False),
    ("lost_probe", False),
    ("endpoint_forward_drop", True),
    ("agent_down", True),
    ("never_probed", True),
    ("lost_probe", True),
    ("dual_stack_healthy", False),
    ("dual_stack_healthy", True),
    ("dual_stack_ipv6_drop", False),
    ("agent_down_summary", False),
    ("agent_down_in_maintenance", False),
    ("subset_plan", False),
    ("small_full_mesh", False),
    ("mtu_blackhole", False),
    ("mtu_blackhole", True),
    ("l4_blocked", False),
    ("l4_blocked", True),
    ("one_node", False),
    ("egress_blocked_here", False),
]


@pytest.mark.parametrize(("story", "verbose"), CASES)
def test_status_text_matches_golden(story: str, verbose: bool) -> None:
    doc = build_status_document(status_stories.STORIES[story]())
    text = format_status_text(doc, verbose=verbose)
    check_golden(f"status_{story}{'_verbose' if verbose else ''}.txt", text)


def test_cilium_health_shape_lines() -> None:
    """The shape cilium-health users know, line by line (independent of the golden
    files): probe time, a node per block with Host and Endpoint connectivity, the
    `ICMP to stack:` / `HTTP to agent:` labels, Go-style RTTs, `Cluster health: X/Y`."""
    text = format_status_text(
        build_status_document(status_stories.endpoint_forward_drop()), verbose=False
    )
    lines = text.splitlines()
    assert lines[:11] == [
        "Probe time:   2026-11-22T10:00:00Z",
        "Nodes:",
        "  lab1/node1 (localhost):",
        "    Host connectivity to 10.77.0.1:",
        "      ICMP to stack:   OK, RTT=412.5µs",
        "      HTTP to agent:   OK, RTT=1.02ms",
        "    Endpoint connectivity to 10.78.1.2:",
        "      ICMP to stack:   OK, RTT=455µs",
        "      HTTP to agent:   OK, RTT=1.31ms",
        "  lab1/node2:",
        "    Host connectivity to 10.77.0.2:",
    ]
    assert "      ICMP to stack:   Connection timed out" in lines
    assert lines[-1] == (
        "Cluster health:   2/3 reachable, 1 unreachable   "
        "(this node's own probes: no cluster summary yet; 2026-11-22T10:00:00Z)"
    )


def test_a_cluster_of_one_says_so_in_text_and_json() -> None:
    doc = build_status_document(status_stories.one_node())
    (verdict,) = doc["cluster_health"] or []
    assert verdict.get("alone") is True and verdict["total"] == 1
    text = format_status_text(doc, verbose=False)
    assert "Cluster health:   1 node, no other node to probe or to observe it" in text
    assert "0/1 reachable" not in text
    two = build_status_document(status_stories.agent_down_summary())
    assert all("alone" not in v for v in two["cluster_health"] or [])


def test_never_probed_says_so() -> None:
    text = format_status_text(build_status_document(status_stories.never_probed()), verbose=False)
    assert text.startswith("Probe time:   never (first round running)\n")


def test_endpoint_section_is_left_out_without_health_ip() -> None:
    inputs = status_stories.healthy()
    doc = build_status_document(inputs)
    doc["nodes"][1]["health_endpoint"] = None
    doc["nodes"][1]["health_endpoint_state"] = None
    text = format_status_text(doc, verbose=True)
    assert "Endpoint connectivity to 10.78.2.2" not in text
    assert "Endpoint connectivity to 10.78.3.2" in text


def _path(**changes: object) -> dict[str, object]:
    path: dict[str, object] = {
        "status": "ok",
        "text": "OK",
        "detail": "",
        "latency_s": 412.5e-6,
        "loss": 0.0,
        "rtt_p50_s": 400e-6,
        "rtt_p95_s": 1.1e-3,
        "rtt_max_s": 1.2e-3,
        "samples": 5,
        "last_probed": "2026-11-22T10:00:00Z",
        "last_success": "2026-11-22T10:00:00Z",
        "consecutive_failures": 0,
    }
    path.update(changes)
    return path


@pytest.mark.parametrize(
    ("path", "verbose", "expected"),
    [
        (_path(), False, "OK, RTT=412.5µs"),
        (_path(), True, "OK, RTT=412.5µs, loss=0%, p50=400µs, p95=1.1ms, last probed 3s ago"),
        (
            _path(status="refused", text="Connection refused", latency_s=None),
            False,
            "Connection refused",
        ),
        (
            _path(
                status="timeout",
                text="Connection timed out",
                latency_s=None,
                loss=1.0,
                rtt_p50_s=None,
                rtt_p95_s=None,
                consecutive_failures=4,
                last_success="2026-11-22T09:59:20Z",
            ),
            True,
            "Connection timed out, loss=100%, last probed 3s ago, 4 failed in a row, "
            "last OK 43s ago",
        ),
        (
            _path(
                status="timeout",
                text="Connection timed out",
                latency_s=None,
                loss=1.0,
                consecutive_failures=2,
                last_success=None,
            ),
            True,
            "Connection timed out, loss=100%, p50=400µs, p95=1.1ms, last probed 3s ago, "
            "2 failed in a row, last OK never",
        ),
        (
            _path(status="unknown", text="Not probed yet", last_probed=None, latency_s=None),
            True,
            "Not probed yet",
        ),
    ],
)
def test_path_line(path: dict[str, object], verbose: bool, expected: str) -> None:
    now = 1_795_341_603.0  # 2026-11-22T10:00:03Z
    assert path_line(path, verbose=verbose, now=now) == expected


def test_secondary_addresses_as_cilium_health_prints_them() -> None:
    """A dual-stack node: its secondary address's block follows the primary's lines,
    one level deeper; without --verbose only when a path of it failed."""
    doc = build_status_document(status_stories.dual_stack_ipv6_drop())
    node3 = doc["nodes"][2]
    assert node3["name"] == "node3"
    assert node3["host"]["secondary_addresses"][0]["ip"] == "fd77::3"
    assert node3["host"]["secondary_addresses"][0]["icmp"]["status"] == "timeout"
    assert node3["state"] == "unreachable"  # one family down: the node is unreachable
    assert [n["state"] for n in doc["nodes"]] == ["reachable", "reachable", "unreachable"]
    lines = format_status_text(doc, verbose=False).splitlines()
    at = lines.index("  lab1/node3:")
    assert lines[at + 1 : at + 7] == [
        "    Host connectivity to 10.77.0.3:",
        "      ICMP to stack:   OK, RTT=498µs",
        "      HTTP to agent:   OK, RTT=1.9ms",
        "      Secondary connectivity to fd77::3:",
        "        ICMP to stack:   Connection timed out",
        "        HTTP to agent:   Connection timed out",
    ]
    healthy = format_status_text(
        build_status_document(status_stories.dual_stack_healthy()), verbose=False
    )
    assert "Secondary" not in healthy
    verbose = format_status_text(
        build_status_document(status_stories.dual_stack_healthy()), verbose=True
    )
    assert verbose.count("Secondary connectivity to ") == 6  # 3 nodes x host, endpoint


def test_single_stack_document_has_no_secondary_fields() -> None:
    doc = build_status_document(status_stories.healthy())
    assert all("secondary_addresses" not in node["host"] for node in doc["nodes"])
    assert "node_ip_secondary" not in doc["local"]


def test_a_finding_contradicted_by_newer_probes_is_marked_stale() -> None:
    """After `lab fault clear`, `status --probe` passes again while the summary still
    carries the finding: the finding says so instead of standing beside the OK."""
    from dataclasses import replace

    from meshhealth.wire.summary import SummaryFinding

    inputs = status_stories.mtu_blackhole()
    summary = status_stories.AGENT_DOWN_SUMMARY
    old = replace(
        summary,
        generated_at=status_stories.PROBE_TIME - 60,  # before this node's newest round
        findings=(
            SummaryFinding("mtu-blackhole", ("lab1/node2",), 0.8, 0.0, "big probes lost"),
            SummaryFinding("mtu-blackhole", ("lab1/node3",), 0.8, 0.0, "big probes lost"),
            # this node itself: its probes of itself do not cross the network
            SummaryFinding("endpoint-down", ("lab1/node1",), 0.8, 0.0, "endpoint fails"),
        ),
    )
    doc = build_status_document(
        replace(inputs, cluster_summaries={"lab1": old}, verdict_clusters=("lab1",))
    )
    by_node = {f["nodes"][0]: f for f in doc["findings"]}
    # node2's big probes pass in the newest round: stale; node3's fail: it stands
    assert by_node["lab1/node2"].get("stale") is True
    assert by_node["lab1/node2"]["evidence"].endswith(
        "(stale: this node's newer probes of lab1/node2 pass)"
    )
    assert "stale" not in by_node["lab1/node3"]
    assert "stale" not in by_node["lab1/node1"]
    # a summary newer than the probes: nothing is contradicted
    fresh = replace(old, generated_at=status_stories.PROBE_TIME + 5)
    doc = build_status_document(
        replace(inputs, cluster_summaries={"lab1": fresh}, verdict_clusters=("lab1",))
    )
    assert not any(f.get("stale") for f in doc["findings"])


def test_nodes_in_natural_order() -> None:
    """The local node first, then node2 before node10 (text and JSON alike)."""
    local = LocalNode(cluster="lab1", name="node3", node_ip="10.77.0.3", health_ip=None)
    names = ["node10", "node2", "node3", "node11", "node1"]
    targets = tuple(Target("lab1", n, f"10.77.0.{n[4:]}") for n in names)
    doc = build_status_document(
        dataclasses.replace(status_stories.healthy(), local=local, targets=targets)
    )
    assert [n["name"] for n in doc["nodes"]] == ["node3", "node1", "node2", "node10", "node11"]
    titles = [
        line.strip()
        for line in format_status_text(doc, verbose=False).splitlines()
        if line.startswith("  lab1/")
    ]
    assert titles == [
        "lab1/node3 (localhost):",
        "lab1/node1:",
        "lab1/node2:",
        "lab1/node10:",
        "lab1/node11:",
    ]


def test_an_escape_sequence_in_a_finding_read_from_a_summary_is_printed_escaped() -> None:
    """A summary in etcd is anyone's who can write it: an ESC (retitle the terminal,
    clear the screen) or a right-to-left override in a finding's evidence is refused by
    the codec (tests/wire/test_clean_text.py); should one reach a formatter anyway, `status`,
    `matrix`, `diagnose` and `watch` show it as visible escapes."""
    from dataclasses import replace

    from meshhealth.cli.format_findings import format_findings_text
    from meshhealth.cli.watch_view import event_line
    from meshhealth.wire.summary import SummaryFinding, encode_summary

    hostile = "\x1b]0;owned\x07\x1b[2J lost \u202etxt.exe"
    forged = replace(
        status_stories.AGENT_DOWN_SUMMARY,
        findings=(SummaryFinding("node-down", ("lab1/node2",), 0.9, 0.0, hostile),),
    )
    with pytest.raises(ValueError, match="control or bidi character"):
        encode_summary(forged)  # etcd's encoding refuses it, both ways
    read = forged
    inputs = status_stories.STORIES["agent_down_summary"]()
    doc = build_status_document(
        replace(inputs, cluster_summaries={"lab1": read}, verdict_clusters=("lab1",))
    )
    text = format_status_text(doc, verbose=False)
    shown = "\\x1b]0;owned\\x07\\x1b[2J lost \\u202etxt.exe"
    (line,) = [line for line in text.splitlines() if line.startswith("Finding:")]
    assert line.endswith(shown)
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    findings = format_findings_text({"generated_at": None, "findings": doc["findings"]})
    assert shown in findings and "\x1b" not in findings
    assert event_line(0.0, hostile).endswith(shown)
