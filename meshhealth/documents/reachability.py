"""The one reachability rule, shared by `status`, the matrix, `watch` and the metrics.

It is the rule behind cilium-health's `Cluster health: X/Y reachable`:

- one path (host or endpoint, ICMP or HTTP) is `reachable` when its newest result is
  OK, `unknown` before its first result (status `unknown`, or no result at all), and
  `unreachable` for any other status;
- several paths together (a node's four paths, a matrix cell) are `unknown` when none
  was probed, `unreachable` when any probed path fails, else `reachable`: paths not
  probed yet do not count against a node.

Statuses are ProbeStatus values; a plain string works too (a document read back from
JSON), and a status this version does not know counts as a failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from meshhealth.model import ProbeStatus

Reachability = Literal["reachable", "unreachable", "unknown"]
REACHABILITY_STATES: tuple[Reachability, ...] = ("reachable", "unreachable", "unknown")


def status_reachability(status: str | None) -> Reachability:
    """One path's state from its newest status (None: never probed)."""
    if status is None or status == ProbeStatus.UNKNOWN:
        return "unknown"
    return "reachable" if status == ProbeStatus.OK else "unreachable"


def combined_reachability(states: Iterable[Reachability]) -> Reachability:
    """Several paths as one: unreachable if any probed one fails, reachable if any was
    probed and all of those are OK, unknown when none was probed."""
    probed = False
    for state in states:
        if state == "unreachable":
            return "unreachable"
        probed = probed or state == "reachable"
    return "reachable" if probed else "unknown"


def statuses_reachability(statuses: Iterable[str | None]) -> Reachability:
    """Several paths' newest statuses as one state (`combined_reachability`)."""
    return combined_reachability(status_reachability(status) for status in statuses)
