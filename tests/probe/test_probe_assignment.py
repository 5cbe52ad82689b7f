"""The probe plan (meshhealth.probe.assignment): table tests and properties over random
node lists, k and epochs. The guarantees tested here are the ones docs/scale.md states."""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth import defaults
from meshhealth.probe.assignment import (
    FULL_MESH_ALWAYS,
    NodeKey,
    ProbePlan,
    build_plan,
    cover_bound_epochs,
    epoch_at,
    epoch_length_s,
    expected_pair_epochs,
    moved_assignments,
    nearest_on_ring,
    pair_probe_probability,
    probers_for,
    ring_key,
    targets_for,
    targets_per_node,
)

# Pure and fast, but the machine running the suite may be loaded: no per-example deadline.
LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
CLUSTERS = st.sampled_from(["default", "east", "west"])
NODE = st.tuples(CLUSTERS, LABEL)
EPOCH = st.integers(min_value=0, max_value=2**40)


def node_lists(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[list[NodeKey]]:
    return st.lists(NODE, min_size=min_size, max_size=max_size, unique=True)


def nodes(n: int, clusters: tuple[str, ...] = ("default",)) -> list[NodeKey]:
    return [(clusters[i % len(clusters)], f"node{i}") for i in range(n)]


def in_degrees(plan: ProbePlan) -> Counter[NodeKey]:
    degrees: Counter[NodeKey] = Counter({node: 0 for node in plan.ring})
    degrees.update(target for _, target in plan.assignments())
    return degrees


# --- size rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_nodes", "k", "full_mesh_max_nodes", "per_node"),
    [
        pytest.param(0, 5, 0, 0, id="empty"),
        pytest.param(1, 5, 0, 0, id="alone"),
        pytest.param(2, 5, 0, 1, id="two-nodes-probe-each-other"),
        pytest.param(6, 5, 0, 5, id="k-plus-1-is-full-mesh"),
        pytest.param(7, 5, 0, 5, id="k-plus-2-is-a-subset"),
        pytest.param(7, 1, 0, 1, id="k-1-ring"),
        pytest.param(16, 5, 16, 15, id="threshold-is-full-mesh"),
        pytest.param(17, 5, 16, 5, id="past-threshold-is-a-subset"),
        pytest.param(5000, 5, 16, 5, id="5000-nodes"),
        pytest.param(5000, 5, FULL_MESH_ALWAYS, 4999, id="full-mesh-flag"),
        pytest.param(3, 5, 16, 2, id="small-cluster-full-mesh"),
    ],
)
def test_targets_per_node(n_nodes: int, k: int, full_mesh_max_nodes: int, per_node: int) -> None:
    assert targets_per_node(n_nodes, k, full_mesh_max_nodes) == per_node
    plan = build_plan(nodes(min(n_nodes, 60)), 7, k, full_mesh_max_nodes=full_mesh_max_nodes)
    if n_nodes <= 60:
        assert plan.k == per_node
        assert plan.full_mesh == (per_node == max(n_nodes - 1, 0))


@pytest.mark.parametrize("n_nodes", [2, 3, 6, 16])
def test_small_lists_are_a_full_mesh(n_nodes: int) -> None:
    listed = nodes(n_nodes)
    plan = build_plan(listed, 3, 5, full_mesh_max_nodes=16)
    for node in listed:
        assert set(plan.targets_of(node)) == set(listed) - {node}
        assert set(plan.probers_of(node)) == set(listed) - {node}


def test_defaults_keep_three_observers_and_small_clusters_whole() -> None:
    assert defaults.PLAN_PROBE_TARGETS >= 3  # a diagnosis outvotes one bad observer
    assert defaults.PLAN_FULL_MESH_MAX_NODES >= defaults.PLAN_PROBE_TARGETS + 1
    assert defaults.PLAN_ROTATION_ROUNDS >= 1


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"k": 0}, "probe targets per node must be an integer >= 1", id="k-0"),
        pytest.param({"k": True}, "probe targets per node", id="k-bool"),
        pytest.param({"epoch": -1}, "epoch must be an integer >= 0", id="negative-epoch"),
        pytest.param({"epoch": 1.5}, "epoch must be an integer", id="float-epoch"),
        pytest.param({"full_mesh_max_nodes": -1}, "full-mesh size must be >= 0", id="mesh-neg"),
        pytest.param({"nodes": ["node1"]}, "a node is a (cluster, node) pair", id="bare-name"),
        pytest.param({"nodes": [("c", "")]}, "a node is a (cluster, node) pair", id="empty-name"),
        pytest.param({"nodes": [("c", "a", "b")]}, "(cluster, node) pair", id="triple"),
    ],
)
def test_bad_input_is_a_one_line_value_error(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"nodes": nodes(20), "epoch": 1, "k": 3, "full_mesh_max_nodes": 16}
    args.update(kwargs)
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        build_plan(**args)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match=re.escape(message)):
        targets_for(("default", "node1"), **args)


def test_unknown_node_is_a_key_error() -> None:
    plan = build_plan(nodes(20), 1, 3)
    with pytest.raises(KeyError):
        plan.targets_of(("default", "absent"))
    assert ("default", "absent") not in plan
    assert ("default", "node3") in plan


# --- the ring ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "epoch"),
    [(("default", "node1"), 0), (("east", "worker-7.example.com"), 29_000_000)],
)
def test_ring_key_is_the_documented_recipe(node: NodeKey, epoch: int) -> None:
    text = f"{epoch}\n{node[0]}/{node[1]}".encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    assert ring_key(node, epoch) == int.from_bytes(digest, "big")


def test_the_ring_is_sorted_by_key_then_name() -> None:
    plan = build_plan(nodes(40, ("a", "b")), 11, 3)
    keys = [(ring_key(node, 11), node) for node in plan.ring]
    assert keys == sorted(keys)


@settings(deadline=None)
@given(
    keyed=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3), NODE), unique_by=lambda kn: kn[1]
    ).filter(lambda items: len(items) >= 1),
    count=st.integers(min_value=0, max_value=8),
    pick=st.integers(min_value=0),
)
def test_nearest_on_ring_walks_the_sorted_ring_even_with_equal_keys(
    keyed: list[tuple[int, NodeKey]], count: int, pick: int
) -> None:
    origin = keyed[pick % len(keyed)]
    ring = sorted(keyed)
    i = ring.index(origin)
    n = len(ring)
    want = min(count, n - 1)
    after = [ring[(i + s) % n][1] for s in range(1, want + 1)]
    before = [ring[(i - s) % n][1] for s in range(1, want + 1)]
    others = [item for item in keyed if item != origin]
    assert list(nearest_on_ring(origin, others, count, forward=True)) == after
    assert list(nearest_on_ring(origin, others, count, forward=False)) == before


# --- guarantees in every epoch -----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    listed=node_lists(),
    epoch=EPOCH,
    k=st.integers(min_value=1, max_value=8),
    full_mesh_max_nodes=st.integers(min_value=0, max_value=20),
)
def test_every_node_probes_k_and_is_probed_by_k(
    listed: list[NodeKey], epoch: int, k: int, full_mesh_max_nodes: int
) -> None:
    plan = build_plan(listed, epoch, k, full_mesh_max_nodes=full_mesh_max_nodes)
    n = len(listed)
    per_node = targets_per_node(n, k, full_mesh_max_nodes)
    assert per_node <= max(k, full_mesh_max_nodes - 1, 0)
    assert per_node == (max(n - 1, 0) if n <= max(k + 1, full_mesh_max_nodes) else k)
    assignments = list(plan.assignments())
    assert len(assignments) == len(set(assignments)) == n * per_node
    assert all(prober != target for prober, target in assignments)
    assert set(in_degrees(plan).values()) <= {per_node}
    for node in listed:
        targets = plan.targets_of(node)
        assert len(set(targets)) == len(targets) == per_node
        assert set(plan.probers_of(node)) == {p for p, t in assignments if t == node}


@settings(max_examples=200, deadline=None)
@given(
    listed=node_lists(),
    me=NODE,
    epoch=EPOCH,
    k=st.integers(min_value=1, max_value=8),
    full_mesh_max_nodes=st.integers(min_value=0, max_value=20),
)
def test_one_nodes_view_matches_the_whole_plan(
    listed: list[NodeKey], me: NodeKey, epoch: int, k: int, full_mesh_max_nodes: int
) -> None:
    plan = build_plan([*listed, me], epoch, k, full_mesh_max_nodes=full_mesh_max_nodes)
    mesh = {"full_mesh_max_nodes": full_mesh_max_nodes}
    assert targets_for(me, listed, epoch, k, **mesh) == plan.targets_of(me)
    assert probers_for(me, listed, epoch, k, **mesh) == plan.probers_of(me)


@settings(deadline=None)
@given(listed=node_lists(max_size=30), epoch=EPOCH, seed=st.randoms(use_true_random=False))
def test_the_plan_depends_on_the_set_not_on_order_or_duplicates(
    listed: list[NodeKey], epoch: int, seed: random.Random
) -> None:
    shuffled = [*listed, *listed[:3]]
    seed.shuffle(shuffled)
    assert build_plan(shuffled, epoch, 3) == build_plan(listed, epoch, 3)


def test_clustermesh_remotes_follow_the_same_rule() -> None:
    # Two clusters with the same node names: four distinct nodes per name, all planned.
    listed = [(cluster, f"node{i}") for cluster in ("east", "west") for i in range(40)]
    for epoch in range(20):
        plan = build_plan(listed, epoch, 5)
        assert set(in_degrees(plan).values()) == {5}
        assert {len(plan.targets_of(node)) for node in listed} == {5}
    # Every cluster computes the same plan from the same list, whatever its order.
    assert build_plan(reversed(listed), 3, 5) == build_plan(listed, 3, 5)
    # Over the epochs, cross-cluster pairs are probed in both directions.
    crossing = {
        (p[0], t[0])
        for epoch in range(20)
        for p, t in build_plan(listed, epoch, 5).assignments()
        if p[0] != t[0]
    }
    assert crossing == {("east", "west"), ("west", "east")}


# --- join and leave ----------------------------------------------------------------------


def expected_moves(n_before: int, n_after: int, k: int, full_mesh_max_nodes: int) -> int:
    """Assignments a join (n -> n + 1) or leave (n + 1 -> n) moves, by plan kind."""
    small = min(n_before, n_after)
    mesh_size = max(k + 1, full_mesh_max_nodes)
    if small + 1 <= mesh_size:  # full mesh before and after: the node's own edges
        return 2 * small
    if small == mesh_size:  # full mesh on one side, ring on the other
        return (small - 1) * (small - k) + 2 * k
    return 3 * k  # ring before and after


@settings(max_examples=300, deadline=None)
@given(
    listed=node_lists(min_size=1, max_size=40),
    newcomer=NODE,
    epoch=EPOCH,
    k=st.integers(min_value=1, max_value=8),
    full_mesh_max_nodes=st.integers(min_value=0, max_value=20),
)
def test_a_join_or_leave_moves_3k_assignments_and_touches_k_probers(
    listed: list[NodeKey], newcomer: NodeKey, epoch: int, k: int, full_mesh_max_nodes: int
) -> None:
    before_nodes = [node for node in listed if node != newcomer]
    mesh = {"full_mesh_max_nodes": full_mesh_max_nodes}
    before = build_plan(before_nodes, epoch, k, **mesh)
    after = build_plan([*before_nodes, newcomer], epoch, k, **mesh)
    n = len(before_nodes)
    moves = expected_moves(n, n + 1, k, full_mesh_max_nodes)
    assert moved_assignments(before, after) == moves == moved_assignments(after, before)
    if not before.full_mesh:
        # Only the newcomer's probers change targets, each by exactly one.
        changed = {
            node for node in before_nodes if before.targets_of(node) != after.targets_of(node)
        }
        assert changed == set(after.probers_of(newcomer))
        for node in changed:
            assert len(set(before.targets_of(node)) - set(after.targets_of(node))) == 1
        assert moves == 3 * k


@settings(max_examples=50, deadline=None)
@given(
    start=node_lists(min_size=20, max_size=40),
    epoch=EPOCH,
    k=st.integers(min_value=1, max_value=6),
    steps=st.lists(st.tuples(st.booleans(), NODE, st.integers(min_value=0)), max_size=30),
)
def test_a_churning_node_list_moves_at_most_3k_per_change(
    start: list[NodeKey],
    epoch: int,
    k: int,
    steps: list[tuple[bool, NodeKey, int]],
) -> None:
    # A node list changing at every step (every second, say) inside one epoch.
    current = set(start)
    plan = build_plan(current, epoch, k, full_mesh_max_nodes=0)
    for join, newcomer, pick in steps:
        if join:
            current.add(newcomer)
        elif len(current) > k + 2:
            current.discard(sorted(current)[pick % len(current)])
        following = build_plan(current, epoch, k, full_mesh_max_nodes=0)
        assert moved_assignments(plan, following) <= 3 * k
        plan = following


# --- rotation and coverage of pairs ------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    listed=node_lists(min_size=2, max_size=24),
    first_epoch=EPOCH,
    k=st.integers(min_value=1, max_value=5),
)
def test_every_ordered_pair_is_probed_within_the_cover_bound(
    listed: list[NodeKey], first_epoch: int, k: int
) -> None:
    n = len(listed)
    # A bound that fails with probability 1e-12 per example: a failure here is a bug.
    bound = cover_bound_epochs(n, k, 0, miss_probability=1e-12)
    missing = {(a, b) for a in listed for b in listed if a != b}
    for epochs in range(1, bound + 1):
        plan = build_plan(listed, first_epoch + epochs - 1, k, full_mesh_max_nodes=0)
        missing.difference_update(plan.assignments())
        if not missing:
            break
    assert not missing, f"{len(missing)} pairs not probed within {bound} epochs"
    assert epochs <= bound


def test_each_pair_is_probed_in_k_over_n_minus_1_of_the_epochs() -> None:
    # No pair is favoured or neglected: over 2,000 epochs each ordered pair's count is
    # within 6 standard deviations of the binomial mean 2000 * k / (n - 1).
    listed = nodes(20, ("east", "west"))
    k, epochs = 3, 2000
    counts: Counter[tuple[NodeKey, NodeKey]] = Counter()
    for epoch in range(epochs):
        counts.update(build_plan(listed, epoch, k, full_mesh_max_nodes=0).assignments())
    p = pair_probe_probability(20, k, 0)
    mean, sd = epochs * p, math.sqrt(epochs * p * (1 - p))
    assert len(counts) == 20 * 19
    assert all(abs(count - mean) <= 6 * sd for count in counts.values())


def test_plans_rotate_between_epochs() -> None:
    listed = nodes(100)
    plans = [set(build_plan(listed, epoch, 5).assignments()) for epoch in range(10)]
    for first, second in itertools.pairwise(plans):
        # Independent rings share about n * k * k / (n - 1) assignments: 25 of 500.
        assert len(first & second) < len(first) // 4


@pytest.mark.parametrize(("n_nodes", "k"), [(2, 1), (10, 3), (100, 5), (1000, 5), (5000, 5)])
def test_cover_bound_is_the_smallest_that_keeps_the_union_bound(n_nodes: int, k: int) -> None:
    epsilon = 1e-6
    bound = cover_bound_epochs(n_nodes, k, 0, miss_probability=epsilon)
    p = pair_probe_probability(n_nodes, k, 0)
    pairs = n_nodes * (n_nodes - 1)
    if p >= 1:
        assert bound == 1
        return
    assert pairs * (1 - p) ** bound <= epsilon < pairs * (1 - p) ** (bound - 1)
    assert expected_pair_epochs(n_nodes, k, 0) == pytest.approx((n_nodes - 1) / k)
    assert bound >= expected_pair_epochs(n_nodes, k, 0)


def test_cover_bound_of_a_full_mesh_is_one_epoch() -> None:
    assert cover_bound_epochs(16, 5, 16) == 1
    assert cover_bound_epochs(6, 5, 0) == 1
    with pytest.raises(ValueError, match="miss probability"):
        cover_bound_epochs(100, 5, 0, miss_probability=0)
    with pytest.raises(ValueError, match="at least 2 nodes"):
        cover_bound_epochs(1, 5, 0)


# --- epochs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("unix_time_s", "length_s", "epoch"),
    [
        (0.0, 60.0, 0),
        (59.999, 60.0, 0),
        (60.0, 60.0, 1),
        (1_800_000_000.0, 60.0, 30_000_000),
        (1_800_000_005.0, 10.0, 180_000_000),
    ],
)
def test_epoch_at(unix_time_s: float, length_s: float, epoch: int) -> None:
    assert epoch_at(unix_time_s, length_s) == epoch


def test_epoch_length_is_rotation_rounds_intervals() -> None:
    assert epoch_length_s(10.0, 6) == 60.0
    assert epoch_length_s(defaults.PROBE_INTERVAL_S, defaults.PLAN_ROTATION_ROUNDS) == (
        defaults.PROBE_INTERVAL_S * defaults.PLAN_ROTATION_ROUNDS
    )
    with pytest.raises(ValueError, match="rotation_rounds >= 1"):
        epoch_length_s(10.0, 0)
    with pytest.raises(ValueError, match="epoch length must be > 0"):
        epoch_at(100.0, 0.0)
    with pytest.raises(ValueError, match="unix time must be >= 0"):
        epoch_at(-1.0, 60.0)
