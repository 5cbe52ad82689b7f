"""The status document builder (pure): schema, reachability, ordering."""

from __future__ import annotations

import json

import pytest

from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    build_healthz_document,
    build_status_document,
    combined_state,
    path_state,
)
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    PathKey,
    PathSummary,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Target,
    TargetType,
)
from tests import status_stories
from tests.repo_paths import REPO_ROOT

PATH_FIELDS = {
    "status",
    "text",
    "detail",
    "latency_s",
    "loss",
    "rtt_p50_s",
    "rtt_p95_s",
    "rtt_max_s",
    "samples",
    "last_probed",
    "last_success",
    "consecutive_failures",
    "state",
    "state_since",
}


def _summary(status: ProbeStatus | None) -> PathSummary | None:
    if status is None:
        return None
    ok = status is ProbeStatus.OK
    result = ProbeResult(status, 100.0, (0.001,) if ok else (), received=int(ok))
    return PathSummary(
        samples=1,
        last=result,
        loss=0.0 if ok else 1.0,
        rtt_last_s=result.rtt_s,
        rtt_p50_s=result.rtt_s,
        rtt_p95_s=result.rtt_s,
        rtt_max_s=result.rtt_s,
        last_probed=100.0,
        last_success=100.0 if ok else None,
        consecutive_failures=0 if ok else 1,
    )


OK, TO = ProbeStatus.OK, ProbeStatus.TIMEOUT


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, "unknown"),
        (OK, "reachable"),
        (TO, "unreachable"),
        (ProbeStatus.HTTP_ERROR, "unreachable"),
    ],
)
def test_path_state(status: ProbeStatus | None, expected: str) -> None:
    assert path_state(_summary(status)) == expected


def test_path_state_of_a_summary_without_result_is_unknown() -> None:
    empty = PathSummary(0, None, 0.0, None, None, None, None, None, None, 0)
    assert path_state(empty) == "unknown"


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ((), "unknown"),
        (("unknown", "unknown"), "unknown"),
        (("reachable", "unknown"), "reachable"),
        (("reachable", "reachable"), "reachable"),
        (("reachable", "unreachable"), "unreachable"),
        (("unknown", "unreachable"), "unreachable"),
    ],
)
def test_combined_state(states: tuple[str, ...], expected: str) -> None:
    assert combined_state(states) == expected  # type: ignore[arg-type]


LOCAL = LocalNode("c1", "a", "10.0.0.1", "10.1.0.1")


def _inputs(
    targets: tuple[Target, ...], statuses: dict[PathKey, ProbeStatus | None]
) -> StatusInputs:
    summaries = {k: s for k, v in statuses.items() if (s := _summary(v)) is not None}
    return StatusInputs(
        local=LOCAL,
        targets=targets,
        summaries=summaries,
        probe_time=100.0,
        probe_interval_s=10.0,
        etcd=EtcdState(up=True, since=50.0),
        round=RoundState(running=False, last_started_at=100.0, last_duration_s=0.5, completed=1),
        now=103.0,
    )


def _keys(node: str) -> list[PathKey]:
    return [PathKey("c1", node, t, p) for t in TargetType for p in REACHABILITY_PROTOCOLS]


@pytest.mark.parametrize(
    ("statuses", "reachable", "state", "host_state", "endpoint_state"),
    [
        ((OK, OK, OK, OK), True, "reachable", "reachable", "reachable"),
        ((OK, OK, TO, TO), False, "unreachable", "reachable", "unreachable"),
        ((TO, OK, TO, OK), False, "unreachable", "unreachable", "unreachable"),
        ((OK, None, OK, None), True, "reachable", "reachable", "reachable"),
        ((None, None, None, None), False, "unknown", "unknown", "unknown"),
        ((None, None, TO, None), False, "unreachable", "unknown", "unreachable"),
    ],
)
def test_node_reachability(
    statuses: tuple[ProbeStatus | None, ...],
    reachable: bool,
    state: str,
    host_state: str,
    endpoint_state: str,
) -> None:
    target = Target("c1", "b", "10.0.0.2", "10.1.0.2")
    doc = build_status_document(_inputs((target,), dict(zip(_keys("b"), statuses, strict=True))))
    node = doc["nodes"][1]
    assert node["name"] == "b"
    assert (node["reachable"], node["state"]) == (reachable, state)
    assert (node["host_state"], node["health_endpoint_state"]) == (host_state, endpoint_state)


def test_node_without_health_endpoint() -> None:
    target = Target("c1", "b", "10.0.0.2", None)
    keys = _keys("b")
    doc = build_status_document(_inputs((target,), {keys[0]: OK, keys[1]: OK}))
    node = doc["nodes"][1]
    assert node["health_endpoint"] is None
    assert node["health_endpoint_state"] is None
    assert node["reachable"] is True


def test_nodes_sorted_local_first_then_cluster_and_name() -> None:
    targets = (
        Target("c2", "a", "10.2.0.1"),
        Target("c1", "z", "10.0.0.9"),
        Target("c1", "b", "10.0.0.2"),
        Target("c1", "a", "10.0.0.1", "10.1.0.1"),
    )
    doc = build_status_document(_inputs(targets, {}))
    assert [(n["cluster"], n["name"], n["is_local"]) for n in doc["nodes"]] == [
        ("c1", "a", True),
        ("c1", "b", False),
        ("c1", "z", False),
        ("c2", "a", False),
    ]


def test_local_node_is_listed_before_discovery_sees_it() -> None:
    doc = build_status_document(_inputs((), {}))
    assert len(doc["nodes"]) == 1
    local = doc["nodes"][0]
    assert local["is_local"] is True
    assert local["host"]["primary_address"]["ip"] == "10.0.0.1"
    assert local["health_endpoint"]["primary_address"]["ip"] == "10.1.0.1"
    assert local["host"]["primary_address"]["icmp"]["status"] == "unknown"
    assert local["host"]["primary_address"]["icmp"]["text"] == "Not probed yet"
    assert doc["summary"] == {
        "reachable": 0,
        "unreachable": 0,
        "suspect": 0,
        "unknown": 1,
        "total": 1,
    }


def test_document_schema_of_a_story() -> None:
    doc = build_status_document(status_stories.endpoint_forward_drop())
    json.dumps(doc)  # plain JSON types only
    assert doc["v"] == 1
    assert doc["probe_time"] == "2026-11-22T10:00:00Z"
    assert doc["generated_at"] == "2026-11-22T10:00:03Z"
    assert doc["probe_interval_s"] == 10.0
    assert doc["local"] == {
        "cluster": "lab1",
        "name": "node1",
        "node_ip": "10.77.0.1",
        "health_ip": "10.78.1.2",
    }
    assert doc["etcd"] == {"up": True, "since": "2026-11-22T09:00:03Z", "last_error": None}
    assert doc["round"] == {
        "running": False,
        "last_started_at": "2026-11-22T10:00:00Z",
        "last_duration_s": 1.0234,
        "completed": 6,
    }
    assert doc["summary"] == {
        "reachable": 2,
        "unreachable": 1,
        "suspect": 0,
        "unknown": 0,
        "total": 3,
    }
    node2 = doc["nodes"][1]
    assert set(node2) == {
        "cluster",
        "name",
        "is_local",
        "host",
        "health_endpoint",
        "reachable",
        "state",
        "host_state",
        "health_endpoint_state",
    }
    host_icmp = node2["host"]["primary_address"]["icmp"]
    assert set(host_icmp) == PATH_FIELDS | {"hops"}  # from the replies' TTL
    assert host_icmp["hops"] == 1
    assert set(ep_http := node2["health_endpoint"]["primary_address"]["http"]) == PATH_FIELDS
    assert "hops" not in ep_http  # HTTP: no TTL read
    assert host_icmp["status"] == "ok"
    assert host_icmp["latency_s"] == pytest.approx(520e-6)
    ep_http = node2["health_endpoint"]["primary_address"]["http"]
    assert ep_http["status"] == "timeout"
    assert ep_http["text"] == "Connection timed out"
    assert ep_http["latency_s"] is None
    assert ep_http["loss"] == pytest.approx(0.5)
    assert ep_http["consecutive_failures"] == 3
    assert ep_http["last_probed"] == "2026-11-22T10:00:00Z"
    assert ep_http["last_success"] == "2026-11-22T09:59:30Z"


def test_http_error_text_carries_the_detail() -> None:
    key = PathKey("c1", "b", TargetType.NODE, Protocol.HTTP)
    result = ProbeResult(ProbeStatus.HTTP_ERROR, 100.0, (), detail="HTTP 503")
    summary = PathSummary(1, result, 1.0, None, None, None, None, 100.0, None, 1)
    inputs = _inputs((Target("c1", "b", "10.0.0.2"),), {})
    doc = build_status_document(StatusInputs(**{**_fields(inputs), "summaries": {key: summary}}))
    http = doc["nodes"][1]["host"]["primary_address"]["http"]
    assert (http["status"], http["text"]) == ("http_error", "HTTP 503")


def _fields(inputs: StatusInputs) -> dict[str, object]:
    return {name: getattr(inputs, name) for name in StatusInputs.__slots__}


def test_healthz_document() -> None:
    doc = build_healthz_document(
        started_at=100.0, now=112.5, etcd=EtcdState(up=False, since=101.0, last_error="refused")
    )
    assert doc == {
        "status": "ok",
        "started_at": "1970-01-01T00:01:40Z",
        "uptime_s": 12.5,
        "etcd": {"up": False, "since": "1970-01-01T00:01:41Z", "last_error": "refused"},
    }


def _all_keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _all_keys(v)}
    return set()


def test_every_field_is_documented() -> None:
    doc = build_status_document(status_stories.agent_down())
    text = (REPO_ROOT / "docs" / "status.md").read_text(encoding="utf-8")
    missing = sorted(key for key in _all_keys(doc) if f"`{key}`" not in text)
    assert missing == []
