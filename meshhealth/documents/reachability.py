"""The one reachability rule, shared by `status`, the matrix, `watch` and the metrics.

It is the rule behind cilium-health's `Cluster health: X/Y reachable`:

- one path (host or endpoint, ICMP or HTTP) is `unknown` before its first result
  (status `unknown`, or no result at all). After that, its agent's suspicion verdict
  decides (docs/diagnosis.md): `ok` is `reachable`, `suspect` is `suspect` (it failed,
  not for long enough to be sure) and `unreachable` is `unreachable`. Without a verdict
  (a report of an older agent) the newest status decides: `reachable` when OK,
  `unreachable` for any other status;
- several paths together (a node's four paths, a matrix cell) are `unknown` when none
  was probed, `unreachable` when any probed path is unreachable, else `suspect` when
  any is suspect, else `reachable`: paths not probed yet do not count against a node.

A `suspect` node counts neither as reachable nor as unreachable in `Cluster health`.

Statuses are ProbeStatus values and verdicts PathVerdict values; plain strings work too
(a document read back from JSON). A status this version does not know counts as a
failure; a verdict it does not know is ignored (the status decides).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from meshhealth.model import ProbeStatus

Reachability = Literal["reachable", "suspect", "unreachable", "unknown"]
REACHABILITY_STATES: tuple[Reachability, ...] = ("reachable", "suspect", "unreachable", "unknown")

# A path's suspicion verdict (meshhealth.diagnosis.suspicion.PathVerdict values) -> state.
_VERDICT_STATES: dict[str, Reachability] = {
    "ok": "reachable",
    "suspect": "suspect",
    "unreachable": "unreachable",
}


def status_reachability(status: str | None, verdict: str | None = None) -> Reachability:
    """One path's state from its newest status (None: never probed) and its suspicion
    verdict (None: not known, the status alone decides)."""
    if status is None or status == ProbeStatus.UNKNOWN:
        return "unknown"
    from_verdict = _VERDICT_STATES.get(verdict) if verdict is not None else None
    if from_verdict is not None:
        return from_verdict
    return "reachable" if status == ProbeStatus.OK else "unreachable"


def combined_reachability(states: Iterable[Reachability]) -> Reachability:
    """Several paths as one: unreachable if any probed one is, else suspect if any is,
    reachable if any was probed, unknown when none was probed."""
    probed = suspect = False
    for state in states:
        if state == "unreachable":
            return "unreachable"
        suspect = suspect or state == "suspect"
        probed = probed or state == "reachable"
    if suspect:
        return "suspect"
    return "reachable" if probed else "unknown"


def statuses_reachability(
    statuses: Iterable[str | None], verdicts: Iterable[str | None] | None = None
) -> Reachability:
    """Several paths' newest statuses (and their verdicts, in the same order; None: no
    verdicts) as one state (`combined_reachability`)."""
    if verdicts is None:
        return combined_reachability(status_reachability(status) for status in statuses)
    return combined_reachability(
        status_reachability(status, verdict)
        for status, verdict in zip(statuses, verdicts, strict=True)
    )


# --- one node as the cluster sees it ----------------------------------------------------

ObservedReachability = Literal["reachable", "unreachable", "suspect", "unknown"]
OBSERVED_STATES: tuple[ObservedReachability, ...] = (
    "reachable",
    "unreachable",
    "suspect",
    "unknown",
)
# An observer's view of a node that says it fails (a matrix cell's state).
FAILING_CELL_STATES = frozenset({"unreachable", "suspect"})
# An observer's view of a node that says something: it probed the node, recently.
OBSERVED_CELL_STATES = frozenset({"reachable"}) | FAILING_CELL_STATES


def observed_reachability(cell_states: Iterable[str]) -> ObservedReachability:
    """One node from its observers' fresh cells (each cell by the rule above; `stale` and
    `unknown` cells say nothing and are left out), the rule of the cluster verdict:

    - `unknown` when no observer probed it;
    - `unreachable` when more than half of those that did find it unreachable;
    - `suspect` when some fail (or suspect it) but not most: one observer alone, whose own
      path or own health may be at fault, never makes a node unreachable for the cluster,
      and a path still in suspicion is not a verdict yet;
    - `reachable` when every observer that probed it reaches it.
    """
    observed = failing = unreachable = 0
    for state in cell_states:
        if state in OBSERVED_CELL_STATES:
            observed += 1
            failing += state in FAILING_CELL_STATES
            unreachable += state == "unreachable"
    if observed == 0:
        return "unknown"
    if unreachable * 2 > observed:
        return "unreachable"
    return "suspect" if failing else "reachable"
