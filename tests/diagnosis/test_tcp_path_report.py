"""node/tcp:PORT from a HealthReport to a finding (pure): the names on the wire, older
readers, the matrix, and diagnosis reading a cell's ports as its worst one."""

from __future__ import annotations

import msgpack
import pytest

from meshhealth.diagnosis.cells import PathKind
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import FindingKind
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix
from meshhealth.model import (
    HealthReport,
    PathHealth,
    PathKey,
    ProbeStatus,
    Protocol,
    Reachability,
    TargetHealth,
    TargetType,
    path_label,
    path_name,
    tcp_ports_of,
)
from meshhealth.wire.health import (
    CORE_PATH_NAMES,
    decode_health_report,
    encode_health_report,
    known_path_name,
)

OK = PathHealth(ProbeStatus.OK, 0.0004, 0.0)
REFUSED = PathHealth(ProbeStatus.REFUSED, None, 1.0, "unreachable", 990.0)
SUSPECT = PathHealth(ProbeStatus.TIMEOUT, None, 0.1, "suspect", 995.0)
NODES = ("node1", "node2", "node3", "node4")
NOW = 1_000.0


def _report(source: str, *, kubelet_to_node3: PathHealth = REFUSED) -> HealthReport:
    targets = []
    for node in NODES:
        paths = {name: OK for name in CORE_PATH_NAMES}
        paths["node/tcp:22"] = OK
        paths["node/tcp:10250"] = kubelet_to_node3 if node == "node3" and source != node else OK
        targets.append(TargetHealth("c1", node, paths))
    return HealthReport(source, "c1", NOW - 1, 10.0, tuple(targets))


def test_names() -> None:
    key = PathKey("c1", "n", TargetType.NODE, Protocol.TCP, port=10250)
    assert path_name(TargetType.NODE, Protocol.TCP, 10250) == "node/tcp:10250"
    assert path_label(key) == "node/tcp:10250"
    assert tcp_ports_of([key, PathKey("c1", "n", TargetType.NODE, Protocol.ICMP)]) == (10250,)


@pytest.mark.parametrize(
    ("name", "known"),
    [
        ("node/tcp:22", True),
        ("node/tcp:65535", True),
        ("node/tcp:65536", False),
        ("node/tcp:0", False),
        ("node/tcp:022", False),
        ("node/tcp:", False),
        ("node/tcp:2a", False),
        ("node/tcp:٢٢", False),  # Arabic-Indic digits: isdigit(), not a port
        ("endpoint/tcp:22", False),
        ("node/udp", True),
        ("node/quic", False),
    ],
)
def test_known_path_names(name: str, known: bool) -> None:
    assert known_path_name(name) is known


def test_tcp_paths_are_written_where_older_readers_ignore_them() -> None:
    report = _report("node1")
    wire = msgpack.unpackb(encode_health_report(report))
    node3 = wire["targets"][2]
    assert sorted(node3["paths"]) == sorted(CORE_PATH_NAMES)  # what older readers read
    assert sorted(node3["extra_paths"]) == ["node/tcp:10250", "node/tcp:22"]
    assert node3["extra_paths"]["node/tcp:10250"]["status"] == "refused"
    assert decode_health_report(encode_health_report(report)) == report


def test_a_closed_port_is_port_blocked_not_unreachable() -> None:
    matrix = build_matrix([_report(source) for source in NODES], now=NOW)
    column = matrix.columns.index(("c1", "node3"))
    assert {r.cells[column].state for r in matrix.rows if r.source[1] != "node3"} == {"reachable"}
    findings = diagnose(matrix_view(matrix))
    assert [(f.kind, tuple(map(str, f.nodes))) for f in findings] == [
        (FindingKind.PORT_BLOCKED, ("c1/node3",))
    ]
    assert "TCP connects to the probed ports fail" in findings[0].evidence
    assert findings[0].evidence.endswith("; TCP port 10250")  # port 22 answers


@pytest.mark.parametrize(
    ("kubelet", "state"),
    [
        (OK, Reachability.REACHABLE),
        (SUSPECT, Reachability.SUSPECT),
        (REFUSED, Reachability.UNREACHABLE),
    ],
)
def test_a_cells_ports_read_as_the_worst(kubelet: PathHealth, state: Reachability) -> None:
    matrix = build_matrix([_report(s, kubelet_to_node3=kubelet) for s in NODES], now=NOW)
    view = matrix_view(matrix)
    cell = next(c for c in view.cells if (c.observer.node, c.target.node) == ("node1", "node3"))
    assert cell.state(PathKind.NODE_TCP) is state
