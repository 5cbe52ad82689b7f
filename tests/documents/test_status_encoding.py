"""The status document's per-round cache and spliced JSON (what GET /v1/status sends)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from meshhealth.agent.serving.admin_api import EncodedJson, json_response
from meshhealth.documents.status import (
    ClusterState,
    EtcdState,
    NodesCache,
    RoundState,
    StatusInputs,
    build_nodes_part,
    build_status_document,
    encode_json,
    encode_status_document,
)
from meshhealth.model import Target
from tests import status_stories


def _meshed() -> StatusInputs:
    """Two clusters, a remote node in the probe set, a non-ASCII error text."""
    inputs = status_stories.agent_down()
    remote = Target("lab2", "node9", "10.79.0.9", None)
    return dataclasses.replace(
        inputs,
        targets=(*inputs.targets, remote),
        clusters=(
            ClusterState("lab1", 1, True, "ok", inputs.etcd),
            ClusterState("lab2", 2, False, "waiting", EtcdState(False, 5.0, "refusé"), "no cfg"),
            ClusterState("lab3", None, False, "refused", EtcdState(False), "id clash"),
        ),
    )


CASES = {**status_stories.STORIES, "meshed": _meshed}


@pytest.mark.parametrize("story", sorted(CASES))
def test_spliced_json_is_the_document_byte_for_byte(story: str) -> None:
    inputs = CASES[story]()
    expected = build_status_document(inputs)
    part = build_nodes_part(
        inputs.local, inputs.targets, inputs.summaries, verdicts=inputs.verdicts
    )
    encoded = encode_status_document(inputs, part)
    assert encoded == encode_json(expected)
    assert encode_status_document(inputs) == encoded
    assert json.loads(encoded) == expected
    assert build_status_document(inputs, part) == expected


def test_meshed_counts_nodes_per_cluster() -> None:
    doc = json.loads(encode_status_document(_meshed()))
    counts = {c["name"]: c["node_count"] for c in doc["clusters"]}
    assert counts == {"lab1": 3, "lab2": 1, "lab3": 0}
    assert doc["summary"]["total"] == 4
    assert "refusé" in encode_status_document(_meshed()).decode()  # UTF-8, not \\u escapes


def test_fresh_fields_change_without_a_rebuild() -> None:
    inputs = status_stories.healthy()
    cache = NodesCache(inputs.local)
    before = json.loads(encode_status_document(inputs, cache.get(inputs.targets, inputs.summaries)))
    later = dataclasses.replace(
        inputs,
        now=inputs.now + 7,
        etcd=EtcdState(up=False, since=inputs.now + 5, last_error="connection refused"),
        round=RoundState(running=True, completed=99),
    )
    after = json.loads(encode_status_document(later, cache.get(later.targets, later.summaries)))
    assert cache.builds == 1
    assert after == build_status_document(later)
    assert (after["generated_at"], before["generated_at"]) == (
        "2026-11-22T10:00:10Z",
        "2026-11-22T10:00:03Z",
    )
    assert after["round"]["running"] and after["etcd"]["up"] is False
    assert after["nodes"] == before["nodes"]


def test_cache_rebuilds_when_summaries_or_targets_change() -> None:
    healthy, failing = status_stories.healthy(), status_stories.agent_down()
    cache = NodesCache(healthy.local)
    first = cache.get(healthy.targets, healthy.summaries)
    assert cache.get(list(healthy.targets), healthy.summaries) is first  # equal targets
    assert cache.builds == 1
    # A new round: new summaries (a new mapping, even when equal in content).
    second = cache.get(failing.targets, failing.summaries)
    assert cache.builds == 2
    assert second.summary == {
        "reachable": 1,
        "unreachable": 2,
        "suspect": 0,
        "unknown": 0,
        "total": 3,
    }
    assert first.summary["reachable"] == 3
    # A node left the probe set.
    third = cache.get(failing.targets[:2], failing.summaries)
    assert cache.builds == 3
    assert [n["name"] for n in third.nodes] == ["node1", "node2"]
    assert cache.get(failing.targets[:2], dict(failing.summaries)) is not third
    assert cache.builds == 4


def test_admin_response_sends_encoded_json_as_is() -> None:
    response = json_response(200, EncodedJson(b'{"a":1}'))
    assert (response.status_code, response.body) == (200, b'{"a":1}\n')
    assert json_response(200, {"a": 1}).body == b'{"a": 1}\n'
