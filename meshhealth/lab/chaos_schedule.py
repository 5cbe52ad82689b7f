"""A chaos soak's fault schedule: seeded, reproducible, overlapping but unambiguous (pure).

    schedule = make_schedule(seed=1, nodes=16, etcd_members=3, duration_s=3600)

Every lab fault kind comes once per pass of a shuffled deck, plus `restart-agent`. The
rules keep what the mesh should say unambiguous: a bounded number of faults at once, no
two faults on one node within `settle_s`, wide faults alone, one faulty etcd member at a
time (quorum holds), and a quiet end. Same arguments, same schedule.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Final

from meshhealth import defaults
from meshhealth.lab import etcd_members as M
from meshhealth.lab import faults as F

RESTART_AGENT: Final = "restart-agent"  # kill-agent, cleared after RESTART_S
GROUP_PARTITION: Final = "partition-group"  # partition of GROUP_SIZE nodes from the rest
MAX_CONCURRENT: Final = 2
GROUP_SIZE: Final = 2
MTU_SIZE: Final = 1400
RESTART_S: Final = (2.0, 6.0)
DURATION_S: Final = (25.0, 75.0)  # how long a fault stays (restart-agent: RESTART_S)
GAP_S: Final = (4.0, 25.0)  # between two attempts to start a fault


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """What a soak fault is: the lab fault it injects and what the mesh should say."""

    name: str  # the soak's name for it (a lab kind, RESTART_AGENT or GROUP_PARTITION)
    lab_kind: str  # the `lab fault` kind it injects
    # Findings that name it correctly (kind); empty: no finding is required.
    findings: tuple[str, ...]
    # The verdict must count its culprits not reachable while it is on (after the bound).
    unreachable: bool
    etcd: bool = False  # an etcd member fault: nothing about the nodes may change


SPECS: Final[dict[str, FaultSpec]] = {
    s.name: s
    for s in (
        FaultSpec(F.ENDPOINT_FORWARD_DROP, F.ENDPOINT_FORWARD_DROP, ("endpoint-down",), True),
        FaultSpec(F.ICMP_DROP, F.ICMP_DROP, (), True),
        FaultSpec(F.EGRESS_DROP, F.EGRESS_DROP, ("egress-blocked",), False),
        FaultSpec(F.INGRESS_DROP, F.INGRESS_DROP, ("ingress-blocked",), True),
        FaultSpec(F.PATH_DROP, F.PATH_DROP, ("path",), False),
        FaultSpec(F.PARTITION, F.PARTITION, ("node-isolated",), True),
        FaultSpec(GROUP_PARTITION, F.PARTITION, ("partition",), True),
        FaultSpec(F.MTU, F.MTU, ("mtu-blackhole",), False),
        FaultSpec(F.KILL_AGENT, F.KILL_AGENT, ("agent-down",), True),
        FaultSpec(RESTART_AGENT, F.KILL_AGENT, (), False),
        # A starved agent answers late: agent-down while it is stopped, observer-degraded
        # once its own report says loop-lag (docs/lab.md).
        FaultSpec(F.STARVE, F.STARVE, ("agent-down", "observer-degraded"), False),
        FaultSpec(M.KILL_MEMBER, M.KILL_MEMBER, (), False, etcd=True),
        FaultSpec(M.PARTITION_MEMBER, M.PARTITION_MEMBER, (), False, etcd=True),
    )
}
KINDS: Final = tuple(SPECS)


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    kind: str  # a key of SPECS
    start_s: float
    end_s: float
    nodes: tuple[str, ...] = ()  # node1, ... in the order the lab fault takes them
    member: int | None = None  # etcd member (1-based) of an etcd fault

    @property
    def spec(self) -> FaultSpec:
        return SPECS[self.kind]

    @property
    def lab_args(self) -> list[str]:
        """The arguments of `lab fault LAB_KIND ...` that inject it."""
        if self.member is not None:
            return [str(self.member)]
        if self.kind == F.MTU:
            return [self.nodes[0], str(MTU_SIZE)]
        if self.kind == GROUP_PARTITION:
            return [",".join(self.nodes)]
        return list(self.nodes)

    @property
    def label(self) -> str:
        return " ".join([self.kind, *self.lab_args])

    def overlaps(self, other: ScheduledFault, settle_s: float) -> bool:
        """Whether one starts while the other is active or settling."""
        return self.start_s < other.end_s + settle_s and other.start_s < self.end_s + settle_s

    def active_at(self, t: float) -> bool:
        return self.start_s <= t < self.end_s


def _fits(
    new: ScheduledFault, placed: list[ScheduledFault], settle_s: float, wide: frozenset[str]
) -> bool:
    near = [f for f in placed if new.overlaps(f, settle_s)]
    if new.member is not None and any(f.member is not None for f in near):
        return False
    if set(new.nodes) & {n for f in near for n in f.nodes}:
        return False
    if new.nodes and any(f.kind in wide or (new.kind in wide and f.nodes) for f in near):
        return False
    # At most MAX_CONCURRENT active at once: count at every start inside the new window.
    edges = [new.start_s] + [f.start_s for f in placed if new.active_at(f.start_s)]
    return all(
        sum(1 for f in placed if f.active_at(t)) + 1 <= MAX_CONCURRENT
        for t in edges
        if new.active_at(t)
    )


def _targets(
    rng: random.Random, kind: str, nodes: int, members: int
) -> tuple[tuple[str, ...], int | None]:
    names = [f"node{i}" for i in range(1, nodes + 1)]
    if SPECS[kind].etcd:
        return (), rng.randint(1, members)
    if kind == F.PATH_DROP:
        return tuple(rng.sample(names, 2)), None
    if kind == GROUP_PARTITION:
        return tuple(sorted(rng.sample(names, GROUP_SIZE), key=lambda n: int(n[4:]))), None
    return (rng.choice(names),), None


def possible_kinds(nodes: int, etcd_members: int) -> tuple[str, ...]:
    """The kinds a lab of this size can take: the etcd member faults need 3 members,
    a path 2 nodes, a group partition a group smaller than the rest."""
    out = []
    for kind in KINDS:
        if SPECS[kind].etcd and etcd_members < 3:
            continue
        if kind == F.PATH_DROP and nodes < 2:
            continue
        if kind == GROUP_PARTITION and nodes < 2 * GROUP_SIZE + 1:
            continue
        if kind in (F.PARTITION, F.EGRESS_DROP, F.INGRESS_DROP) and nodes < 3:
            continue
        out.append(kind)
    return tuple(out)


def make_schedule(
    seed: int,
    *,
    nodes: int,
    etcd_members: int,
    duration_s: float,
    settle_s: float = defaults.CHAOS_SETTLE_S,
    attempts: int = 40,
) -> tuple[ScheduledFault, ...]:
    """The soak's faults, by start time. Each attempt draws the deck's next kind, its
    targets and its length; when it does not fit the rules another target is tried
    (`attempts` times), else the kind goes back under the deck and time moves on."""
    rng = random.Random(seed)
    kinds = possible_kinds(nodes, etcd_members)
    wide = frozenset({GROUP_PARTITION})
    placed: list[ScheduledFault] = []
    deck: list[str] = []
    t = rng.uniform(*GAP_S) / 2
    last_start = duration_s - settle_s - DURATION_S[0]
    while t <= last_start and kinds:
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        kind = deck.pop(0)
        length = rng.uniform(*(RESTART_S if kind == RESTART_AGENT else DURATION_S))
        end = min(t + length, duration_s - settle_s)
        for _ in range(attempts):
            targets, member = _targets(rng, kind, nodes, etcd_members)
            fault = ScheduledFault(kind, round(t, 1), math.floor(end * 10) / 10, targets, member)
            if _fits(fault, placed, settle_s, wide):
                placed.append(fault)
                break
        else:
            deck.append(kind)
        t += rng.uniform(*GAP_S)
    return tuple(sorted(placed, key=lambda f: f.start_s))


def concurrency(schedule: tuple[ScheduledFault, ...]) -> int:
    """The most faults active at one moment."""
    return max((sum(1 for f in schedule if f.active_at(g.start_s)) for g in schedule), default=0)
