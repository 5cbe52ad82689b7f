"""node/icmp-df from a HealthReport to a finding (pure): the wire keeps older readers
working, the matrix does not call the target unreachable, diagnosis sees an MTU black
hole."""

from __future__ import annotations

import msgpack

from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import FindingKind
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix
from meshhealth.model import HealthReport, PathHealth, ProbeStatus, TargetHealth
from meshhealth.wire.health import (
    CORE_PATH_NAMES,
    decode_health_report,
    encode_health_report,
)

OK = PathHealth(ProbeStatus.OK, 0.0004, 0.0)
LOST = PathHealth(ProbeStatus.TIMEOUT, None, 1.0)
NODES = ("node1", "node2", "node3", "node4")
NOW = 1_000.0


def _report(source: str, *, big_to_node3: PathHealth = LOST) -> HealthReport:
    targets = []
    for node in NODES:
        paths = {name: OK for name in CORE_PATH_NAMES}
        paths["node/icmp-df"] = big_to_node3 if node == "node3" and source != node else OK
        targets.append(TargetHealth("c1", node, paths))
    return HealthReport(source, "c1", NOW - 1, 10.0, tuple(targets))


def test_the_df_path_is_written_where_older_readers_ignore_it() -> None:
    report = _report("node1")
    wire = msgpack.unpackb(encode_health_report(report))
    node3 = wire["targets"][2]
    assert sorted(node3["paths"]) == sorted(CORE_PATH_NAMES)  # what older readers read
    assert node3["extra_paths"] == {
        "node/icmp-df": {"status": "timeout", "rtt_s": None, "loss": 1.0}
    }
    assert decode_health_report(encode_health_report(report)) == report


def test_unknown_extra_paths_are_skipped_not_refused() -> None:
    wire = msgpack.unpackb(encode_health_report(_report("node1")))
    wire["targets"][0]["extra_paths"]["node/quic"] = {"status": "ok", "rtt_s": 0.1, "loss": 0}
    decoded = decode_health_report(msgpack.packb(wire))
    assert set(decoded.targets[0].paths) == {*CORE_PATH_NAMES, "node/icmp-df"}


def test_a_lost_big_probe_is_an_mtu_blackhole_not_unreachable() -> None:
    reports = [_report(source) for source in NODES]
    matrix = build_matrix(reports, now=NOW)
    column = matrix.columns.index(("c1", "node3"))
    assert {row.cells[column].state for row in matrix.rows if row.source[1] != "node3"} == {
        "reachable"
    }
    findings = diagnose(matrix_view(matrix))
    assert [f.kind for f in findings] == [FindingKind.MTU_BLACKHOLE]
    assert "c1/node3" in {str(node) for node in findings[0].nodes}


def test_without_the_df_path_nothing_is_found() -> None:
    reports = [_report(source, big_to_node3=OK) for source in NODES]
    assert diagnose(matrix_view(build_matrix(reports, now=NOW))) == ()
