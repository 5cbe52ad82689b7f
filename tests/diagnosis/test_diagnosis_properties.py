"""Properties of diagnosis over random matrices (hypothesis).

- a healthy matrix (ok, suspect or unassigned paths, any subset of cells) gives nothing;
- a single bad observer (every assigned path of its row failing, everyone else healthy,
  any subset of cells, degraded or not, with any published reasons) never gives a
  finding that names another node;
- one fault of each kind on one node, everyone else healthy, any subset of cells: the
  finding is that fault on that node and nothing else, whenever enough cells show it;
- findings are deterministic and do not depend on the order of cells or observers;
- every finding is well formed (confidence in 0..1, known nodes, cells from the input).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.diagnosis.cells import (
    MatrixCell,
    NodeId,
    Observer,
    PathKind,
    PathObservation,
)
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import FindingKind, findings_json
from meshhealth.diagnosis.local_health import REASON_CODES
from meshhealth.diagnosis.view import MatrixView
from meshhealth.model import Reachability

T0 = 1_800_000_000.0
OK, UNR = Reachability.REACHABLE, Reachability.UNREACHABLE
HEALTHY = (Reachability.REACHABLE, Reachability.SUSPECT, Reachability.UNASSIGNED)
FAILING = (Reachability.UNREACHABLE, Reachability.SUSPECT, Reachability.UNASSIGNED)


@st.composite
def node_ids(draw: st.DrawFn) -> list[NodeId]:
    count = draw(st.integers(2, 8))
    clusters = draw(st.sampled_from([("lab1",), ("lab1", "lab2")]))
    return [NodeId(clusters[i % len(clusters)], f"node{i}") for i in range(count)]


def _paths(draw: st.DrawFn, states: tuple[Reachability, ...]) -> dict[PathKind, PathObservation]:
    paths = {}
    for kind in PathKind:
        state = draw(st.sampled_from(states))
        if state is not Reachability.UNASSIGNED:
            paths[kind] = PathObservation(state, T0 + draw(st.integers(0, 100)))
    return paths


@st.composite
def healthy_views(draw: st.DrawFn) -> MatrixView:
    nodes = draw(node_ids())
    cells = [
        MatrixCell(o, t, _paths(draw, HEALTHY))
        for o in nodes
        for t in nodes
        if draw(st.booleans())  # subset probing: any cell may be missing; self cells too
    ]
    return MatrixView.of(cells, [Observer(n) for n in nodes], nodes)


@st.composite
def one_bad_observer(draw: st.DrawFn) -> tuple[MatrixView, NodeId]:
    nodes = draw(node_ids())
    bad = draw(st.sampled_from(nodes))
    cells = []
    for o in nodes:
        for t in nodes:
            if o == t or not draw(st.booleans()):
                continue
            if o == bad:
                paths = _paths(draw, FAILING)
                # "every assigned path failing": at least one really unreachable
                paths[PathKind.NODE_ICMP] = PathObservation(Reachability.UNREACHABLE, T0)
            else:
                paths = _paths(draw, HEALTHY)
            cells.append(MatrixCell(o, t, paths))
    degraded = draw(st.booleans())
    reasons = tuple(draw(st.lists(st.sampled_from(REASON_CODES), unique=True, max_size=3)))
    observers = [Observer(n, T0, reasons) if n == bad and degraded else Observer(n) for n in nodes]
    return MatrixView.of(cells, observers, nodes), bad


@st.composite
def any_views(draw: st.DrawFn) -> MatrixView:
    nodes = draw(node_ids())
    cells = [
        MatrixCell(o, t, _paths(draw, tuple(Reachability)))
        for o in nodes
        for t in nodes
        if o != t and draw(st.booleans())
    ]
    observers = [
        Observer(n, T0, tuple(draw(st.lists(st.sampled_from(REASON_CODES), max_size=2))))
        if draw(st.booleans())
        else Observer(n)
        for n in nodes
    ]
    return MatrixView.of(cells, observers, nodes)


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(healthy_views())
def test_a_healthy_matrix_has_no_findings(view: MatrixView) -> None:
    assert diagnose(view) == ()


@settings(max_examples=300, deadline=None)
@given(one_bad_observer())
def test_a_single_bad_observer_never_blames_another_node(case: tuple[MatrixView, NodeId]) -> None:
    view, bad = case
    findings = diagnose(view)
    for finding in findings:
        assert set(finding.nodes) == {bad}, finding
        assert finding.kind in (
            FindingKind.EGRESS_BLOCKED,
            FindingKind.OBSERVER_DEGRADED,
            FindingKind.NODE_ISOLATED,
        ), finding


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(any_views(), st.randoms(use_true_random=False))
def test_findings_do_not_depend_on_input_order(view: MatrixView, random: object) -> None:
    import random as random_module

    assert isinstance(random, random_module.Random)
    cells, observers, nodes = list(view.cells), list(view.observers), list(view.nodes)
    random.shuffle(cells)
    random.shuffle(observers)
    random.shuffle(nodes)
    shuffled = MatrixView.of(cells, observers, nodes)
    first = diagnose(view)
    assert diagnose(view) == first  # deterministic
    assert diagnose(shuffled) == first
    assert findings_json(diagnose(shuffled), T0) == findings_json(first, T0)


@settings(deadline=None)  # how long a case takes depends on the load, not the code
@given(any_views())
def test_findings_are_well_formed(view: MatrixView) -> None:
    known = set(view.nodes)
    pairs = {(c.observer, c.target) for c in view.cells}
    for finding in diagnose(view):
        assert 0.0 < finding.confidence <= 1.0
        assert finding.nodes and set(finding.nodes) <= known
        assert set(finding.cells) <= pairs
        assert finding.evidence
        if finding.kind is FindingKind.PARTITION:
            assert len(finding.groups) >= 2
            members = [n for group in finding.groups for n in group]
            assert len(members) == len(set(members))
            assert set(finding.nodes) < set(members)
        elif finding.kind in PAIR_KINDS:
            assert len(finding.nodes) in (1, 2)
        else:
            assert len(finding.nodes) == 1


# Kinds whose finding may name one pair (observer, target) instead of one node.
PAIR_KINDS = (
    FindingKind.PATH,
    FindingKind.MTU_BLACKHOLE,
    FindingKind.UDP_BLOCKED,
    FindingKind.PORT_BLOCKED,
)


# One fault on one node d, everyone else healthy, any subset of cells: the finding is
# that fault on d and nothing else, as long as enough observers assess d.
# kind -> (pattern of d's column, pattern of d's row or None for a stale report)
ONE_FAULT: dict[FindingKind, tuple[tuple[Reachability, ...], tuple[Reachability, ...] | None]] = {
    FindingKind.NODE_DOWN: ((UNR, UNR, UNR, UNR, UNR), None),
    FindingKind.AGENT_DOWN: ((OK, UNR, OK, OK, OK), None),
    FindingKind.ENDPOINT_DOWN: ((OK, OK, UNR, UNR, OK), (OK, OK, OK, OK, OK)),
    FindingKind.INGRESS_BLOCKED: ((UNR, UNR, UNR, UNR, UNR), (OK, OK, OK, OK, OK)),
    FindingKind.MTU_BLACKHOLE: ((OK, OK, OK, OK, UNR), (OK, OK, OK, OK, OK)),
    FindingKind.UDP_BLOCKED: ((OK, OK, OK, OK, OK, UNR), (OK, OK, OK, OK, OK, OK)),
    FindingKind.PORT_BLOCKED: ((OK, OK, OK, OK, OK, OK, UNR), (OK, OK, OK, OK, OK, OK, OK)),
    FindingKind.EGRESS_BLOCKED: ((OK, OK, OK, OK, OK), (UNR, UNR, UNR, UNR, UNR)),
    FindingKind.NODE_ISOLATED: ((UNR, UNR, UNR, UNR, UNR), (UNR, UNR, UNR, UNR, UNR)),
}


def _cell(o: NodeId, t: NodeId, states: tuple[Reachability, ...]) -> MatrixCell:
    return MatrixCell(
        o, t, {k: PathObservation(s, T0) for k, s in zip(PathKind, states, strict=False)}
    )


@st.composite
def one_fault(draw: st.DrawFn) -> tuple[MatrixView, FindingKind, NodeId, int, int]:
    kind = draw(st.sampled_from(sorted(ONE_FAULT)))
    column_states, row_states = ONE_FAULT[kind]
    nodes = draw(node_ids())
    bad = draw(st.sampled_from(nodes))
    cells = []
    observers_of_bad = targets_of_bad = 0
    for o in nodes:
        for t in nodes:
            if o == t or not draw(st.booleans()):
                continue
            if t == bad:
                cells.append(_cell(o, t, column_states))
                observers_of_bad += 1
            elif o == bad:
                states = row_states or (Reachability.STALE,) * len(PathKind)
                cells.append(_cell(o, t, states))
                targets_of_bad += 1
            else:
                cells.append(MatrixCell(o, t, _paths(draw, HEALTHY)))
    observers = [Observer(n) for n in nodes if n != bad or row_states is not None]
    if row_states is None and draw(st.booleans()):
        # a stale report; without cells it cannot say it is stale (no witness then)
        observers.append(Observer(bad))
    silent = row_states is not None or targets_of_bad > 0 or len(observers) < len(nodes)
    return MatrixView.of(cells, observers, nodes), kind, bad, observers_of_bad, int(silent)


@settings(max_examples=200, deadline=None)
@given(one_fault())
def test_one_fault_is_found_on_its_node_whatever_the_subset(
    case: tuple[MatrixView, FindingKind, NodeId, int, int],
) -> None:
    view, kind, bad, observers_of_bad, witness = case
    findings = diagnose(view)
    found = [(f.kind, f.nodes) for f in findings]
    targets_of_bad = sum(1 for c in view.cells if c.observer == bad)
    row_fault = kind in (FindingKind.EGRESS_BLOCKED, FindingKind.NODE_ISOLATED)
    # a stale report is a witness too: one observer is then enough
    needed = 1 if kind in (FindingKind.NODE_DOWN, FindingKind.AGENT_DOWN) and witness else 2
    if kind is FindingKind.NODE_ISOLATED:
        # one cell each way is a tie with a lone observer whose only cell goes to it
        enough = min(targets_of_bad, observers_of_bad) >= 1
        enough = enough and max(targets_of_bad, observers_of_bad) >= 2
    elif row_fault:
        enough = targets_of_bad >= 1
    elif kind is FindingKind.INGRESS_BLOCKED:
        # without cells of its own, nothing shows it alive: node-down is as good a reading
        enough = observers_of_bad >= needed and targets_of_bad >= 1
    else:
        enough = observers_of_bad >= needed
    if enough:
        assert found == [(kind, (bad,))]
        return
    # Too little evidence to blame the node. A lone observer whose only failing cells
    # are with it may be blamed itself (one observer's word never blames another node).
    lone = (
        FindingKind.EGRESS_BLOCKED,
        FindingKind.MTU_BLACKHOLE,
        FindingKind.UDP_BLOCKED,
        FindingKind.PORT_BLOCKED,
        FindingKind.NODE_ISOLATED,
    )
    for finding in findings:
        if bad in finding.nodes:
            continue
        assert finding.kind in lone, finding
        assert all(bad in cell for cell in finding.cells), finding
