"""The reachability rules, shared by `status`, the matrix, the page, `watch`, the cluster
summary and the metrics: one path's state, several paths as one, and one node's state
for the cluster (the observers' consensus, `node_consensus`, behind `Cluster health`).

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

from collections.abc import Container, Iterable
from dataclasses import dataclass
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


# --- one node as the cluster sees it: the observers' consensus ---------------------------

# What an observer's cell says of a target: it fails (suspect or unreachable), or it says
# something at all (it probed the target, recently). `stale`, `unassigned` and `unknown`
# cells say nothing and are left out.
FAILING_CELL_STATES = frozenset({"unreachable", "suspect"})
OBSERVED_CELL_STATES = frozenset({"reachable"}) | FAILING_CELL_STATES


@dataclass(frozen=True, slots=True)
class NodeConsensus:
    """One node's state for the cluster, and the votes behind it."""

    state: Reachability
    counting: int = 0  # observers whose cell counts
    reaching: int = 0  # ... of them that reach the node on every path
    unreachable: int = 0  # ... that fail it past suspicion
    discounted: int = 0  # failing observers left out: their own row explains the failure


def node_consensus(
    cells: Iterable[tuple[str, str]], discounted: Container[str] = ()
) -> NodeConsensus:
    """One node from its observers' fresh cells, `(observer, cell state)`, the rule of the
    cluster verdict (docs/diagnosis.md "The cluster verdict"):

    - an observer in `discounted` (its own row explains its failures: degraded,
      egress-blocked, isolated, the minority side of a partition, its agent down) does
      not count for a node it fails to reach; where it reaches the node, it counts;
    - `reachable` when more than half of the counting observers reach the node on every
      path; `unreachable` when more than half fail it past suspicion; otherwise
      `suspect`: the counting observers' evidence is still suspicion, or split evenly;
    - `unknown` when no observer counts: never "reachable" without evidence.
    """
    counting = reaching = unreachable = left_out = 0
    for observer, state in cells:
        if state not in OBSERVED_CELL_STATES:
            continue
        if state in FAILING_CELL_STATES and observer in discounted:
            left_out += 1
            continue
        counting += 1
        reaching += state == "reachable"
        unreachable += state == "unreachable"
    verdict: Reachability
    if counting == 0:
        verdict = "unknown"
    elif reaching * 2 > counting:
        verdict = "reachable"
    elif unreachable * 2 > counting:
        verdict = "unreachable"
    else:
        verdict = "suspect"
    return NodeConsensus(verdict, counting, reaching, unreachable, left_out)
