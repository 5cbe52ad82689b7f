"""Partitions: nodes that fall into groups that do not reach each other (pure).

Groups are the connected sets of the "reaches" graph: an edge between two nodes when a
probe between them (either way) succeeded, from any observer that reports (a success is
proof even from a degraded one). Between two such groups no probe succeeds by
construction; they are *split* when failures between them come from at least
`min_nodes` distinct nodes on each side (so one bad observer, whose failures all start
at itself, never splits anything). A node cut off alone is a group of one: that is
node-down or node-isolated, not a partition, so only groups of two or more count.

Subset probing can leave two parts of one real group without a probe between them; they
then show as two groups. Groups listed separately are groups the evidence does not join.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.diagnosis.cells import NodeId
from meshhealth.diagnosis.layers import Pair


@dataclass(frozen=True, slots=True)
class Partition:
    groups: tuple[tuple[NodeId, ...], ...]  # largest first, each sorted
    cut_off: tuple[NodeId, ...]  # every node outside the first (main) group, sorted
    across: tuple[Pair, ...]  # the failing pairs between split groups, sorted


def reach_groups(nodes: Iterable[NodeId], oks: Iterable[Pair]) -> list[tuple[NodeId, ...]]:
    """Connected sets of the undirected reaches graph, largest first, then by first node."""
    parent: dict[NodeId, NodeId] = {n: n for n in nodes}

    def root(node: NodeId) -> NodeId:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in oks:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[NodeId, list[NodeId]] = {}
    for node in list(parent):
        members.setdefault(root(node), []).append(node)
    groups = [tuple(sorted(m)) for m in members.values()]
    return sorted(groups, key=lambda g: (-len(g), g))


def find_partition(
    nodes: Iterable[NodeId],
    fails: Collection[Pair],
    oks: Collection[Pair],
    *,
    min_nodes: int = defaults.DIAGNOSIS_MIN_OBSERVERS,
) -> Partition | None:
    """The partition the evidence shows, or None."""
    groups = [g for g in reach_groups(nodes, oks) if len(g) >= 2]
    group_of = {node: i for i, group in enumerate(groups) for node in group}
    between: dict[tuple[int, int], set[Pair]] = {}
    for pair in fails:
        a, b = group_of.get(pair[0]), group_of.get(pair[1])
        if a is None or b is None or a == b:
            continue
        between.setdefault((min(a, b), max(a, b)), set()).add(pair)
    split: set[int] = set()
    across: set[Pair] = set()
    for (a, b), pairs in sorted(between.items()):
        ends = [{n for pair in pairs for n in pair if group_of[n] == g} for g in (a, b)]
        if all(len(e) >= min_nodes for e in ends):
            split.update((a, b))
            across |= pairs
    if not split:
        return None
    kept = tuple(groups[i] for i in sorted(split))  # still largest first
    cut_off = tuple(sorted(n for group in kept[1:] for n in group))
    return Partition(kept, cut_off, tuple(sorted(across)))
