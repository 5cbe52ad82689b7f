"""Dual stack: a target whose secondary addresses (the other address family) fail while
its primary ones answer (pure).

    findings = secondary_findings(cells, degraded=..., named=..., min_observers=2, share=0.75)

The four layers read the primary addresses only. A pair (observer -> target) fails
here when every probed secondary path (`node/icmp`, `node/http`, `endpoint/icmp`,
`endpoint/http` over the target's secondary addresses) is unreachable while a primary
path is ok; it is ok when a secondary path is ok. A degraded observer's failures are
discounted, and a target already named by another finding is left to it. A target that
at least `min_observers` observers fail, `share` of those that assessed it, is one
`path` finding naming the target (its secondary family); other failing pairs are
`path` findings naming observer and target, as for the primary addresses. The evidence
names the family (`its IPv6 addresses`) when the failing observers' reports say it and
agree, else `its secondary addresses (the other address family)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from meshhealth.diagnosis.cells import (
    REACHABILITY_KINDS,
    MatrixCell,
    NodeId,
    PathKind,
    PathObservation,
)
from meshhealth.diagnosis.findings import Finding, FindingKind, confidence, names
from meshhealth.model import Reachability

_FAMILY_NAMES = {"ipv4": "IPv4", "ipv6": "IPv6"}


def family_words(families: Iterable[str | None]) -> str:
    """`IPv6 addresses` when every report names that one family, else the unnamed
    `secondary addresses (the other address family, dual stack)`."""
    named = set(families)
    if len(named) == 1:
        (family,) = named
        if family in _FAMILY_NAMES:
            return f"{_FAMILY_NAMES[family]} addresses (its secondary family, dual stack)"
    return "secondary addresses (the other address family, dual stack)"


def _reaches(paths: dict[PathKind, PathObservation]) -> bool | None:
    """True: a path is ok; False: every probed path unreachable; None: not evidence."""
    states = [o.state for k, o in paths.items() if k in REACHABILITY_KINDS]
    if any(s is Reachability.REACHABLE for s in states):
        return True
    if states and all(s is Reachability.UNREACHABLE for s in states):
        return False
    return None


def secondary_findings(
    cells: Iterable[MatrixCell],
    *,
    degraded: Set[NodeId],
    named: Set[NodeId],
    min_observers: int,
    share: float,
) -> list[Finding]:
    fails: dict[NodeId, dict[NodeId, tuple[float, tuple[str, ...], str | None]]] = {}
    oks: dict[NodeId, set[NodeId]] = {}
    for cell in cells:
        if cell.observer == cell.target or not cell.secondary or cell.target in named:
            continue
        reaches = _reaches(dict(cell.secondary))
        if reaches:
            oks.setdefault(cell.target, set()).add(cell.observer)
        elif reaches is False and cell.observer not in degraded and _reaches(dict(cell.paths)):
            failing = sorted(
                k
                for k, o in cell.secondary.items()
                if o.state is Reachability.UNREACHABLE and k in REACHABILITY_KINDS
            )
            since = max(cell.secondary[k].since for k in failing)
            fails.setdefault(cell.target, {})[cell.observer] = (
                since,
                tuple(failing),
                cell.secondary_family,
            )
    findings = []
    for target, by_observer in sorted(fails.items()):
        ok = len(oks.get(target, ()))
        observers = sorted(by_observer)
        kinds = ", ".join(sorted({k for _, ks, _ in by_observer.values() for k in ks}))
        words = family_words(f for _, _, f in by_observer.values())
        if len(observers) >= min_observers and len(observers) / (len(observers) + ok) >= share:
            findings.append(
                Finding(
                    FindingKind.PATH,
                    (target,),
                    confidence(len(observers), ok),
                    max(since for since, _, _ in by_observer.values()),
                    f"its {words} fail from {len(observers)} of {len(observers) + ok} "
                    f"observers ({names(observers)}): {kinds} unreachable while its primary "
                    "addresses answer",
                    tuple((o, target) for o in observers),
                )
            )
            continue
        for observer in observers:
            since, kinds_of, family = by_observer[observer]
            findings.append(
                Finding(
                    FindingKind.PATH,
                    (observer, target),
                    confidence(1, 0),
                    since,
                    f"{observer} -> {target} only over {family_words([family])}: "
                    f"{', '.join(kinds_of)} unreachable while its primary addresses answer; "
                    f"{ok} other observers reach them",
                    ((observer, target),),
                )
            )
    return findings
