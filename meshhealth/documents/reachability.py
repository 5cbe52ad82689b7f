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

Statuses are ProbeStatus values and verdicts Reachability values; plain strings work too
(a document read back from JSON). A status this version does not know counts as a
failure; a verdict it does not know is ignored (the status decides).
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass

from meshhealth.model import ProbeStatus, Reachability

R = Reachability
# A path's suspicion verdict, as the agent keeps it or a health report carries it (an
# older agent wrote "ok" for reachable) -> its state.
_VERDICT_STATES: dict[str, Reachability] = {
    "ok": R.REACHABLE,
    R.REACHABLE: R.REACHABLE,
    R.SUSPECT: R.SUSPECT,
    R.UNREACHABLE: R.UNREACHABLE,
}


def status_reachability(status: str | None, verdict: str | None = None) -> Reachability:
    """One path's state from its newest status (None: never probed) and its suspicion
    verdict (None: not known, the status alone decides)."""
    if status is None or status == ProbeStatus.UNKNOWN:
        return R.UNKNOWN
    from_verdict = _VERDICT_STATES.get(verdict) if verdict is not None else None
    if from_verdict is not None:
        return from_verdict
    return R.REACHABLE if status == ProbeStatus.OK else R.UNREACHABLE


def combined_reachability(states: Iterable[Reachability]) -> Reachability:
    """Several paths as one: unreachable if any probed one is, else suspect if any is,
    reachable if any was probed, unknown when none was probed."""
    probed = suspect = False
    for state in states:
        if state == R.UNREACHABLE:
            return R.UNREACHABLE
        suspect = suspect or state == R.SUSPECT
        probed = probed or state == R.REACHABLE
    if suspect:
        return R.SUSPECT
    return R.REACHABLE if probed else R.UNKNOWN


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
FAILING_CELL_STATES = frozenset({R.UNREACHABLE, R.SUSPECT})
OBSERVED_CELL_STATES = frozenset({R.REACHABLE}) | FAILING_CELL_STATES


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
        reaching += state == R.REACHABLE
        unreachable += state == R.UNREACHABLE
    verdict: Reachability
    if counting == 0:
        verdict = R.UNKNOWN
    elif reaching * 2 > counting:
        verdict = R.REACHABLE
    elif unreachable * 2 > counting:
        verdict = R.UNREACHABLE
    else:
        verdict = R.SUSPECT
    return NodeConsensus(verdict, counting, reaching, unreachable, left_out)
