"""The cluster summary: its keys, its codec (tables + hypothesis), the cross-observer
rule, and building it from the matrix and diagnosis (pure)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.agent.cluster_view.aggregator import summarise
from meshhealth.diagnosis.cluster_summary import build_summary, hold_new_paths, keep_since
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.cluster_health import discounted_text, this_node_text
from meshhealth.documents.matrix import build_matrix, stale_after_s
from meshhealth.documents.reachability import node_consensus
from meshhealth.model import HealthReport
from meshhealth.wire import keys
from meshhealth.wire.claim import AggregatorClaim, decode_claim, encode_claim
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.summary import (
    MAX_COUNT,
    NODE_STATES,
    ClusterSummary,
    DiscountedObserver,
    NodeCounts,
    SummaryFinding,
    decode_summary,
    encode_summary,
    finding_to_wire,
    summary_to_wire,
)
from meshhealth.wire.values import decode_cluster_value
from tests import matrix_stories as S
from tests.kv_strategies import clean_chars, cluster_names, node_names, times

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
    data = encode_summary(SUMMARY)
    assert decode_summary(data) == SUMMARY
    wire = msgpack.unpackb(data)
    assert wire["v"] == 1
    assert wire["nodes"] == {"reachable": 2, "unreachable": 1, "suspect": 0, "unknown": 0}
    assert wire["observers"] == {"min": 2, "median": 2.0}
    assert wire["failing_observers"] == {"lab1/node3": 2}
    # fields older writers do not send: absent reads as empty
    assert decode_summary(_wire(node_states=None, discounted=None)) == SUMMARY
    assert "groups" not in wire["findings"][0] and len(wire["findings"][1]["groups"]) == 2
    assert decode_cluster_value(keys.summary_key("lab1"), data) == SUMMARY


def test_claim_round_trip() -> None:
    claim = AggregatorClaim("lab1", "node2", 1_795_000_000.0)
    data = encode_claim(claim)
    assert decode_claim(data) == claim
    assert decode_cluster_value(keys.aggregator_key("lab1"), data) == claim


def _wire(**changes: object) -> bytes:
    wire = summary_to_wire(SUMMARY)
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
        (_wire(node_states={"lab1/node3": "gone"}), "field 'node_states.lab1/node3': must be"),
        (_wire(node_states={"node3": "unreachable"}), "is not cluster/node"),
        (_wire(node_states=[1]), "field 'node_states': must be a map"),
        (_wire(discounted={"lab1/node3": 1}), "field 'discounted.lab1/node3': must be a map"),
        (_wire(discounted={"lab1/node3": {"reason": "x"}}),
         "missing field 'discounted.lab1/node3.fails'"),
        (_wire(discounted={"lab1/node3": {"reason": "\x1b[31m", "fails": 0, "targets": 0,
                                          "reached_by": 0, "observers": 0}}),
         "field 'discounted.lab1/node3.reason'"),
        (_wire(findings=[{**finding_to_wire(FINDING), "confidence": 1.5}]),
         "confidence': must be 0..1"),
        (_wire(findings=[{**finding_to_wire(FINDING), "nodes": ["x"]}]),
         "findings[0].nodes[0]"),
        (_wire(findings="none"), "field 'findings': must be a list"),
    ],
)  # fmt: skip
def test_bad_summaries_are_one_line_errors(data: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        decode_summary(data)


def test_the_key_and_the_value_must_agree() -> None:
    data = encode_summary(SUMMARY)
    with pytest.raises(DecodeError, match="the key says 'lab2'"):
        decode_cluster_value(keys.summary_key("lab2"), data)
    with pytest.raises(DecodeError, match="not an aggregator or summary key"):
        decode_cluster_value(keys.health_key("lab1", "n1"), data)


def test_encoding_refuses_what_it_could_not_read_back() -> None:
    with pytest.raises(ValueError, match="cannot encode cluster summary"):
        encode_summary(ClusterSummary("lab1", "node1", 1.0, NodeCounts(), 0, 0.0, {"bad": 1}))


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
    evidence=st.text(clean_chars, max_size=80),
    groups=st.lists(st.lists(node_refs, max_size=3).map(tuple), max_size=3).map(tuple),
)
counts = st.integers(min_value=0, max_value=MAX_COUNT)
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
    node_states=st.dictionaries(node_refs, st.sampled_from(NODE_STATES), max_size=5).map(
        lambda d: dict(sorted(d.items()))
    ),
    discounted=st.dictionaries(
        node_refs,
        st.builds(
            DiscountedObserver,
            st.sampled_from(["egress-blocked", "node-isolated", "degraded"]),
            counts,
            counts,
            counts,
            counts,
        ),
        max_size=3,
    ).map(lambda d: dict(sorted(d.items()))),
)


@settings(deadline=None, max_examples=100)
@given(summaries)
def test_every_summary_survives_the_wire(summary: ClusterSummary) -> None:
    assert decode_summary(encode_summary(summary)) == summary


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_is_a_decode_error_never_a_crash(data: bytes) -> None:
    try:
        decode_summary(data)
        decode_claim(data)
    except DecodeError:
        pass


# --- the cross-observer rule --------------------------------------------------------------


def _votes(states: list[str]) -> list[tuple[str, str]]:
    return [(f"lab1/o{i}", state) for i, state in enumerate(states)]


@pytest.mark.parametrize(
    ("cells", "verdict"),
    [
        ([], "unknown"),
        (["stale", "unknown"], "unknown"),
        (["reachable", "reachable"], "reachable"),
        (["reachable", "unreachable", "reachable"], "reachable"),  # one observer alone
        (["unreachable", "reachable"], "suspect"),  # split evenly: no majority
        (["unreachable", "unreachable", "reachable"], "unreachable"),
        (["unreachable", "stale", "unknown"], "unreachable"),  # the one that knows
        (["suspect", "suspect", "suspect"], "suspect"),  # in suspicion: no verdict yet
        (["suspect", "unreachable", "unreachable"], "unreachable"),
        (["suspect", "suspect", "unreachable"], "suspect"),  # most still in suspicion
        (["reachable", "suspect", "suspect"], "suspect"),
    ],
)
def test_node_consensus(cells: list[str], verdict: str) -> None:
    assert node_consensus(_votes(cells)).state == verdict


@pytest.mark.parametrize(
    ("cells", "discounted", "verdict", "counting", "left_out"),
    [
        # an egress-blocked observer's failure does not count: the node stays reachable
        (["unreachable", "reachable"], {"lab1/o0"}, "reachable", 1, 1),
        # a discounted observer that reaches the node counts
        (["reachable", "unreachable"], {"lab1/o0"}, "suspect", 2, 0),
        # every observer discounted: no evidence, never "reachable"
        (["suspect", "unreachable"], {"lab1/o0", "lab1/o1"}, "unknown", 0, 2),
        # the isolated node: the healthy observers still fail it
        (["unreachable", "unreachable", "unreachable"], {"lab1/o9"}, "unreachable", 3, 0),
    ],
)
def test_node_consensus_leaves_discounted_failures_out(
    cells: list[str], discounted: set[str], verdict: str, counting: int, left_out: int
) -> None:
    consensus = node_consensus(_votes(cells), discounted)
    assert (consensus.state, consensus.counting, consensus.discounted) == (
        verdict,
        counting,
        left_out,
    )


_ORDER = {"reachable": 0, "unknown": 0, "suspect": 1, "unreachable": 2}
_CELLS = st.lists(st.sampled_from(["reachable", "unreachable", "suspect", "stale", "unknown"]))


@settings(deadline=None)
@given(_CELLS)
def test_one_more_failing_observer_never_makes_a_node_look_better(cells: list[str]) -> None:
    before = node_consensus(_votes(cells)).state
    after = node_consensus([*_votes(cells), ("lab1/new", "unreachable")]).state
    assert _ORDER[after] >= _ORDER[before] or before == "unknown"


@settings(deadline=None)
@given(_CELLS, st.sets(st.integers(0, 20)))
def test_discounting_leaves_out_only_failures(cells: list[str], left: set[int]) -> None:
    """A discounted observer loses its failing votes only: a reachable node stays
    reachable, and the reaching votes are the same."""
    votes = _votes(cells)
    discounted = {f"lab1/o{i}" for i in left}
    before = node_consensus(votes)
    after = node_consensus(votes, discounted)
    assert after.reaching == before.reaching
    assert after.counting + after.discounted == before.counting
    if before.state == "reachable":
        assert after.state == "reachable"


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
    # node3 fails from node1 and node2 (2 of 2); node3 itself fails to reach both, but
    # it is isolated: its own row explains its failures, so they count against nobody.
    assert summary.nodes == NodeCounts(reachable=2, unreachable=1, suspect=0)
    assert summary.node_states == {"lab1/node3": "unreachable"}
    assert summary.failing_observers == {"lab1/node3": 2}
    assert [(f.kind, f.nodes) for f in summary.findings] == [("node-isolated", ("lab1/node3",))]
    assert 0.5 < summary.findings[0].confidence <= 1.0
    assert summary.discounted == {
        "lab1/node3": DiscountedObserver(
            "node-isolated", fails=2, targets=2, reached_by=0, observers=2
        )
    }


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


# --- the headline follows the diagnosis (one broken observer never sinks others) ----------


@pytest.mark.parametrize(
    ("story", "counts", "node_states", "discounted", "headline"),
    [
        (
            S.egress_blocked,
            NodeCounts(reachable=6),
            {},
            {"lab1/node3": "egress-blocked"},
            "lab1/node3 cannot reach out (egress-blocked)",
        ),
        (
            S.isolated,
            NodeCounts(reachable=5, unreachable=1),
            {"lab1/node4": "unreachable"},
            {"lab1/node4": "node-isolated"},
            "lab1/node4 is cut off (node-isolated)",
        ),
        (
            S.two_groups,
            NodeCounts(reachable=4, unreachable=2),
            {"lab1/node1": "unreachable", "lab1/node2": "unreachable"},
            {"lab1/node1": "partition", "lab1/node2": "partition"},
            "lab1/node1, lab1/node2 are cut off from the main group (partition)",
        ),
        (
            # node6 is reached by 3 of the 4 fresh observers: reachable, the path is a finding
            S.agent_down_and_path_drop,
            NodeCounts(reachable=5, unreachable=1),
            {"lab1/node2": "unreachable"},
            {},
            None,
        ),
    ],
)
def test_the_verdict_agrees_with_the_findings(
    story: Callable[[], list[HealthReport]],
    counts: NodeCounts,
    node_states: dict[str, str],
    discounted: dict[str, str],
    headline: str | None,
) -> None:
    summary = _summary(story())
    assert summary.nodes == counts
    assert summary.node_states == node_states
    assert {name: d.reason for name, d in summary.discounted.items()} == discounted
    assert discounted_text(summary.discounted) == headline
    # every discounted observer is named by a finding of the same kind
    named = {(f.kind, node) for f in summary.findings for node in f.nodes}
    assert all((reason, name) in named for name, reason in discounted.items())


def test_the_discounted_node_is_told_what_is_wrong_with_it() -> None:
    summary = _summary(S.egress_blocked())
    assert this_node_text(summary.discounted["lab1/node3"]) == (
        "This node (egress-blocked): its own probes fail to 5 of 5 targets while 5 of 5 "
        "observers reach it: look at this node's egress (output firewall rules, routes, "
        "its NIC)"
    )


def test_many_discounted_observers_are_named_up_to_three() -> None:
    many = {f"lab1/node{i}": DiscountedObserver("degraded") for i in (10, 2, 11, 1, 3)}
    assert discounted_text(many) == (  # in natural order: node2 before node10
        "lab1/node1, lab1/node2, lab1/node3 and 2 more are degraded (degraded)"
    )


# --- path findings settle before they are published ---------------------------------

PATH_A = SummaryFinding("path", ("lab1/node1", "lab1/node3"), 0.5, 90.0, "node1 -> node3")
PATH_B = SummaryFinding("path", ("lab1/node2", "lab1/node3"), 0.5, 95.0, "node2 -> node3")
DOWN3 = SummaryFinding("node-down", ("lab1/node3",), 0.88, 90.0, "3 of 3 fail")


def published_over(
    rounds: list[tuple[float, list[SummaryFinding]]], settle_s: float = 5.0
) -> list[list[str]]:
    """Feed (time, findings) in turn, as the aggregator does (what it showed last is
    `shown`); the findings published each time, as kind:first-node."""
    seen: dict[tuple[str, tuple[str, ...]], float] = {}
    shown: set[tuple[str, tuple[str, ...]]] = set()
    out = []
    for now, findings in rounds:
        held = hold_new_paths(findings, seen, shown=shown, now=now, settle_s=settle_s)
        seen, shown = held.first_seen, {(f.kind, f.nodes) for f in held.findings}
        out.append([f"{f.kind}:{f.nodes[0]}" for f in held.findings])
    return out


# rounds -> what each publishes
SETTLE_TABLE = {
    # a node fault's onset: two observers' paths, then the node's own finding
    "onset never shows its paths": (
        [(100, [PATH_A]), (101, [PATH_A, PATH_B]), (102, [DOWN3])],
        [[], [], ["node-down:lab1/node3"]],
    ),
    # its recovery: the node finding gives way to the last observer's path, then nothing
    "recovery never shows its paths": (
        [(200, [DOWN3]), (201, [PATH_B]), (203, [])],
        [["node-down:lab1/node3"], [], []],
    ),
    "a path that lasts shows once settled, and stays": (
        [(100, [PATH_A]), (104.9, [PATH_A]), (105, [PATH_A]), (300, [PATH_A])],
        [[], [], ["path:lab1/node1"], ["path:lab1/node1"]],
    ),
    "a path that goes and comes back settles again": (
        [(100, [PATH_A]), (106, [PATH_A]), (107, []), (108, [PATH_A]), (113, [PATH_A])],
        [[], ["path:lab1/node1"], [], [], ["path:lab1/node1"]],
    ),
    "other kinds are never held": (
        [(100, [DOWN3, PATH_A])],
        [["node-down:lab1/node3"]],
    ),
}


@pytest.mark.parametrize("name", sorted(SETTLE_TABLE))
def test_path_findings_are_published_once_they_last(name: str) -> None:
    rounds, published = SETTLE_TABLE[name]
    assert published_over(rounds) == published


def test_a_shown_path_stays_and_the_wake_time_is_the_next_to_settle() -> None:
    """After a takeover (an open event) or a failed write, what was shown is not held
    again; the aggregator wakes when the earliest held finding settles."""
    held = hold_new_paths([PATH_A, PATH_B], {}, shown={("path", PATH_A.nodes)}, now=100, settle_s=5)
    assert held.findings == (PATH_A,)
    assert held.settles_at == 105 and held.first_seen == {
        ("path", PATH_A.nodes): 100,
        ("path", PATH_B.nodes): 100,
    }
    later = hold_new_paths([PATH_B], {("path", PATH_B.nodes): 97}, shown=set(), now=100, settle_s=5)
    assert later.findings == () and later.settles_at == 102
    assert hold_new_paths([DOWN3], {}, shown=set(), now=1, settle_s=5).settles_at is None
    # A clock stepped back: never a first-seen in the future.
    back = hold_new_paths([PATH_A], {("path", PATH_A.nodes): 500}, shown=set(), now=100, settle_s=5)
    assert back.first_seen == {("path", PATH_A.nodes): 100}
