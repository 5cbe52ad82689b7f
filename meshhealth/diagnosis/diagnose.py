"""From the matrix to findings: whose fault it is (pure, no I/O).

    findings = diagnose(matrix_view(matrix))  # view.py: the matrix as diagnosis reads it
    doc = findings_json(findings, generated_at=now)

In order: a partition; per layer (connectivity, agent, endpoint, mtu, udp, tcp) the
failures the partition does not explain, localised by votes (`localise`) to a node
whose row and column give the finding's kind; `path` findings for failures no node
explains (none into a node connectivity blamed, nor out of one); `observer-degraded`
for observers whose own report says they are unwell. docs/diagnosis.md explains every
kind and its evidence. Findings are sorted by confidence, then kind and nodes: the same
matrix gives the same findings whatever the order of its cells.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import replace

from meshhealth import defaults
from meshhealth.diagnosis.cells import NodeId
from meshhealth.diagnosis.families import secondary_findings
from meshhealth.diagnosis.findings import Finding, FindingKind, confidence, names
from meshhealth.diagnosis.layers import Layer, LayerEvidence, Pair
from meshhealth.diagnosis.local_health import REASON_LOOP_LAG, REASON_TARGETS_FAILING
from meshhealth.diagnosis.localise import Blame, localise
from meshhealth.diagnosis.partition import Partition, find_partition
from meshhealth.diagnosis.view import MatrixView
from meshhealth.model import TraceStop

# Layers whose probes a starved agent at either end makes late (see `diagnose`).
_ANSWERED_BY_AGENTS = frozenset({Layer.UDP, Layer.TCP})

# What a failing pair means in each layer, for the evidence line.
_FAILS_AS = {
    Layer.CONNECTIVITY: "nothing answers (ICMP and HTTP, NodeIP and HealthIP)",
    Layer.AGENT: "its NodeIP answers ICMP but HTTP to its agent fails",
    Layer.ENDPOINT: "host paths are ok but its health endpoint (HealthIP) fails",
    Layer.MTU: "small ICMP passes but big don't-fragment ICMP is lost",
    Layer.UDP: "ICMP and HTTP to its agent pass but UDP echoes to it are lost",
    Layer.TCP: "its NodeIP answers ICMP but TCP connects to the probed ports fail",
}


# Layers whose every finding, a node's or a path's, is of one kind: what they ask of a
# target that answers is not whether it is reached.
_LAYER_KINDS = {
    Layer.MTU: FindingKind.MTU_BLACKHOLE,
    Layer.UDP: FindingKind.UDP_BLOCKED,
    Layer.TCP: FindingKind.PORT_BLOCKED,
}


def diagnose(
    view: MatrixView,
    *,
    min_observers: int = defaults.DIAGNOSIS_MIN_OBSERVERS,
    share: float = defaults.DIAGNOSIS_FAIL_SHARE,
) -> tuple[Finding, ...]:
    """The findings of `view`."""
    findings: list[Finding] = []
    connectivity = view.layers[Layer.CONNECTIVITY]
    partition = find_partition(
        view.nodes, connectivity.fails.keys(), connectivity.oks, min_nodes=min_observers
    )
    lagging = {n for n, why in view.degraded_reasons.items() if REASON_LOOP_LAG in why}
    explained: set[Pair] = set()
    cut_in: set[NodeId] = set()  # set by the connectivity layer (see below)
    cut_out: set[NodeId] = set()
    if partition is not None:
        findings.append(_partition_finding(partition, connectivity))
        explained = set(partition.across)
    for layer in Layer:
        evidence = view.layers[layer]
        witnesses = view.silent if layer in (Layer.CONNECTIVITY, Layer.AGENT) else frozenset()
        own = evidence.own_fails.keys() | _own_suspect_rows(view, evidence)
        found = localise(
            view.nodes,
            _unexplained(evidence.fails.keys(), explained, cut_in, cut_out),
            evidence.oks,
            own_fails=_unexplained(own, explained, cut_in, cut_out),
            witnesses=witnesses,
            min_witnesses=min_observers,
            share=share,
            counts=(evidence.row_ok, evidence.col_ok),
        )
        blames, paths = found.blames, found.paths
        if layer is Layer.AGENT:  # a starved agent answers late: not the path's fault
            paths = tuple(p for p in paths if p[1] not in lagging)
        if layer in _ANSWERED_BY_AGENTS:
            # UDP echoes are answered by the target's agent, and every L4 probe is timed
            # by the observer's: a starved agent at either end makes them late. That is
            # its starvation (observer-degraded, named below), not a UDP or port block.
            blames = tuple(b for b in blames if b.node not in lagging)
            paths = tuple(p for p in paths if p[0] not in lagging and p[1] not in lagging)
        findings += [_blame_finding(layer, blame, view, evidence) for blame in blames]
        findings += [_path_finding(layer, pair, evidence) for pair in paths]
        if layer is Layer.CONNECTIVITY:
            # Nothing above connectivity is said of a node nothing reaches (into it) or
            # that reaches nothing (out of it): a cell a probe's timing left half-failed
            # there (ICMP still suspect, HTTP failed) is no path fault beside its finding.
            cut_in = {b.node for b in blames if b.column_failing}
            cut_out = {b.node for b in blames if b.row_failing}
    # A dead observer's last report (its agent named down) is not evidence of a path: the
    # probes its dying round lost are its own.
    down = {
        f.nodes[0] for f in findings if f.kind in (FindingKind.AGENT_DOWN, FindingKind.NODE_DOWN)
    }
    findings = [f for f in findings if f.kind is not FindingKind.PATH or f.nodes[0] not in down]
    named = {node for finding in findings for node in finding.nodes}
    findings += secondary_findings(
        view.cells, degraded=view.degraded.keys(), named=named,
        min_observers=min_observers, share=share,
    )  # fmt: skip
    findings += _observer_findings(view, named, min_observers, share)
    findings = _name_the_ports(findings, view)
    findings = _quote_a_trace(findings, view)
    return tuple(sorted(findings, key=lambda f: (-f.confidence, f.kind.value, f.nodes)))


def _name_the_ports(findings: list[Finding], view: MatrixView) -> list[Finding]:
    """A port-blocked finding's evidence with the ports that fail in its cells."""
    if not any(f.kind is FindingKind.PORT_BLOCKED for f in findings):
        return findings
    ports = {(c.observer, c.target): c.failing_ports for c in view.cells if c.failing_ports}
    out = []
    for finding in findings:
        failing = sorted({p for pair in finding.cells for p in ports.get(pair, ())})
        if finding.kind is FindingKind.PORT_BLOCKED and failing:
            named = ", ".join(map(str, failing))
            out.append(replace(finding, evidence=f"{finding.evidence}; TCP port {named}"))
        else:
            out.append(finding)
    return out


# Findings whose evidence quotes where a failing observer's trace stopped.
# Findings where nothing answers from the failing observers: where their trace stops
# says whether the way or the node is cut (a rack's uplink down: node-down in every rack).
_TRACED_KINDS = frozenset(
    {
        FindingKind.PATH,
        FindingKind.PARTITION,
        FindingKind.NODE_ISOLATED,
        FindingKind.NODE_DOWN,
        FindingKind.INGRESS_BLOCKED,
    }
)


def trace_text(observer: NodeId, stop: TraceStop) -> str:
    """`the trace from lab1/a stops after 10.77.0.254 (hop 1)`: the evidence's words."""
    if stop.address is None:
        return f"the trace from {observer} gets no answer from any hop"
    return f"the trace from {observer} stops after {stop.address} (hop {stop.hop})"


def _quote_a_trace(findings: list[Finding], view: MatrixView) -> list[Finding]:
    """A `_TRACED_KINDS` finding's evidence with where the trace of one of its failing
    observers stopped (the first of its cells, in order, that has one)."""
    if not any(f.kind in _TRACED_KINDS for f in findings):
        return findings
    traces = {(c.observer, c.target): c.trace for c in view.cells if c.trace is not None}
    if not traces:
        return findings
    out = []
    for finding in findings:
        traced = next((pair for pair in finding.cells if pair in traces), None)
        if finding.kind in _TRACED_KINDS and traced is not None:
            quote = trace_text(traced[0], traces[traced])
            out.append(replace(finding, evidence=f"{finding.evidence}; {quote}"))
        else:
            out.append(finding)
    return out


def _unexplained(
    pairs: Set[Pair], explained: Set[Pair], cut_in: Set[NodeId], cut_out: Set[NodeId]
) -> Set[Pair]:
    """`pairs` less those the partition explains, those into a node of `cut_in` and
    those out of a node of `cut_out`."""
    if not cut_in and not cut_out:
        return pairs - explained
    return {p for p in pairs if p not in explained and p[1] not in cut_in and p[0] not in cut_out}


def _only_targets_failing(view: MatrixView, node: NodeId) -> bool:
    """Its own report is degraded because most of its targets fail, and for nothing
    else: its failing row is the evidence, not a sign that it misjudges."""
    return view.degraded_reasons.get(node) == (REASON_TARGETS_FAILING,)


def _own_suspect_rows(view: MatrixView, evidence: LayerEvidence) -> set[Pair]:
    """The `suspect` cells of the rows of nodes degraded for targets-failing only.

    Such an agent suspects itself first and stretches its suspicion time, so its own
    failing row stays suspect for several intervals; counted as its own row, they tell
    an isolated node (row and column fail) from an ingress-blocked one at once. They
    only decide which side of a node already blamed fails, never whom to blame."""
    return {pair for pair in evidence.own_unsure if _only_targets_failing(view, pair[0])}


def _since(pairs: Set[Pair], fails: Mapping[Pair, float]) -> float:
    return max(fails[pair] for pair in pairs)


def _partition_finding(partition: Partition, evidence: LayerEvidence) -> Finding:
    across = set(partition.across)
    groups = " | ".join(f"[{names(g, limit=8)}]" for g in partition.groups)
    return Finding(
        FindingKind.PARTITION,
        partition.cut_off,
        confidence(len(across), 0),
        _since(across, evidence.own_fails),
        f"{len(partition.groups)} groups that do not reach each other: {groups}; "
        f"{len(across)} probed pairs across fail, none across succeeds",
        tuple(sorted(across)),
        partition.groups,
    )


def _kind(layer: Layer, blame: Blame, view: MatrixView) -> FindingKind:
    if layer in _LAYER_KINDS:
        return _LAYER_KINDS[layer]
    if not blame.column_failing:
        return FindingKind.EGRESS_BLOCKED
    if layer is Layer.AGENT:
        # Its agent does not answer, and its own report says its loop lags: a starved
        # agent (answering late or not at all), not a dead one.
        if REASON_LOOP_LAG in view.degraded_reasons.get(blame.node, ()):
            return FindingKind.OBSERVER_DEGRADED
        return FindingKind.AGENT_DOWN
    if layer is Layer.ENDPOINT:
        return FindingKind.ENDPOINT_DOWN
    if blame.row_failing:
        return FindingKind.NODE_ISOLATED
    if blame.node not in view.fresh_rows:  # stale, missing or empty: no sign of life
        return FindingKind.NODE_DOWN
    return FindingKind.INGRESS_BLOCKED


def _blame_finding(
    layer: Layer, blame: Blame, view: MatrixView, evidence: LayerEvidence
) -> Finding:
    kind = _kind(layer, blame, view)
    cells = blame.column | blame.row
    ok = (blame.column_ok if blame.column_failing else 0) + (
        blame.row_ok if blame.row_failing else 0
    )
    score = confidence(len(cells), ok, extra=1 if blame.witness else 0)
    observers = sorted({o for o, _ in blame.column})
    targets = sorted({t for _, t in blame.row})
    parts: list[str] = []
    if blame.column:
        parts.append(
            f"{_FAILS_AS[layer]} from {len(observers)} of "
            f"{len(observers) + blame.column_ok} observers ({names(observers)})"
        )
    if blame.row:
        parts.append(
            f"its own probes fail to {len(targets)} of {len(targets) + blame.row_ok} "
            f"targets ({names(targets)}): {_FAILS_AS[layer]}"
        )
    one_sided = False
    if kind is FindingKind.NODE_DOWN:
        parts.append("it publishes no fresh results (its report is stale, missing or empty)")
    elif kind is FindingKind.INGRESS_BLOCKED:
        one_sided = blame.row_ok == 0
        parts.append(
            "its own probes say nothing (none assigned)"
            if one_sided
            else f"yet its own probes reach {blame.row_ok} nodes"
        )
    elif kind is FindingKind.EGRESS_BLOCKED:
        one_sided = blame.column_ok == 0
        parts.append(
            "nobody else probes it" if one_sided else f"while {blame.column_ok} observers reach it"
        )
    elif kind is FindingKind.OBSERVER_DEGRADED:
        parts.append(f"its own report says its event loop lags ({REASON_LOOP_LAG}): starved")
    elif kind is FindingKind.NODE_ISOLATED and not blame.row:
        parts.append(_discounted_row(blame, view, evidence))
    if one_sided:
        score *= 0.5  # the other side is not known: half as sure which kind it is
    return Finding(
        kind, (blame.node,), score, _since(cells, evidence.own_fails), "; ".join(parts),
        tuple(sorted(cells)),
    )  # fmt: skip


def _discounted_row(blame: Blame, view: MatrixView, evidence: LayerEvidence) -> str:
    """What a degraded node's own row says, when only it says so (its failures are
    discounted, so the blame explains none of them): how many of its targets fail, how
    many of those are still suspect (counted for targets-failing only)."""
    node = blame.node
    unsure = _own_suspect_rows(view, evidence) - evidence.own_fails.keys()
    row = {p for p in evidence.own_fails.keys() | unsure if p[0] == node}
    if not row:  # defensive: its row was judged failing on these very cells
        return "its own report (degraded) says it reaches none of its targets"
    still = sum(1 for p in row if p in unsure)
    targets = sorted(t for _, t in row)
    return (
        f"its own report (degraded) says its probes fail to {len(row)} of "
        f"{len(row) + blame.row_ok} targets ({names(targets)}"
        + (f", {still} of them still suspect" if still else "")
        + ")"
    )


def _path_finding(layer: Layer, pair: Pair, evidence: LayerEvidence) -> Finding:
    observer, target = pair
    kinds = ", ".join(k.value for k in evidence.kinds.get(pair, ()))
    kind = _LAYER_KINDS.get(layer, FindingKind.PATH)
    reaches = evidence.row_ok.get(observer, 0)
    reached = evidence.col_ok.get(target, 0)
    return Finding(
        kind,
        (observer, target),
        confidence(1, 0),
        evidence.own_fails[pair],
        f"{observer} -> {target} only: {_FAILS_AS[layer]} ({kinds} unreachable); "
        f"{observer} reaches {reaches} other nodes, {reached} other observers reach {target}",
        (pair,),
    )


def _egress_finding(
    view: MatrixView, node: NodeId, min_observers: int, share: float
) -> Finding | None:
    """A degraded observer whose only reason is `targets-failing`, whose column is ok
    (at least `min_observers` reach its agent over ICMP and HTTP, nobody fails it) and
    whose own row fails (at least `share` of it): egress-blocked, on its own report.

    Its own row counts its `suspect` cells too: a degraded agent stretches its suspicion
    time (it suspects itself first), so its failing row stays suspect for several
    intervals, while the reason and the others' view already say what it is."""
    if not _only_targets_failing(view, node):
        return None
    agent, reach = view.layers[Layer.AGENT], view.layers[Layer.CONNECTIVITY]
    if any(t == node for layer in (agent, reach) for _, t in layer.fails):
        return None
    reachers = sorted({o for o, t in agent.oks if t == node})
    failing = {**reach.own_unsure, **reach.own_fails}
    row = {pair for pair in failing if pair[0] == node}
    row_ok = reach.row_ok.get(node, 0)
    if len(reachers) < min_observers or not row or len(row) / (len(row) + row_ok) < share:
        return None
    targets = sorted(t for _, t in row)
    unsure = sum(1 for pair in row if pair not in reach.own_fails)
    still = f", {unsure} of them still suspect" if unsure else ""
    return Finding(
        FindingKind.EGRESS_BLOCKED,
        (node,),
        confidence(len(row), row_ok),
        _since(row, failing),
        f"its own probes fail to {len(row)} of {len(row) + row_ok} targets "
        f"({names(targets)}{still}): {_FAILS_AS[Layer.CONNECTIVITY]}; while {len(reachers)} "
        f"observers reach it (ICMP and HTTP to its agent: {names(reachers)}); its report "
        f"is degraded for {REASON_TARGETS_FAILING} only (no loop lag, etcd reachable)",
        tuple(sorted(row)),
    )


def _observer_findings(
    view: MatrixView, named: Set[NodeId], min_observers: int, share: float
) -> list[Finding]:
    findings = []
    for node, since in sorted(view.degraded.items()):
        if node in named:
            continue
        egress = _egress_finding(view, node, min_observers, share)
        if egress is not None:
            findings.append(egress)
            continue
        reasons = view.degraded_reasons.get(node)
        why = (
            ", ".join(reasons)
            if reasons
            else "event-loop lag, most of its targets failing at once, or etcd unreachable"
        )
        findings.append(
            Finding(
                FindingKind.OBSERVER_DEGRADED,
                (node,),
                defaults.DIAGNOSIS_DEGRADED_CONFIDENCE,
                since,
                f"its own report says it is unwell ({why}): its failures are discounted",
            )
        )
    agent = view.layers[Layer.AGENT]
    for node, since in sorted(view.stale_since.items()):
        if node in named or node in view.degraded:
            continue
        reach = sorted({o for o, t in agent.oks if t == node})
        fail = {o for o, t in agent.fails if t == node}
        if len(reach) < min_observers:
            continue
        findings.append(
            Finding(
                FindingKind.OBSERVER_DEGRADED,
                (node,),
                confidence(len(reach), len(fail)),
                since,
                f"its report is stale while {len(reach)} observers reach its agent over "
                f"HTTP ({names(reach)}): the agent runs but does not publish (can it reach "
                "etcd?)",
                tuple((o, node) for o in reach),
            )
        )
    return findings
