"""The probe plan inside a health report: optional, validated, readable by old readers."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest

from meshhealth.model import HealthReport, PathHealth, PlanInfo, ProbeStatus, TargetHealth
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.health import decode_health_report, encode_health_report
from meshhealth.wire.values import to_jsonable

PLAN = PlanInfo(
    epoch=29_458_123, k=5, rotation_rounds=6, full_mesh=False, full_mesh_max_nodes=16, nodes=99
)
REPORT = HealthReport(
    node="node-1",
    cluster="default",
    probe_time=1_767_487_380.0,
    interval_s=10.0,
    targets=(
        TargetHealth("default", "node-2", {"node/icmp": PathHealth(ProbeStatus.OK, 1e-4, 0)}),
    ),
    plan=PLAN,
)


def _packed(wire: dict[str, Any]) -> bytes:
    return bytes(msgpack.packb(wire, use_bin_type=True))


def test_the_plan_is_published_field_by_field() -> None:
    wire = to_jsonable(REPORT)
    assert wire["plan"] == {
        "epoch": 29_458_123,
        "k": 5,
        "rotation_rounds": 6,
        "full_mesh": False,
        "full_mesh_max_nodes": 16,
        "nodes": 99,
    }
    assert decode_health_report(encode_health_report(REPORT)) == REPORT


def test_a_report_without_a_plan_has_no_plan_field_and_decodes_to_none() -> None:
    old = HealthReport("node-1", "default", 1.0, 10.0, ())
    wire = to_jsonable(old)
    assert "plan" not in wire  # what an old writer wrote, byte for byte
    assert decode_health_report(encode_health_report(old)).plan is None


def test_an_old_reader_ignores_the_plan() -> None:
    """Readers ignore fields they do not know: the report minus its plan is what they get."""
    wire = to_jsonable(REPORT)
    wire["plan"]["something_new"] = [1, 2]  # a later writer may add settings
    decoded = decode_health_report(_packed(wire))
    assert decoded == REPORT


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (None, "k=5", "field 'plan': must be a map, got a string"),
        ("k", 0, "field 'plan.k': must be 1..10000, got 0"),
        ("k", True, "field 'plan.k': must be an integer, got a boolean"),
        ("epoch", -1, "field 'plan.epoch': must be 0.."),
        ("epoch", 1.5, "field 'plan.epoch': must be an integer, got a float"),
        ("rotation_rounds", 0, "field 'plan.rotation_rounds': must be 1.."),
        ("full_mesh", 1, "field 'plan.full_mesh': must be true or false, got an integer"),
        ("full_mesh_max_nodes", -1, "field 'plan.full_mesh_max_nodes': must be 0.."),
        ("nodes", 0, "field 'plan.nodes': must be 1.."),
        ("nodes", DecodeError, "missing field 'plan.nodes'"),
    ],
)
def test_a_bad_plan_is_refused_with_one_line(
    field: str | None, value: object, message: str
) -> None:
    wire = copy.deepcopy(to_jsonable(REPORT))
    if field is None:
        wire["plan"] = value
    elif value is DecodeError:
        del wire["plan"][field]
    else:
        wire["plan"][field] = value
    with pytest.raises(DecodeError) as caught:
        decode_health_report(_packed(wire))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("plan", "subset", "per_node"),
    [
        (PLAN, True, 5),
        (PlanInfo(1, 5, 6, False, 16, 16), False, 15),  # at the full-mesh size
        (PlanInfo(1, 5, 6, False, 16, 17), True, 5),
        (PlanInfo(1, 5, 6, True, 16, 99), False, 98),  # --full-mesh
        (PlanInfo(1, 20, 6, False, 16, 21), False, 20),  # n <= k + 1
        (PlanInfo(1, 20, 6, False, 16, 22), True, 20),
        (PlanInfo(1, 5, 6, False, 16, 1), False, 0),  # alone
    ],
)
def test_plan_info_says_whether_it_is_a_subset(plan: PlanInfo, subset: bool, per_node: int) -> None:
    assert plan.subset is subset
    assert plan.targets_per_node == per_node
