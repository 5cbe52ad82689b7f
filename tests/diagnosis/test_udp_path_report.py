"""node/udp from a HealthReport to a finding (pure): the wire keeps older readers
working, the matrix does not call the target unreachable, diagnosis says udp-blocked."""

from __future__ import annotations

import msgpack

from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import FindingKind
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix
from meshhealth.documents.matrix_json import matrix_document
from meshhealth.model import HealthReport, PathHealth, ProbeStatus, TargetHealth
from meshhealth.wire.health import CORE_PATH_NAMES, decode_health_report, encode_health_report

OK = PathHealth(ProbeStatus.OK, 0.0004, 0.0)
REFUSED = PathHealth(ProbeStatus.REFUSED, None, 1.0, "unreachable", 990.0)
NODES = ("node1", "node2", "node3", "node4")
NOW = 1_000.0


def _report(source: str, *, udp_to_node3: PathHealth = REFUSED) -> HealthReport:
    targets = []
    for node in NODES:
        paths = {name: OK for name in CORE_PATH_NAMES}
        paths["node/udp"] = udp_to_node3 if node == "node3" and source != node else OK
        targets.append(TargetHealth("c1", node, paths))
    return HealthReport(source, "c1", NOW - 1, 10.0, tuple(targets))


def test_the_udp_path_is_written_where_older_readers_ignore_it() -> None:
    report = _report("node1")
    wire = msgpack.unpackb(encode_health_report(report))
    node3 = wire["targets"][2]
    assert sorted(node3["paths"]) == sorted(CORE_PATH_NAMES)  # what older readers read
    assert node3["extra_paths"] == {
        "node/udp": {
            "status": "refused",
            "rtt_s": None,
            "loss": 1.0,
            "state": "unreachable",
            "state_since": 990.0,
        }
    }
    assert decode_health_report(encode_health_report(report)) == report


def test_a_reader_that_knows_only_icmp_df_skips_it() -> None:
    """What an agent from before node/udp does with a newer report: its `extra_paths`
    reader skips names it does not know (node/quic stands for one here)."""
    wire = msgpack.unpackb(encode_health_report(_report("node1")))
    for target in wire["targets"]:
        target["extra_paths"]["node/quic"] = target["extra_paths"].pop("node/udp")
    decoded = decode_health_report(msgpack.packb(wire))
    assert set(decoded.targets[2].paths) == set(CORE_PATH_NAMES)


def test_lost_udp_is_udp_blocked_not_unreachable() -> None:
    reports = [_report(source) for source in NODES]
    matrix = build_matrix(reports, now=NOW)
    column = matrix.columns.index(("c1", "node3"))
    cells = [row.cells[column] for row in matrix.rows if row.source[1] != "node3"]
    assert {cell.state for cell in cells} == {"reachable"}
    findings = diagnose(matrix_view(matrix))
    assert [(f.kind, tuple(map(str, f.nodes))) for f in findings] == [
        (FindingKind.UDP_BLOCKED, ("c1/node3",))
    ]
    assert "UDP echoes to it are lost" in findings[0].evidence
    doc = matrix_document(matrix)
    row = next(r for r in doc["rows"] if r["name"] == "node1")
    cell = next(c for c in row["cells"] if c["name"] == "node3")
    assert cell["extra_paths"] == {
        "node/udp": {
            "status": "refused",
            "rtt_s": None,
            "loss": 1.0,
            "state": "unreachable",
            "state_since": "1970-01-01T00:16:30Z",
        }
    }
    assert "node/udp" not in cell["paths"]


def test_without_udp_failures_nothing_is_found() -> None:
    reports = [_report(source, udp_to_node3=OK) for source in NODES]
    assert diagnose(matrix_view(build_matrix(reports, now=NOW))) == ()
