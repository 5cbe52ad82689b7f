"""What diagnosis reads of one cell and one observer: one state per path kind (pure).

These types are diagnosis's own, independent of how the matrix document is stored or
published: `view.py` reads them from the document into the one `MatrixView`.

- a `MatrixCell` is what one observer knows about one target, one `PathObservation` per
  path kind; a kind missing from `paths` is unassigned;
- `stale`: the observer's report is too old to count (its agent is not publishing);
- `unassigned`: the observer does not probe that path (subset probing, no HealthIP, not
  probed yet): not evidence either way;
- an `Observer` is a node with a report; `degraded_since` set when its own local health
  says it is unwell (its failures are then discounted, its successes still count).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from meshhealth.model import Reachability, TraceStop


class NodeId(NamedTuple):
    """A node, `cluster/node`. A tuple: hashed and compared at C speed, which matters
    when a 200-node matrix is indexed by pairs of them."""

    cluster: str
    node: str

    def __str__(self) -> str:
        return f"{self.cluster}/{self.node}"


class PathKind(enum.StrEnum):
    NODE_ICMP = "node/icmp"  # NodeIP, ICMP echo: the target's kernel
    NODE_HTTP = "node/http"  # NodeIP:4240 GET /hello: the target's agent
    ENDPOINT_ICMP = "endpoint/icmp"  # HealthIP, ICMP echo: the health endpoint's namespace
    ENDPOINT_HTTP = "endpoint/http"  # HealthIP:4240: the health endpoint's responder
    NODE_ICMP_DF = "node/icmp-df"  # NodeIP, big don't-fragment ICMP (link MTU)
    NODE_UDP = "node/udp"  # NodeIP:4240/udp, echo datagrams from a few source ports
    NODE_TCP = "node/tcp"  # NodeIP, TCP connects to the operator's ports (the worst one)


# The kinds whose answers say whether a target is reached at all; the others (MTU, UDP)
# are asked only of a target that answers, and never make it unreachable.
REACHABILITY_KINDS = frozenset(
    {PathKind.NODE_ICMP, PathKind.NODE_HTTP, PathKind.ENDPOINT_ICMP, PathKind.ENDPOINT_HTTP}
)


FRESH_STATES = frozenset({Reachability.REACHABLE, Reachability.SUSPECT, Reachability.UNREACHABLE})


@dataclass(frozen=True, slots=True)
class PathObservation:
    state: Reachability
    since: float  # unix seconds: when the path entered this state


@dataclass(frozen=True, slots=True)
class MatrixCell:
    observer: NodeId
    target: NodeId
    paths: Mapping[PathKind, PathObservation] = field(default_factory=dict)
    # The same kinds over the target's secondary addresses (dual stack); empty when none.
    secondary: Mapping[PathKind, PathObservation] = field(default_factory=dict)
    # Their address family (`ipv4`, `ipv6`); None when the observer did not say.
    secondary_family: str | None = None
    # The TCP ports (--probe-tcp-ports) whose connect is unreachable: NODE_TCP's
    # evidence, so a port-blocked finding names them; empty when none fails.
    failing_ports: tuple[int, ...] = ()
    # Where the observer's trace to the target stopped (its NodeIP ICMP path unreachable);
    # None when it has none.
    trace: TraceStop | None = None

    def state(self, kind: PathKind) -> Reachability:
        seen = self.paths.get(kind)
        return Reachability.UNASSIGNED if seen is None else seen.state

    def since(self, kind: PathKind) -> float:
        seen = self.paths.get(kind)
        return 0.0 if seen is None else seen.since

    @property
    def fresh(self) -> bool:
        """Whether any path of the cell is evidence (ok, suspect or unreachable)."""
        return any(p.state in FRESH_STATES for p in self.paths.values())


@dataclass(frozen=True, slots=True)
class Observer:
    node: NodeId
    degraded_since: float | None = None  # None: not degraded
    # Why, as its report says (local_health.REASON_CODES); empty: not said (older agent).
    degraded_reasons: tuple[str, ...] = ()

    @property
    def degraded(self) -> bool:
        return self.degraded_since is not None
