"""The probe plan: who probes whom in one epoch. Pure, no I/O, no clock.

Every node of the node list (`(cluster, node)`, local and clustermesh remotes alike)
gets a position on a ring drawn anew each epoch (`ring_key`: BLAKE2b over the epoch and
the node's name); each node probes the `k` nodes that follow it. So every node probes
and is probed by exactly `k` nodes, a small list is a full mesh, a join or leave moves
only 3·k assignments, and pairs are covered independently across epochs
(`cover_bound_epochs`). Anyone who knows the node list, the epoch and k computes the
same plan; docs/scale.md gives the reasoning and the trade-offs.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from meshhealth import defaults

NodeKey = tuple[str, str]  # (cluster, node)
Assignment = tuple[NodeKey, NodeKey]  # (prober, target)

RING_KEY_BYTES = 8
# Pass as `full_mesh_max_nodes` to probe every node from every node at any size.
FULL_MESH_ALWAYS = 2**62


def ring_key(node: NodeKey, epoch: int) -> int:
    """The node's position on the ring of `epoch` (see the module docstring)."""
    cluster, name = node
    text = f"{epoch}\n{cluster}/{name}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=RING_KEY_BYTES).digest(), "big")


def targets_per_node(n_nodes: int, k: int, full_mesh_max_nodes: int) -> int:
    """How many targets each node probes in a plan over `n_nodes` nodes.

    `n_nodes - 1` (full mesh) when the list is at most `max(k + 1, full_mesh_max_nodes)`
    long, else `k`.
    """
    _check_settings(k, full_mesh_max_nodes)
    if n_nodes <= max(k + 1, full_mesh_max_nodes):
        return max(n_nodes - 1, 0)
    return k


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """The plan of one epoch: `ring` in ring order, each node probing the next `k`."""

    epoch: int
    k: int  # targets (and probers) per node in this plan: n - 1 when full mesh
    full_mesh: bool
    ring: tuple[NodeKey, ...]
    _position: dict[NodeKey, int] = field(repr=False, compare=False)

    def __contains__(self, node: object) -> bool:
        return node in self._position

    def __len__(self) -> int:
        return len(self.ring)

    def targets_of(self, node: NodeKey) -> tuple[NodeKey, ...]:
        """The nodes `node` probes, nearest on the ring first. KeyError if not planned."""
        i = self._position[node]
        n = len(self.ring)
        return tuple(self.ring[(i + step) % n] for step in range(1, self.k + 1))

    def probers_of(self, node: NodeKey) -> tuple[NodeKey, ...]:
        """The nodes that probe `node`, nearest on the ring first. KeyError if not planned."""
        i = self._position[node]
        n = len(self.ring)
        return tuple(self.ring[(i - step) % n] for step in range(1, self.k + 1))

    def assignments(self) -> Iterator[Assignment]:
        """Every (prober, target) pair of the plan: n · k of them."""
        n = len(self.ring)
        for i, prober in enumerate(self.ring):
            for step in range(1, self.k + 1):
                yield prober, self.ring[(i + step) % n]


def build_plan(
    nodes: Iterable[NodeKey],
    epoch: int,
    k: int = defaults.PLAN_PROBE_TARGETS,
    *,
    full_mesh_max_nodes: int = defaults.PLAN_FULL_MESH_MAX_NODES,
) -> ProbePlan:
    """The plan of `epoch` over `nodes` (duplicates count once; order does not matter).

    `k` >= 1 is the number of targets per node past the full-mesh size;
    `full_mesh_max_nodes` is the largest list probed as a full mesh (at least k + 1 is
    a full mesh anyway; pass `FULL_MESH_ALWAYS` for `--full-mesh`).
    """
    _check_epoch(epoch)
    unique = _unique_nodes(nodes)
    per_node = targets_per_node(len(unique), k, full_mesh_max_nodes)
    ring = tuple(sorted(unique, key=lambda node: (ring_key(node, epoch), node)))
    return ProbePlan(
        epoch=epoch,
        k=per_node,
        full_mesh=per_node == max(len(ring) - 1, 0),
        ring=ring,
        _position={node: i for i, node in enumerate(ring)},
    )


def targets_for(
    node: NodeKey,
    nodes: Iterable[NodeKey],
    epoch: int,
    k: int = defaults.PLAN_PROBE_TARGETS,
    *,
    full_mesh_max_nodes: int = defaults.PLAN_FULL_MESH_MAX_NODES,
) -> tuple[NodeKey, ...]:
    """`build_plan(nodes + [node], ...).targets_of(node)` without sorting the whole ring.

    What an agent needs for its own round: n hashes and one pass, O(n log k). `node`
    counts as part of the list even when `nodes` lacks it (a node that has just
    started probes where it will be expected to once its registration is seen).
    """
    return _neighbours(node, nodes, epoch, k, full_mesh_max_nodes, forward=True)


def probers_for(
    node: NodeKey,
    nodes: Iterable[NodeKey],
    epoch: int,
    k: int = defaults.PLAN_PROBE_TARGETS,
    *,
    full_mesh_max_nodes: int = defaults.PLAN_FULL_MESH_MAX_NODES,
) -> tuple[NodeKey, ...]:
    """`build_plan(nodes + [node], ...).probers_of(node)`, cheaply (see `targets_for`)."""
    return _neighbours(node, nodes, epoch, k, full_mesh_max_nodes, forward=False)


def _neighbours(
    node: NodeKey,
    nodes: Iterable[NodeKey],
    epoch: int,
    k: int,
    full_mesh_max_nodes: int,
    *,
    forward: bool,
) -> tuple[NodeKey, ...]:
    _check_epoch(epoch)
    _unique_nodes([node])
    others = _unique_nodes(nodes)
    others.discard(node)
    count = targets_per_node(len(others) + 1, k, full_mesh_max_nodes)
    keyed = ((ring_key(other, epoch), other) for other in others)
    return nearest_on_ring((ring_key(node, epoch), node), keyed, count, forward=forward)


def nearest_on_ring(
    origin: tuple[int, NodeKey],
    keyed: Iterable[tuple[int, NodeKey]],
    count: int,
    *,
    forward: bool,
) -> tuple[NodeKey, ...]:
    """The `count` nodes nearest after (`forward`) or before `origin` on the ring of
    (key, node) pairs, nearest first. The ring is ordered by (key, node), as in
    `build_plan`, so equal keys (never seen in practice) are ordered by name too."""

    def around(item: tuple[int, NodeKey]) -> tuple[bool, tuple[int, NodeKey]]:
        # Ascending, this lists the nodes after origin, then the ones before (wrapped).
        return item < origin, item

    pick = heapq.nsmallest if forward else heapq.nlargest
    return tuple(node for _, node in pick(count, keyed, key=around))


def moved_assignments(before: ProbePlan, after: ProbePlan) -> int:
    """Assignments in one plan and not in the other (both directions counted)."""
    return len(set(before.assignments()) ^ set(after.assignments()))


# --- epochs ------------------------------------------------------------------------------


def epoch_length_s(interval_s: float, rotation_rounds: int) -> float:
    """Seconds one plan lasts: `rotation_rounds` probe intervals."""
    if not interval_s > 0 or rotation_rounds < 1:
        raise ValueError(
            f"epoch length needs interval_s > 0 and rotation_rounds >= 1, "
            f"got {interval_s!r} and {rotation_rounds!r}"
        )
    return interval_s * rotation_rounds


def epoch_at(unix_time_s: float, length_s: float) -> int:
    """The epoch that wall-clock time `unix_time_s` falls in (epochs start at 0 s UTC).

    Time-based, not a count of rounds: every agent and every reader agrees on the epoch
    without talking to each other, as far as their clocks agree.
    """
    if not length_s > 0:
        raise ValueError(f"epoch length must be > 0 s, got {length_s!r}")
    if not unix_time_s >= 0:
        raise ValueError(f"unix time must be >= 0 s, got {unix_time_s!r}")
    return math.floor(unix_time_s / length_s)


# --- coverage of pairs -------------------------------------------------------------------


def pair_probe_probability(n_nodes: int, k: int, full_mesh_max_nodes: int) -> float:
    """Chance that a given ordered pair is assigned in one epoch: k / (n - 1)."""
    if n_nodes < 2:
        raise ValueError(f"a pair needs at least 2 nodes, got {n_nodes}")
    return targets_per_node(n_nodes, k, full_mesh_max_nodes) / (n_nodes - 1)


def cover_bound_epochs(
    n_nodes: int,
    k: int,
    full_mesh_max_nodes: int,
    miss_probability: float = defaults.PLAN_COVER_MISS_PROBABILITY,
) -> int:
    """Epochs within which every ordered pair is probed, but with `miss_probability`.

        E = ceil( ln(n · (n - 1) / miss_probability) / -ln(1 - k / (n - 1)) )

    Each epoch's ring is an independent random order, so a given pair stays unprobed for
    E epochs with probability (1 - k / (n - 1))^E; summed over the n · (n - 1) pairs
    that is at most `miss_probability`. 1 for a full mesh. `expected_pair_epochs` is
    the mean wait for one pair: (n - 1) / k.
    """
    if not 0 < miss_probability < 1:
        raise ValueError(f"miss probability must be in (0, 1), got {miss_probability!r}")
    p = pair_probe_probability(n_nodes, k, full_mesh_max_nodes)
    if p >= 1:
        return 1
    pairs = n_nodes * (n_nodes - 1)
    return math.ceil(math.log(pairs / miss_probability) / -math.log1p(-p))


def expected_pair_epochs(n_nodes: int, k: int, full_mesh_max_nodes: int) -> float:
    """Mean number of epochs until a given ordered pair is first probed: (n - 1) / k."""
    return 1 / pair_probe_probability(n_nodes, k, full_mesh_max_nodes)


# --- input checks ------------------------------------------------------------------------


def _unique_nodes(nodes: Iterable[NodeKey]) -> set[NodeKey]:
    unique: set[NodeKey] = set()
    for node in nodes:
        if not (
            isinstance(node, tuple)
            and len(node) == 2
            and all(isinstance(part, str) and part for part in node)
        ):
            raise ValueError(f"a node is a (cluster, node) pair of names, got {node!r}")
        unique.add(node)
    return unique


def _check_settings(k: int, full_mesh_max_nodes: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"probe targets per node must be an integer >= 1, got {k!r}")
    if isinstance(full_mesh_max_nodes, bool) or not isinstance(full_mesh_max_nodes, int):
        raise ValueError(f"full-mesh size must be an integer, got {full_mesh_max_nodes!r}")
    if full_mesh_max_nodes < 0:
        raise ValueError(f"full-mesh size must be >= 0, got {full_mesh_max_nodes}")


def _check_epoch(epoch: int) -> None:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")
