"""Small matrices for the diagnosis tests, written as cell patterns.

    view = mesh("abcd", cells={("a", "d"): "down"}, stale=("d",))

Nodes are one-letter names in cluster `lab1` unless written `cluster/name`. Every
ordered pair of distinct nodes gets the `default` pattern unless `cells` says otherwise;
`-` leaves the pair unassigned (no cell). A stale row has every path `stale`; a missing
row has no cells at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from meshhealth.diagnosis.cells import (
    MatrixCell,
    NodeId,
    Observer,
    PathKind,
    PathObservation,
)
from meshhealth.diagnosis.view import MatrixView
from meshhealth.model import Reachability

NOW = 1_800_000_000.0
SINCE = NOW - 60.0

OK, SUS, UNR = Reachability.REACHABLE, Reachability.SUSPECT, Reachability.UNREACHABLE
STALE, UNA = Reachability.STALE, Reachability.UNASSIGNED
K = PathKind

# pattern -> states of node/icmp, node/http, endpoint/icmp, endpoint/http, node/icmp-df,
# node/udp, node/tcp (a pattern that stops early leaves the rest unassigned: not probed)
PATTERNS: dict[str, tuple[Reachability, ...]] = {
    "ok": (OK, OK, OK, OK, OK),
    "down": (UNR, UNR, UNR, UNR, UNR),  # nothing answers
    "agent": (OK, UNR, OK, OK, OK),  # kernel answers, agent does not
    "agent+ep": (OK, UNR, UNR, UNR, OK),  # agent and its endpoint gone
    "endpoint": (OK, OK, UNR, UNR, OK),  # host fine, endpoint gone
    "ep-http": (OK, OK, OK, UNR, OK),  # endpoint's responder gone
    "mtu": (OK, OK, OK, OK, UNR),  # big DF probes lost
    "udp": (OK, OK, OK, OK, OK, UNR),  # UDP echoes lost, the rest fine
    "udp-ok": (OK, OK, OK, OK, OK, OK),
    "agent+udp": (OK, UNR, OK, OK, OK, UNR),  # the agent is gone: its UDP echo too
    "port": (OK, OK, OK, OK, OK, OK, UNR),  # an operator's TCP port does not accept
    "l4-ok": (OK, OK, OK, OK, OK, OK, OK),
    "down+port": (UNR, UNR, UNR, UNR, UNR, UNR, UNR),
    "suspect": (SUS, SUS, SUS, SUS, SUS),
    "half": (SUS, UNR, SUS, UNR, UNA),  # settling: not evidence yet
    "stale": (STALE, STALE, STALE, STALE, STALE),
    "host-only": (OK, OK, UNA, UNA, UNA),  # a node without HealthIP
}


def node(name: str) -> NodeId:
    cluster, _, short = name.rpartition("/")
    return NodeId(cluster or "lab1", short)


def cell(
    observer: str, target: str, states: str | tuple[Reachability, ...], since: float = SINCE
) -> MatrixCell:
    row = PATTERNS[states] if isinstance(states, str) else states
    row = row + (UNA,) * (len(PathKind) - len(row))
    paths = {
        kind: PathObservation(state, since)
        for kind, state in zip(PathKind, row, strict=True)
        if state is not UNA
    }
    return MatrixCell(node(observer), node(target), paths)


def mesh(
    nodes: Iterable[str],
    *,
    cells: Mapping[tuple[str, str], str] | None = None,
    default: str = "ok",
    stale: Iterable[str] = (),
    missing: Iterable[str] = (),
    degraded: Iterable[str] = (),
    since: Mapping[tuple[str, str], float] | None = None,
    reasons: tuple[str, ...] = (),
) -> MatrixView:
    """`reasons`: the degraded observers' published reason codes (none: an older agent)."""
    names = list(nodes)
    stale_rows, missing_rows, degraded_rows = set(stale), set(missing), set(degraded)
    out = []
    for o in names:
        if o in missing_rows:
            continue
        for t in names:
            if o == t:
                continue
            pattern = (cells or {}).get((o, t), default)
            if o in stale_rows:
                pattern = "stale"
            if pattern == "-":
                continue
            out.append(cell(o, t, pattern, (since or {}).get((o, t), SINCE)))
    observers = [
        Observer(node(o), SINCE, reasons) if o in degraded_rows else Observer(node(o))
        for o in names
        if o not in missing_rows
    ]
    return MatrixView.of(out, observers, [node(n) for n in names])


def column(target: str, observers: Iterable[str], pattern: str) -> dict[tuple[str, str], str]:
    return {(o, target): pattern for o in observers if o != target}


def row(observer: str, targets: Iterable[str], pattern: str) -> dict[tuple[str, str], str]:
    return {(observer, t): pattern for t in targets if t != observer}
