"""Indirect probes, the requester's rules: whom to ask, and what their answers mean. Pure.

    helpers = choose_helpers(target, live_nodes, own=own, reaching=..., probers=..., k=3)
    check = conclude(path, outcomes, checked_at=now)     # one per failed direct path
    check.detail                                         # "reachable via lab1/node5, ..."

Whom to ask: up to `k` live agents other than this node and the target, whose
responder we reach; first those known to reach the target, then its probers in the
plan, then any other, each group in an order hashed per (requester, target) so one
target's helpers are not always the same nodes. What the answers mean, per path:
`path-broken`, `target-down`, `no-answer` or `no-helper` (docs/indirect-probes.md).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from meshhealth.documents.indirect import HelperPath
from meshhealth.documents.matrix import Matrix, NodeRef, label
from meshhealth.documents.status import IndirectNotes
from meshhealth.documents.status_schema import IndirectDocument
from meshhealth.model import PathKey, Target, TargetType, path_name
from meshhealth.naming import node_order
from meshhealth.timefmt import iso_time


class Conclusion(enum.StrEnum):
    PATH_BROKEN = "path-broken"
    TARGET_DOWN = "target-down"
    NO_ANSWER = "no-answer"
    NO_HELPER = "no-helper"


CONCLUSION_TEXT: dict[Conclusion, str] = {
    Conclusion.PATH_BROKEN: "path from this node broken",
    Conclusion.TARGET_DOWN: "fault at the target's end, not this node's path",
    Conclusion.NO_ANSWER: "no helper answered",
    Conclusion.NO_HELPER: "no other node to ask",
}
# What helpers failing a HealthIP path too support: its endpoint fails, the node may be
# up (an endpoint-forward-drop); the text says no more than that.
_ENDPOINT_TARGET_TEXT = "fault at the target's endpoint, not this node's path"


@dataclass(frozen=True, slots=True)
class HelperOutcome:
    """What one helper answered: its paths, or why there is no answer (one line)."""

    helper: NodeRef
    paths: Mapping[str, HelperPath] | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class IndirectCheck:
    """The conclusion about one failed direct path, and who said what."""

    path: PathKey
    conclusion: Conclusion
    # each in natural order (naming.node_order), as `conclude` makes them
    reachable_via: tuple[NodeRef, ...] = ()  # helpers that reach the path
    failed_via: tuple[NodeRef, ...] = ()  # helpers that answered and fail it too
    unanswered: tuple[NodeRef, ...] = ()  # helpers with no answer about it
    checked_at: float = 0.0  # unix seconds

    @property
    def confirms_failure(self) -> bool:
        """Whether other observers confirm the target is down (a suspicion's
        confirmation): helpers answered and none reaches it."""
        return self.conclusion is Conclusion.TARGET_DOWN

    def detail(self) -> str:
        """`reachable via lab1/node5, lab1/node7: path from this node broken` and the
        like: helpers in natural order, named with their cluster."""
        text = CONCLUSION_TEXT[self.conclusion]
        if self.conclusion is Conclusion.PATH_BROKEN:
            return f"reachable via {_names(self.reachable_via)}: {text}"
        if self.conclusion is Conclusion.TARGET_DOWN:
            if self.path.target_type is TargetType.ENDPOINT:
                text = _ENDPOINT_TARGET_TEXT
            return f"unreachable from {_names(self.failed_via)} too: {text}"
        return text


def _names(refs: Iterable[NodeRef]) -> str:
    return ", ".join(label(ref) for ref in refs)


def _spread_key(own: NodeRef, target: NodeRef, candidate: NodeRef) -> bytes:
    text = "\0".join((*own, *target, *candidate)).encode()
    return hashlib.blake2b(text, digest_size=8).digest()


def choose_helpers(
    target: NodeRef,
    live: Iterable[Target],
    *,
    own: NodeRef,
    k: int,
    reaching: Iterable[NodeRef] = (),
    probers: Iterable[NodeRef] = (),
    unreachable: Iterable[NodeRef] = (),
) -> list[Target]:
    """Up to `k` helpers for `target` among `live` nodes (see the module docstring);
    never one in `unreachable` (our own probe of its responder failed: we cannot ask
    it either)."""
    reach_set, prober_set, skip = set(reaching), set(probers), set(unreachable)
    candidates = {
        (t.cluster, t.node): t
        for t in live
        if (t.cluster, t.node) not in (own, target)
        and t.agent_down_since is None
        and (t.cluster, t.node) not in skip
    }

    def rank(ref: NodeRef) -> tuple[int, bytes]:
        group = 0 if ref in reach_set else 1 if ref in prober_set else 2
        return group, _spread_key(own, target, ref)

    return [candidates[ref] for ref in sorted(candidates, key=rank)[: max(k, 0)]]


def reaching_in_matrix(matrix: Matrix, target: NodeRef) -> frozenset[NodeRef]:
    """The observers whose fresh published report shows `target` reachable."""
    try:
        column = matrix.columns.index(target)
    except ValueError:
        return frozenset()
    return frozenset(
        row.source
        for row in matrix.rows
        if not row.stale and row.cells[column].state == "reachable"
    )


def conclude(
    path: PathKey, outcomes: Sequence[HelperOutcome], *, checked_at: float
) -> IndirectCheck:
    """The conclusion about `path` from the helpers' outcomes (the module's table)."""
    if not outcomes:
        return IndirectCheck(path, Conclusion.NO_HELPER, checked_at=checked_at)
    name = path_name(path.target_type, path.protocol)
    reachable: list[NodeRef] = []
    failed: list[NodeRef] = []
    unanswered: list[NodeRef] = []
    for outcome in outcomes:
        found = None if outcome.paths is None else outcome.paths.get(name)
        if found is None:
            unanswered.append(outcome.helper)
        elif found.ok:
            reachable.append(outcome.helper)
        else:
            failed.append(outcome.helper)
    if reachable:
        conclusion = Conclusion.PATH_BROKEN
    elif failed:
        conclusion = Conclusion.TARGET_DOWN
    else:
        conclusion = Conclusion.NO_ANSWER
    return IndirectCheck(
        path,
        conclusion,
        tuple(sorted(reachable, key=node_order)),
        tuple(sorted(failed, key=node_order)),
        tuple(sorted(unanswered, key=node_order)),
        checked_at,
    )


def check_document(check: IndirectCheck) -> IndirectDocument:
    """A check as the status document shows it (its `indirect` field of a path)."""
    return {
        "conclusion": check.conclusion.value,
        "detail": check.detail(),
        "reachable_via": [label(ref) for ref in check.reachable_via],
        "failed_via": [label(ref) for ref in check.failed_via],
        "checked_at": iso_time(check.checked_at),
    }


def check_notes(checks: Mapping[PathKey, IndirectCheck]) -> IndirectNotes:
    """Every check as the status document's notes (a new mapping)."""
    return {path: check_document(check) for path, check in checks.items()}
