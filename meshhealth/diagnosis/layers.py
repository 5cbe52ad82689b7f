"""One verdict per observer -> target pair and layer: the evidence diagnosis votes with.

A layer asks one question of a pair's paths:

- `connectivity`: does anything of the target answer? (ok if any path is ok, fail when
  every probed path is unreachable: the node, or the network in between, is gone);
- `agent`: the kernel answers ICMP on the NodeIP; does the agent answer HTTP there?
- `endpoint`: the host paths are fine; do the health endpoint's paths work?
- `mtu`: small ICMP passes; does the big don't-fragment probe?
- `udp`: the NodeIP answers ICMP and the agent HTTP (TCP); do its UDP echoes come back?
- `tcp`: the NodeIP answers ICMP; do the operator's TCP ports (--probe-tcp-ports) accept?

Agent, endpoint, mtu, udp and tcp need the NodeIP to answer ICMP (udp: and the agent
HTTP), so a pair that fails connectivity fails in no other layer, nor one that fails
agent in udp; endpoint, mtu, udp and tcp ask separate questions of a host that
answers. `suspect` paths make a pair `unsure`: neither evidence of failure nor of
health.
"""

from __future__ import annotations

import enum
import functools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter

from meshhealth.diagnosis.cells import MatrixCell, NodeId, PathKind
from meshhealth.model import Reachability

Pair = tuple[NodeId, NodeId]  # (observer, target)


class Layer(enum.StrEnum):
    CONNECTIVITY = "connectivity"
    AGENT = "agent"
    ENDPOINT = "endpoint"
    MTU = "mtu"
    UDP = "udp"
    TCP = "tcp"


_LAYERS = tuple(Layer)  # iterating an Enum class is slow; this is per cell
_KINDS = tuple(PathKind)  # index order of a cell's states tuple
_KIND_INDEX = {kind: i for i, kind in enumerate(_KINDS)}
# The path kinds each layer's verdict rests on (by index into the states tuple).
_LAYER_KINDS = {
    Layer.CONNECTIVITY: (0, 1, 2, 3),  # every path but the big DF one
    Layer.AGENT: (1,),  # node/http
    Layer.ENDPOINT: (2, 3),  # endpoint/icmp, endpoint/http
    Layer.MTU: (4,),  # node/icmp-df
    Layer.UDP: (5,),  # node/udp
    Layer.TCP: (6,),  # node/tcp (the worst of the ports)
}
_REACHABLE, _SUSPECT, _UNREACHABLE = (
    Reachability.REACHABLE,
    Reachability.SUSPECT,
    Reachability.UNREACHABLE,
)


def cell_states(cell: MatrixCell) -> tuple[Reachability, ...]:
    """The cell's state per path kind, in `PathKind` order (unassigned when missing)."""
    states = [Reachability.UNASSIGNED] * len(_KINDS)
    for kind, seen in cell.paths.items():
        states[_KIND_INDEX[kind]] = seen.state
    return tuple(states)


def _any_answers(states: Iterable[Reachability]) -> Reachability:
    found = set(states)
    if _REACHABLE in found:
        return Reachability.REACHABLE
    if _SUSPECT in found:
        return Reachability.SUSPECT
    if _UNREACHABLE in found:
        return Reachability.UNREACHABLE
    return Reachability.UNKNOWN


def _all_answer(states: Iterable[Reachability]) -> Reachability:
    found = set(states)
    if _UNREACHABLE in found:
        return Reachability.UNREACHABLE
    if _SUSPECT in found:
        return Reachability.SUSPECT
    if _REACHABLE in found:
        return Reachability.REACHABLE
    return Reachability.UNKNOWN


@functools.cache  # a few dozen distinct `states` in a matrix of any size
def _verdicts(states: tuple[Reachability, ...]) -> tuple[tuple[Layer, Reachability], ...]:
    """`pair_verdict` of every layer (in `_LAYERS` order) for one cell's states."""
    return tuple((layer, pair_verdict(layer, states)) for layer in _LAYERS)


@functools.cache
def _ok_layers(states: tuple[Reachability, ...]) -> tuple[Layer, ...]:
    return tuple(layer for layer, verdict in _verdicts(states) if verdict is Reachability.REACHABLE)


@functools.cache
def _failing_layers(states: tuple[Reachability, ...]) -> tuple[tuple[Layer, Reachability], ...]:
    """The layers whose verdict is FAIL or UNSURE (none for a healthy cell)."""
    return tuple(
        (layer, verdict)
        for layer, verdict in _verdicts(states)
        if verdict in (Reachability.UNREACHABLE, Reachability.SUSPECT)
    )


def pair_verdict(layer: Layer, states: tuple[Reachability, ...]) -> Reachability:
    """The answer of `layer`'s question for one cell's `cell_states`."""
    mine = [states[i] for i in _LAYER_KINDS[layer]]
    if layer is Layer.CONNECTIVITY:
        return _any_answers(mine)
    if states[0] is not _REACHABLE:  # the NodeIP must answer ICMP for the other questions
        return Reachability.UNKNOWN
    if layer is Layer.ENDPOINT and states[1] in (_SUSPECT, _UNREACHABLE):
        return Reachability.UNKNOWN  # the agent layer's business
    if layer is Layer.UDP and states[1] is not _REACHABLE:
        return Reachability.UNKNOWN  # an agent that does not answer HTTP: the agent layer's
    return _all_answer(mine)


def failing_kinds(layer: Layer, states: tuple[Reachability, ...]) -> tuple[PathKind, ...]:
    """The path kinds whose failure makes the pair fail in `layer`."""
    return tuple(_KINDS[i] for i in _LAYER_KINDS[layer] if states[i] is _UNREACHABLE)


@dataclass(frozen=True, slots=True)
class LayerEvidence:
    """One layer's pairs. `fails` leaves out degraded observers (discounted); `own_fails`
    keeps them, for what a node's own report says about itself."""

    layer: Layer
    fails: Mapping[Pair, float]  # pair -> since (the latest of its failing paths)
    own_fails: Mapping[Pair, float]
    oks: frozenset[Pair]
    kinds: Mapping[Pair, tuple[PathKind, ...]] = field(default_factory=dict)
    row_ok: Mapping[NodeId, int] = field(default_factory=dict)  # targets each node reaches
    col_ok: Mapping[NodeId, int] = field(default_factory=dict)  # observers reaching each node
    # pair -> since: unsure (suspect, not yet unreachable), any observer's own report
    own_unsure: Mapping[Pair, float] = field(default_factory=dict)


def ok_counts(oks: Iterable[Pair]) -> tuple[dict[NodeId, int], dict[NodeId, int]]:
    """Per observer, the targets it reaches; per target, the observers reaching it."""
    oks = oks if isinstance(oks, Collection) else list(oks)
    return Counter(map(itemgetter(0), oks)), Counter(map(itemgetter(1), oks))


def layer_evidence(
    cells: Iterable[MatrixCell], degraded: Collection[NodeId]
) -> dict[Layer, LayerEvidence]:
    """Every layer's pairs of `cells` (self-probes left out by the caller); the failures
    of `degraded` observers are their own only."""
    fails: dict[Layer, dict[Pair, float]] = {layer: {} for layer in Layer}
    own_fails: dict[Layer, dict[Pair, float]] = {layer: {} for layer in Layer}
    oks: dict[Layer, set[Pair]] = {layer: set() for layer in Layer}
    kinds: dict[Layer, dict[Pair, tuple[PathKind, ...]]] = {layer: {} for layer in Layer}
    own_unsure: dict[Layer, dict[Pair, float]] = {layer: {} for layer in Layer}
    ok_pairs: dict[tuple[Reachability, ...], list[Pair]] = {}  # by states: added at once
    for cell in cells:
        pair = (cell.observer, cell.target)
        states = cell_states(cell)
        ok_pairs.setdefault(states, []).append(pair)
        for layer, verdict in _failing_layers(states):
            if verdict is Reachability.UNREACHABLE:
                failing = failing_kinds(layer, states)
                since = max(cell.since(k) for k in failing)
                own_fails[layer][pair] = since
                kinds[layer][pair] = failing
                if cell.observer not in degraded:
                    fails[layer][pair] = since
            elif verdict is Reachability.SUSPECT:
                suspect = [_KINDS[i] for i in _LAYER_KINDS[layer] if states[i] is _SUSPECT]
                own_unsure[layer][pair] = max((cell.since(k) for k in suspect), default=0.0)
    for states, pairs in ok_pairs.items():
        for layer in _ok_layers(states):
            oks[layer].update(pairs)
    out = {}
    for layer in Layer:
        row_ok, col_ok = ok_counts(oks[layer])
        out[layer] = LayerEvidence(
            layer, fails[layer], own_fails[layer], frozenset(oks[layer]), kinds[layer],
            row_ok, col_ok, own_unsure[layer],
        )  # fmt: skip
    return out
