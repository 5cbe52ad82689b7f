"""meshhealth.diagnosis.diagnose: one table row per cell pattern and the finding it gives."""

from __future__ import annotations

import pytest

from meshhealth.diagnosis.cells import NodeId, Observer
from meshhealth.diagnosis.diagnose import confidence, diagnose
from meshhealth.diagnosis.findings import FindingKind
from meshhealth.diagnosis.view import MatrixView
from tests.diagnosis_builders import NOW, SINCE, cell, column, mesh, node, row
from tests.repo_paths import REPO_ROOT

ABCD = "abcd"
ABCDE = "abcde"


def _summary(view: MatrixView) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.kind.value, tuple(str(n) for n in f.nodes)) for f in diagnose(view)]


def _n(*names: str) -> tuple[str, ...]:
    return tuple(str(node(n)) for n in names)


def _split(nodes: str, groups: list[str]) -> dict[tuple[str, str], str]:
    """Every pair not inside one group fails (a node in no group is cut off alone)."""
    return {
        (o, t): "down"
        for o in nodes
        for t in nodes
        if o != t and not any(o in g and t in g for g in groups)
    }


CASES: list[tuple[str, MatrixView, list[tuple[str, tuple[str, ...]]]]] = [
    ("healthy", mesh(ABCD), []),
    ("healthy, no endpoints", mesh(ABCD, default="host-only"), []),
    ("settling paths are not evidence", mesh(ABCD, cells=column("d", ABCD, "half")), []),
    ("suspect everywhere is not evidence", mesh(ABCD, default="suspect"), []),
    # nothing of d answers, d does not publish
    ("node-down, stale report", mesh(ABCD, cells=column("d", ABCD, "down"), stale="d"),
     [("node-down", _n("d"))]),
    ("node-down, no report", mesh(ABCD, cells=column("d", ABCD, "down"), missing="d"),
     [("node-down", _n("d"))]),
    # two nodes: one observer plus the node's own stale report are two witnesses
    ("node-down, 2 nodes", mesh("ad", cells=column("d", "ad", "down"), stale="d"),
     [("node-down", _n("d"))]),
    ("two nodes down", mesh(ABCDE, cells={**column("d", ABCDE, "down"),
                                          **column("e", ABCDE, "down")}, stale="de"),
     [("node-down", _n("d")), ("node-down", _n("e"))]),
    # d's kernel answers ICMP, its agent does not answer HTTP
    ("agent-down", mesh(ABCD, cells=column("d", ABCD, "agent"), stale="d"),
     [("agent-down", _n("d"))]),
    ("agent-down, endpoint gone too", mesh(ABCD, cells=column("d", ABCD, "agent+ep"),
                                          missing="d"),
     [("agent-down", _n("d"))]),
    ("agent-down, report still fresh", mesh(ABCD, cells=column("d", ABCD, "agent")),
     [("agent-down", _n("d"))]),
    # its dying round lost its probe of a: the dead agent's last report, not a path
    ("agent-down, its last report fails one path", mesh(ABCD, cells={
        **column("d", ABCD, "agent"), ("d", "a"): "down"}),
     [("agent-down", _n("d"))]),
    # host paths fine, the health endpoint fails
    ("endpoint-down", mesh(ABCD, cells=column("d", ABCD, "endpoint")),
     [("endpoint-down", _n("d"))]),
    ("endpoint-down, responder only", mesh(ABCD, cells=column("d", ABCD, "ep-http")),
     [("endpoint-down", _n("d"))]),
    # d reaches nobody and nobody reaches d, yet it publishes
    ("node-isolated", mesh(ABCD, cells={**column("d", ABCD, "down"), **row("d", ABCD, "down")}),
     [("node-isolated", _n("d"))]),
    ("node-isolated: targets-failing only, its own row still suspect (stretched suspicion)",
     mesh(ABCD, cells={**column("d", ABCD, "down"), **row("d", ABCD, "suspect")}, degraded="d",
          reasons=("targets-failing",)),
     [("node-isolated", _n("d"))]),
    ("ingress-blocked: a suspect row of an agent degraded for loop-lag is not counted",
     mesh(ABCD, cells={**column("d", ABCD, "down"), **row("d", ABCD, "suspect")}, degraded="d",
          reasons=("loop-lag", "targets-failing")),
     [("ingress-blocked", _n("d"))]),
    ("node-isolated: 3 of its 4 targets suspect, one ok (targets-failing only)",
     mesh(ABCDE, cells={**column("d", ABCDE, "down"), **row("d", ABCDE, "suspect"),
                        ("d", "e"): "ok"}, degraded="d", reasons=("targets-failing",)),
     [("node-isolated", _n("d"))]),
    # a suspect row says which side of a blamed node fails, never whom to blame: one
    # observer failing d is a path, however suspect d's own row
    ("path: one observer fails d, d's own row suspect (targets-failing only)",
     mesh(ABCD, cells={("a", "d"): "down", **row("d", ABCD, "suspect")}, degraded="d",
          reasons=("targets-failing",)),
     [("path", _n("a", "d"))]),
    ("node-isolated, degraded by its own count",
     mesh(ABCD, cells={**column("d", ABCD, "down"), **row("d", ABCD, "down")}, degraded="d"),
     [("node-isolated", _n("d"))]),
    # only its row fails
    ("egress-blocked", mesh(ABCD, cells=row("d", ABCD, "down")),
     [("egress-blocked", _n("d"))]),
    # only its column fails; its own probes work
    ("ingress-blocked", mesh(ABCD, cells=column("d", ABCD, "down")),
     [("ingress-blocked", _n("d"))]),
    # one observer's cell half-failed (its ICMP still suspect-free, HTTP failed; big DF
    # lost): nothing else reaches e, so no agent-layer or MTU path beside the node's
    ("ingress-blocked: a half-failed cell into it is no path of its own",
     mesh("abcdef", cells={**column("f", "abcdef", "down"), ("a", "f"): "agent"}),
     [("ingress-blocked", _n("f"))]),
    ("ingress-blocked: a cell into it that loses big DF probes only is no MTU path",
     mesh("abcdef", cells={**column("f", "abcdef", "down"), ("a", "f"): "mtu"}),
     [("ingress-blocked", _n("f"))]),
    ("egress-blocked: a half-failed cell out of it is no path of its own",
     mesh(ABCDE, cells={**row("e", ABCDE, "down"), ("e", "a"): "agent"}),
     [("egress-blocked", _n("e"))]),
    ("one pair", mesh(ABCD, cells={("a", "d"): "down"}), [("path", _n("a", "d"))]),
    # two nodes, a broken link: nothing says which side; the first by name is named
    ("two nodes, one broken link", mesh("ab", cells={("a", "b"): "down", ("b", "a"): "down"}),
     [("node-isolated", _n("a"))]),
    ("one pair, both ways", mesh(ABCD, cells={("a", "d"): "down", ("d", "a"): "down"}),
     [("path", _n("a", "d")), ("path", _n("d", "a"))]),
    ("one pair, agent only", mesh(ABCD, cells={("a", "d"): "agent"}), [("path", _n("a", "d"))]),
    # {a, b} and {c, d, e} do not reach each other
    ("partition 2 | 3", mesh(ABCDE, cells={**{(o, t): "down" for o in "ab" for t in "cde"},
                                           **{(o, t): "down" for o in "cde" for t in "ab"}}),
     [("partition", _n("a", "b"))]),
    ("partition 2 | 2", mesh(ABCD, cells={**{(o, t): "down" for o in "ab" for t in "cd"},
                                          **{(o, t): "down" for o in "cd" for t in "ab"}}),
     [("partition", _n("c", "d"))]),
    ("partition 2 | 3 | 3 and an isolated node",
     mesh("abcdefghi", cells=_split("abcdefghi", ["ab", "cde", "fgh"])),
     [("partition", _n("a", "b", "f", "g", "h")), ("node-isolated", _n("i"))]),
    ("observer-degraded, its failures discounted",
     mesh(ABCD, cells=row("d", ABCD, "down"), degraded="d"),
     [("observer-degraded", _n("d"))]),
    ("egress-blocked: degraded for targets-failing only, its column ok",
     mesh(ABCD, cells=row("d", ABCD, "down"), degraded="d", reasons=("targets-failing",)),
     [("egress-blocked", _n("d"))]),
    ("egress-blocked: targets-failing only, its own row still suspect (stretched suspicion)",
     mesh(ABCD, cells=row("d", ABCD, "suspect"), degraded="d", reasons=("targets-failing",)),
     [("egress-blocked", _n("d"))]),
    ("observer-degraded: a suspect row with loop-lag stays discounted",
     mesh(ABCD, cells=row("d", ABCD, "suspect"), degraded="d",
          reasons=("loop-lag", "targets-failing")),
     [("observer-degraded", _n("d"))]),
    ("observer-degraded: targets-failing with loop-lag stays discounted",
     mesh(ABCD, cells=row("d", ABCD, "down"), degraded="d",
          reasons=("loop-lag", "targets-failing")),
     [("observer-degraded", _n("d"))]),
    ("agent-down, not egress-blocked: targets-failing but its agent does not answer",
     mesh(ABCD, cells={**row("d", ABCD, "down"), **column("d", ABCD, "agent")},
          degraded="d", reasons=("targets-failing",)),
     [("agent-down", _n("d"))]),
    ("observer-degraded: targets-failing but its row mostly fine",
     mesh(ABCD, cells={("d", "a"): "down"}, degraded="d", reasons=("targets-failing",)),
     [("observer-degraded", _n("d"))]),
    ("observer-degraded: etcd-unreachable, its row fails",
     mesh(ABCD, cells=row("d", ABCD, "down"), degraded="d", reasons=("etcd-unreachable",)),
     [("observer-degraded", _n("d"))]),
    ("observer-degraded: its agent does not answer, its report says its loop lags",
     mesh(ABCD, cells=column("d", ABCD, "agent"), degraded="d", reasons=("loop-lag",)),
     [("observer-degraded", _n("d"))]),
    ("observer-degraded, no path: one observer fails HTTP to an agent that says loop-lag",
     mesh(ABCD, cells={("a", "d"): "agent"}, degraded="d", reasons=("loop-lag",)),
     [("observer-degraded", _n("d"))]),
    ("path: one observer fails HTTP to an agent that says nothing",
     mesh(ABCD, cells={("a", "d"): "agent"}),
     [("path", _n("a", "d"))]),
    ("agent-down: its agent does not answer, degraded for etcd only",
     mesh(ABCD, cells=column("d", ABCD, "agent"), degraded="d",
          reasons=("etcd-unreachable",)),
     [("agent-down", _n("d"))]),
    ("observer-degraded, healthy view", mesh(ABCD, degraded="a"),
     [("observer-degraded", _n("a"))]),
    ("observer-degraded, stale report but its agent answers", mesh(ABCD, stale="d"),
     [("observer-degraded", _n("d"))]),
    ("mtu-blackhole on a node", mesh(ABCD, cells=column("d", ABCD, "mtu")),
     [("mtu-blackhole", _n("d"))]),
    ("mtu-blackhole on a node's own link", mesh(ABCD, cells=row("d", ABCD, "mtu")),
     [("mtu-blackhole", _n("d"))]),
    ("mtu-blackhole on one path", mesh(ABCD, cells={("a", "d"): "mtu"}),
     [("mtu-blackhole", _n("a", "d"))]),
    # UDP echoes to d are lost while ICMP and HTTP (TCP) pass: a UDP policy, not an outage
    ("udp-blocked on a node", mesh(ABCD, default="udp-ok", cells=column("d", ABCD, "udp")),
     [("udp-blocked", _n("d"))]),
    ("udp-blocked on a node's own egress", mesh(ABCD, default="udp-ok",
                                                cells=row("d", ABCD, "udp")),
     [("udp-blocked", _n("d"))]),
    ("udp-blocked on one path", mesh(ABCD, default="udp-ok", cells={("a", "d"): "udp"}),
     [("udp-blocked", _n("a", "d"))]),
    # a starved agent answers its UDP echoes late, and times its own probes late: that
    # is its starvation, not a UDP block (the chaos soak's starve fault)
    ("observer-degraded, not udp-blocked: UDP echoes to a lagging agent come late",
     mesh(ABCD, default="udp-ok", cells={("a", "d"): "udp", ("b", "d"): "udp"},
          degraded="d", reasons=("loop-lag",)),
     [("observer-degraded", _n("d"))]),
    ("observer-degraded, not udp-blocked: a lagging observer's UDP probes time out",
     mesh(ABCD, default="udp-ok", cells={("d", "a"): "udp"}, degraded="d",
          reasons=("loop-lag",)),
     [("observer-degraded", _n("d"))]),
    # an agent that is gone answers neither HTTP nor UDP: agent-down only
    ("agent-down, its UDP echo gone too",
     mesh(ABCD, default="udp-ok", cells=column("d", ABCD, "agent+udp")),
     [("agent-down", _n("d"))]),
    ("node-down, UDP lost with everything else",
     mesh(ABCD, default="udp-ok", cells=column("d", ABCD, "down"), stale="d"),
     [("node-down", _n("d"))]),
    # an operator's TCP port on d does not accept while its NodeIP answers
    ("port-blocked on a node", mesh(ABCD, default="l4-ok", cells=column("d", ABCD, "port")),
     [("port-blocked", _n("d"))]),
    ("port-blocked on one path", mesh(ABCD, default="l4-ok", cells={("a", "d"): "port"}),
     [("port-blocked", _n("a", "d"))]),
    ("node-down, its ports with it",
     mesh(ABCD, default="l4-ok", cells=column("d", ABCD, "down+port"), stale="d"),
     [("node-down", _n("d"))]),
    # subset probing: only a and b probe d
    ("subset: node-down seen by two", mesh(ABCD, cells={("c", "d"): "-", ("a", "d"): "down",
                                                        ("b", "d"): "down"}, stale="d"),
     [("node-down", _n("d"))]),
    # only a probes d (d publishes): a single observer's word is a path, not d's fault
    ("subset: one observer, target fresh",
     mesh(ABCD, cells={("b", "d"): "-", ("c", "d"): "-", ("a", "d"): "down"}),
     [("path", _n("a", "d"))]),
    # a's only assigned target fails and nothing else: a's problem, not d's
    ("subset: a bad observer with one cell",
     mesh(ABCD, cells={("a", "b"): "-", ("a", "c"): "-", ("a", "d"): "down"}),
     [("egress-blocked", _n("a"))]),
    ("clustermesh: a remote node down",
     mesh(["lab1/a", "lab1/b", "lab2/c", "lab2/d"],
          cells=column("lab2/d", ["lab1/a", "lab1/b", "lab2/c"], "down"), stale=["lab2/d"]),
     [("node-down", ("lab2/d",))]),
    ("clustermesh: clusters cut apart",
     mesh(["lab1/a", "lab1/b", "lab2/c", "lab2/d", "lab2/e"],
          cells={(o, t): "down" for o in ["lab1/a", "lab1/b", "lab2/c", "lab2/d", "lab2/e"]
                 for t in ["lab1/a", "lab1/b", "lab2/c", "lab2/d", "lab2/e"]
                 if o[:4] != t[:4]}),
     [("partition", ("lab1/a", "lab1/b"))]),
]  # fmt: skip


@pytest.mark.parametrize(("view", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kind(view: MatrixView, expected: list[tuple[str, tuple[str, ...]]]) -> None:
    assert sorted(_summary(view)) == sorted(expected)


def test_every_kind_has_a_case() -> None:
    seen = {kind for _, _, expected in CASES for kind, _ in expected}
    assert seen == {k.value for k in FindingKind}


def test_partition_lists_every_group() -> None:
    cut = {**{(o, t): "down" for o in "ab" for t in "cde"},
           **{(o, t): "down" for o in "cde" for t in "ab"}}  # fmt: skip
    (finding,) = diagnose(mesh(ABCDE, cells=cut))
    assert [[str(n) for n in g] for g in finding.groups] == [
        ["lab1/c", "lab1/d", "lab1/e"],
        ["lab1/a", "lab1/b"],
    ]
    assert len(finding.cells) == 12
    assert "12 probed pairs across fail" in finding.evidence


def test_partition_survives_a_degraded_minority() -> None:
    """2 against 8: the 2 see 8 of 9 targets fail and mark themselves degraded; their
    successes with each other still join them into one group."""
    nodes = "abcdefghij"
    cut = {(o, t): "down" for o in nodes for t in nodes if (o in "ab") != (t in "ab")}
    summary = _summary(mesh(nodes, cells=cut, degraded="ab"))
    assert summary == [("partition", _n("a", "b"))]


def test_node_isolated_evidence_counts_its_own_row() -> None:
    """A degraded node's row is discounted, so the blame explains none of it: the
    evidence still says how much of it fails and how much is still suspect."""
    cells = {**column("d", ABCDE, "down"), **row("d", ABCDE, "suspect"), ("d", "e"): "ok",
             ("d", "a"): "down"}  # fmt: skip
    (finding,) = diagnose(mesh(ABCDE, cells=cells, degraded="d", reasons=("targets-failing",)))
    assert finding.kind is FindingKind.NODE_ISOLATED
    assert "its own report (degraded) says its probes fail to 3 of 4 targets" in finding.evidence
    assert "lab1/c, 2 of them still suspect)" in finding.evidence
    cells = {**column("d", ABCD, "down"), **row("d", ABCD, "down")}
    (finding,) = diagnose(mesh(ABCD, cells=cells, degraded="d"))
    assert finding.evidence.endswith(
        "says its probes fail to 3 of 3 targets (lab1/a, lab1/b, lab1/c)"
    )


def test_node_down_confidence_and_evidence() -> None:
    since = {("a", "d"): SINCE, ("b", "d"): SINCE + 5, ("c", "d"): SINCE + 2}
    view = mesh(ABCD, cells=column("d", ABCD, "down"), stale="d", since=since)
    (finding,) = diagnose(view)
    # 3 failing observers and the stale report: 1 - 0.5^4
    assert finding.confidence == pytest.approx(1 - 0.5**4)
    assert finding.since == SINCE + 5  # since when all of the evidence holds
    assert finding.cells == tuple((node(o), node("d")) for o in "abc")
    assert "from 3 of 3 observers (lab1/a, lab1/b, lab1/c)" in finding.evidence
    assert "stale" in finding.evidence


def test_more_observers_more_confidence() -> None:
    small = diagnose(mesh("abc", cells=column("c", "abc", "endpoint")))[0].confidence
    big = diagnose(mesh("abcdefg", cells=column("g", "abcdefg", "endpoint")))[0].confidence
    assert 0 < small < big <= 1


def test_one_reaching_observer_lowers_confidence_but_not_the_verdict() -> None:
    """4 of 5 observers fail d, one still reaches it (a late report): share 0.8."""
    cells = {**column("d", "abcef", "down"), ("f", "d"): "ok"}
    (finding,) = diagnose(mesh("abcdef", cells=cells, stale="d"))
    assert finding.kind is FindingKind.NODE_DOWN
    assert finding.confidence == pytest.approx(4 / 5 * (1 - 0.5**5))


@pytest.mark.parametrize(
    ("failing", "ok", "expected"),
    [(0, 0, 0.0), (1, 0, 0.5), (2, 0, 0.75), (3, 1, 0.75 * 0.875), (10, 0, 1 - 0.5**10)],
)
def test_confidence(failing: int, ok: int, expected: float) -> None:
    assert confidence(failing, ok) == pytest.approx(expected)


def test_self_probes_are_ignored() -> None:
    view = MatrixView.of([cell("a", "a", "down"), cell("a", "b", "ok"), cell("b", "a", "ok")])
    assert diagnose(view) == ()


def test_duplicate_cells_are_refused() -> None:
    with pytest.raises(ValueError, match="two cells for lab1/a -> lab1/b"):
        MatrixView.of([cell("a", "b", "ok"), cell("a", "b", "down")])


def test_duplicate_observers_are_refused() -> None:
    twice = [Observer(NodeId("lab1", "a")), Observer(NodeId("lab1", "a"), NOW)]
    with pytest.raises(ValueError, match="observer lab1/a listed twice"):
        MatrixView.of([cell("a", "b", "ok")], twice)


def test_an_empty_matrix_has_no_findings() -> None:
    assert diagnose(MatrixView.of([])) == ()
    assert diagnose(MatrixView.of([], nodes=[NodeId("lab1", "a")])) == ()


def test_docs_explain_every_kind() -> None:
    doc = (REPO_ROOT / "docs" / "diagnosis.md").read_text()
    for kind in FindingKind:
        assert f"\n| `{kind.value}` |" in doc, f"docs/diagnosis.md has no row for {kind.value}"


# Names whose text order (node10, node11, node2) is not their natural order: evidence
# lists them as every other view does, node2 before node10 (meshhealth.naming).
NODE_NS = ["node1", "node2", "node3", "node10", "node11"]
TWELVE = [f"node{i}" for i in range(1, 13)]
NATURAL_ORDER_CASES = [
    (
        "endpoint-down: its observers",
        mesh(NODE_NS, cells=column("node3", NODE_NS, "endpoint")),
        "from 4 of 4 observers (lab1/node1, lab1/node2, lab1/node10, lab1/node11)",
    ),
    (
        "egress-blocked: its targets",
        mesh(NODE_NS, cells=row("node3", NODE_NS, "down")),
        "fail to 4 of 4 targets (lab1/node1, lab1/node2, lab1/node10, lab1/node11)",
    ),
    (
        "partition: each group",
        mesh(
            NODE_NS,
            cells={
                (o, t): "down"
                for o in NODE_NS
                for t in NODE_NS
                if (o in ("node2", "node10")) != (t in ("node2", "node10"))
            },
        ),
        "[lab1/node1, lab1/node3, lab1/node11] | [lab1/node2, lab1/node10]",
    ),
    (
        "node-down: the first five of eleven observers",
        mesh(TWELVE, cells=column("node12", TWELVE, "down"), stale=("node12",)),
        "(lab1/node1, lab1/node2, lab1/node3, lab1/node4, lab1/node5 and 6 more)",
    ),
]


@pytest.mark.parametrize(
    ("view", "evidence"),
    [c[1:] for c in NATURAL_ORDER_CASES],
    ids=[c[0] for c in NATURAL_ORDER_CASES],
)
def test_evidence_lists_nodes_in_natural_order(view: MatrixView, evidence: str) -> None:
    (finding,) = diagnose(view)
    assert evidence in finding.evidence, finding.evidence
