"""The cluster summary: its keys, its codec (tables + hypothesis), the cross-observer
rule, and building it from the matrix and diagnosis (pure)."""

from __future__ import annotations

import math
from dataclasses import replace

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth import keys, summary_codec
from meshhealth.agent.cluster_view.aggregator import summarise
from meshhealth.diagnosis.cluster_summary import build_summary, keep_since
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.from_matrix import matrix_view
from meshhealth.documents.matrix import build_matrix, stale_after_s
from meshhealth.documents.reachability import observed_reachability
from meshhealth.summary_codec import (
    AggregatorClaim,
    ClusterSummary,
    DecodeError,
    NodeCounts,
    SummaryFinding,
)
from tests import matrix_stories as S
from tests.kv_strategies import cluster_names, node_names, times

FINDING = SummaryFinding(
    kind="node-down",
    nodes=("lab1/node3",),
    confidence=0.88,
    since=1_795_000_000.0,
    evidence="nothing answers from 2 of 2 observers",
)
PARTITION = SummaryFinding(
    kind="partition",
    nodes=("lab1/node3",),
    confidence=0.9,
    since=1_795_000_000.0,
    evidence="2 groups",
    groups=(("lab1/node1", "lab1/node2"), ("lab1/node3",)),
)
SUMMARY = ClusterSummary(
    cluster="lab1",
    aggregator="node1",
    generated_at=1_795_000_012.5,
    nodes=NodeCounts(reachable=2, unreachable=1, suspect=0, unknown=0),
    observers_min=2,
    observers_median=2.0,
    failing_observers={"lab1/node3": 2},
    findings=(FINDING, PARTITION),
)


# --- keys -------------------------------------------------------------------------------


def test_keys_of_the_cluster_values() -> None:
    assert keys.aggregator_key("lab1") == "meshhealth/state/aggregator/v1/lab1"
    assert keys.summary_key("lab1") == "meshhealth/state/summary/v1/lab1"
    assert keys.parse_key(keys.summary_key("lab1")) == keys.ParsedKey(
        keys.KeyKind.SUMMARY, "lab1", None
    )
    assert keys.parse_key(keys.aggregator_key("a-b").encode()) == keys.ParsedKey(
        keys.KeyKind.AGGREGATOR, "a-b", None
    )
    with pytest.raises(ValueError, match="invalid cluster name"):
        keys.summary_key("Lab1")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "meshhealth/state/summary/v1/lab1/node1",
            "expected meshhealth/state/summary/v1/<cluster>",
        ),
        ("meshhealth/state/aggregator/v1", "expected meshhealth/state/aggregator/v1/<cluster>"),
        ("meshhealth/state/summary/v2/lab1", "unsupported key version"),
        ("meshhealth/state/summary/v1/LAB", "invalid cluster name"),
    ],
)
def test_bad_cluster_value_keys(key: str, message: str) -> None:
    with pytest.raises(keys.InvalidKey, match=message):
        keys.parse_key(key)


# --- codec ------------------------------------------------------------------------------


def test_summary_round_trip_and_wire_fields() -> None:
    data = summary_codec.encode_summary(SUMMARY)
    assert summary_codec.decode_summary(data) == SUMMARY
    wire = msgpack.unpackb(data)
    assert wire["v"] == 1
    assert wire["nodes"] == {"reachable": 2, "unreachable": 1, "suspect": 0, "unknown": 0}
    assert wire["observers"] == {"min": 2, "median": 2.0}
    assert wire["failing_observers"] == {"lab1/node3": 2}
    assert "groups" not in wire["findings"][0] and len(wire["findings"][1]["groups"]) == 2
    assert summary_codec.decode_cluster_value(keys.summary_key("lab1"), data) == SUMMARY


def test_claim_round_trip() -> None:
    claim = AggregatorClaim("lab1", "node2", 1_795_000_000.0)
    data = summary_codec.encode_claim(claim)
    assert summary_codec.decode_claim(data) == claim
    assert summary_codec.decode_cluster_value(keys.aggregator_key("lab1"), data) == claim


def _wire(**changes: object) -> bytes:
    wire = summary_codec.summary_to_wire(SUMMARY)
    for name, value in changes.items():
        if value is None:
            del wire[name]
        else:
            wire[name] = value
    return msgpack.packb(wire, use_bin_type=True)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xc1", "not valid msgpack"),
        (msgpack.packb([1, 2]), "must be a msgpack map"),
        (_wire(v=2), "unsupported schema version 2"),
        (_wire(cluster=None), "missing field 'cluster'"),
        (_wire(aggregator="Node 1"), "field 'aggregator'"),
        (_wire(generated_at=-1.0), "field 'generated_at': must not be negative"),
        (_wire(nodes={"reachable": 1}), "missing field 'nodes.unreachable'"),
        (_wire(nodes={"reachable": True, "unreachable": 0, "suspect": 0, "unknown": 0}),
         "field 'nodes.reachable': must be an integer"),
        (_wire(observers={"min": -1, "median": 0}), "field 'observers.min'"),
        (_wire(failing_observers={"node3": 1}), "is not cluster/node"),
        (_wire(failing_observers={"lab1/node3": 1.5}), "field 'failing_observers.lab1/node3'"),
        (_wire(findings=[{"kind": "node-down"}]), "missing field 'findings[0].nodes'"),
        (_wire(findings=[{**summary_codec._finding_to_wire(FINDING), "confidence": 1.5}]),
         "confidence': must be 0..1"),
        (_wire(findings=[{**summary_codec._finding_to_wire(FINDING), "nodes": ["x"]}]),
         "findings[0].nodes[0]"),
        (_wire(findings="none"), "field 'findings': must be a list"),
    ],
)  # fmt: skip
def test_bad_summaries_are_one_line_errors(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        summary_codec.decode_summary(data)


def test_the_key_and_the_value_must_agree() -> None:
    data = summary_codec.encode_summary(SUMMARY)
    with pytest.raises(DecodeError, match="the key says 'lab2'"):
        summary_codec.decode_cluster_value(keys.summary_key("lab2"), data)
    with pytest.raises(DecodeError, match="not an aggregator or summary key"):
        summary_codec.decode_cluster_value(keys.health_key("lab1", "n1"), data)


def test_encoding_refuses_what_it_could_not_read_back() -> None:
    with pytest.raises(ValueError, match="cannot encode cluster summary"):
        summary_codec.encode_summary(
            ClusterSummary("lab1", "node1", 1.0, NodeCounts(), 0, 0.0, {"bad": 1})
        )


def test_same_content_ignores_only_the_time() -> None:
    later = ClusterSummary(**{**_fields(SUMMARY), "generated_at": SUMMARY.generated_at + 60})
    assert SUMMARY.same_content(later)
    assert not SUMMARY.same_content(None)
    fewer = ClusterSummary(**{**_fields(SUMMARY), "findings": (FINDING,)})
    assert not SUMMARY.same_content(fewer)


def _fields(summary: ClusterSummary) -> dict[str, object]:
    return {name: getattr(summary, name) for name in ClusterSummary.__dataclass_fields__}


node_refs = st.builds(lambda c, n: f"{c}/{n}", cluster_names, node_names)
findings = st.builds(
    SummaryFinding,
    kind=st.sampled_from(["node-down", "agent-down", "partition", "path", "a-newer-kind"]),
    nodes=st.lists(node_refs, max_size=4).map(tuple),
    confidence=st.floats(min_value=0, max_value=1),
    since=times,
    evidence=st.text(max_size=80),
    groups=st.lists(st.lists(node_refs, max_size=3).map(tuple), max_size=3).map(tuple),
)
counts = st.integers(min_value=0, max_value=summary_codec.MAX_COUNT)
summaries = st.builds(
    ClusterSummary,
    cluster=cluster_names,
    aggregator=node_names,
    generated_at=times,
    nodes=st.builds(NodeCounts, counts, counts, counts, counts),
    observers_min=counts,
    observers_median=st.floats(min_value=0, max_value=1e6),
    failing_observers=st.dictionaries(node_refs, st.integers(1, 10_000), max_size=5).map(
        lambda d: dict(sorted(d.items()))
    ),
    findings=st.lists(findings, max_size=4).map(tuple),
)


@settings(deadline=None, max_examples=100)
@given(summaries)
def test_every_summary_survives_the_wire(summary: ClusterSummary) -> None:
    assert summary_codec.decode_summary(summary_codec.encode_summary(summary)) == summary


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_is_a_decode_error_never_a_crash(data: bytes) -> None:
    try:
        summary_codec.decode_summary(data)
        summary_codec.decode_claim(data)
    except DecodeError:
        pass


# --- the cross-observer rule --------------------------------------------------------------


@pytest.mark.parametrize(
    ("cells", "verdict"),
    [
        ([], "unknown"),
        (["stale", "unknown"], "unknown"),
        (["reachable", "reachable"], "reachable"),
        (["reachable", "unreachable", "reachable"], "suspect"),  # one observer alone
        (["unreachable", "reachable"], "suspect"),  # half is not most
        (["unreachable", "unreachable", "reachable"], "unreachable"),
        (["unreachable", "stale", "unknown"], "unreachable"),  # the one that knows
        (["suspect", "suspect", "suspect"], "suspect"),  # in suspicion: no verdict yet
        (["suspect", "unreachable", "unreachable"], "unreachable"),
    ],
)
def test_observed_reachability(cells: list[str], verdict: str) -> None:
    assert observed_reachability(cells) == verdict


@settings(deadline=None)
@given(st.lists(st.sampled_from(["reachable", "unreachable", "suspect", "stale", "unknown"])))
def test_one_more_failing_observer_never_makes_a_node_look_better(cells: list[str]) -> None:
    order = {"reachable": 0, "unknown": 0, "suspect": 1, "unreachable": 2}
    before = observed_reachability(cells)
    after = observed_reachability([*cells, "unreachable"])
    assert order[after] >= order[before] or before == "unknown"


# --- building it from the matrix --------------------------------------------------------------


def _summary(reports: list, cluster: str = "lab1") -> ClusterSummary:
    matrix = build_matrix(reports, now=S.NOW, source_clusters=[cluster])
    return build_summary(matrix, diagnose(matrix_view(matrix)), cluster=cluster, aggregator="node1")


def test_healthy_cluster() -> None:
    summary = _summary(S.healthy())
    assert summary.nodes == NodeCounts(reachable=3)
    assert (summary.observers_min, summary.observers_median) == (2, 2.0)
    assert summary.failing_observers == {} and summary.findings == ()
    assert summary.generated_at == S.NOW and summary.aggregator == "node1"


def test_node_unreachable_by_all_names_it_with_its_failing_observers() -> None:
    summary = _summary(S.node_unreachable_by_all())
    # node3 fails from node1 and node2 (2 of 2); node3 itself fails to reach both, one
    # observer alone against one that reaches them: suspect, not unreachable.
    assert summary.nodes == NodeCounts(reachable=0, unreachable=1, suspect=2)
    assert summary.failing_observers == {"lab1/node1": 1, "lab1/node2": 1, "lab1/node3": 2}
    assert [(f.kind, f.nodes) for f in summary.findings] == [("node-isolated", ("lab1/node3",))]
    assert 0.5 < summary.findings[0].confidence <= 1.0


def test_stale_rows_say_nothing_and_remote_targets_are_counted_apart() -> None:
    summary = _summary(S.stale_and_missing())
    # node1 is the only fresh observer: node2 and node3 reachable by it, node1 itself
    # observed by nobody fresh (node2's row is stale).
    assert summary.nodes == NodeCounts(reachable=2, unknown=1)
    assert summary.observers_min == 0 and summary.observers_median == 1.0
    assert summary.nodes.total == 3  # lab2/node1 is not lab1's


def test_summarise_says_when_the_next_report_turns_stale() -> None:
    reports = S.healthy()  # every report 2 s old
    summary, turns_stale_at = summarise(reports, cluster="lab1", aggregator="node1", now=S.NOW)
    assert summary.nodes.reachable == 3
    assert turns_stale_at == pytest.approx(S.NOW - 2.0 + stale_after_s(S.INTERVAL_S))
    _, never = summarise([], cluster="lab1", aggregator="node1", now=S.NOW)
    assert never == math.inf


def test_a_finding_that_goes_on_keeps_its_first_since() -> None:
    first = _summary(S.node_unreachable_by_all())
    later_reports = [replace(r, probe_time=r.probe_time + 20) for r in S.node_unreachable_by_all()]
    matrix = build_matrix(later_reports, now=S.NOW + 20, source_clusters=["lab1"])
    later = build_summary(matrix, diagnose(matrix_view(matrix)), cluster="lab1", aggregator="node1")
    assert later.findings[0].since == first.findings[0].since + 20  # the newest report's
    kept = keep_since(later, first)
    assert kept.findings[0].since == first.findings[0].since
    assert kept.same_content(first)  # nothing to write
    assert keep_since(later, None) == later
