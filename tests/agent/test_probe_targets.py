"""The agent's choice of a round's targets from the probe plan (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth import defaults
from meshhealth.agent.membership.probe_targets import PlanSettings, choose_targets
from meshhealth.model import Target
from meshhealth.probe.assignment import build_plan

PROPERTIES = settings(max_examples=60, deadline=None)
T0 = 1_767_487_380.0  # a round's wall-clock start (an epoch boundary at 60 s epochs)


def node(i: int, cluster: str = "c1") -> Target:
    return Target(cluster, f"node{i}", f"10.0.{i // 250}.{i % 250 + 1}", None)


def cluster_of(n: int) -> list[Target]:
    return [node(i) for i in range(n)]


def names(targets: tuple[Target, ...]) -> set[str]:
    return {t.node for t in targets}


@pytest.mark.parametrize(
    ("n", "k", "full_mesh", "probed"),
    [
        (1, 5, False, 1),  # alone: itself only
        (2, 5, False, 2),
        (16, 5, False, 16),  # up to the full-mesh size: everyone
        (17, 5, False, 6),  # past it: k + itself
        (20, 3, False, 4),
        (100, 5, False, 6),
        (100, 5, True, 100),  # --full-mesh at any size
        (30, 40, False, 30),  # n <= k + 1: a full mesh anyway
    ],
)
def test_how_many_targets_a_round_probes(n: int, k: int, full_mesh: bool, probed: int) -> None:
    nodes = cluster_of(n)
    chosen = choose_targets(nodes[0], nodes, T0, PlanSettings(10.0, k, full_mesh))
    assert len(chosen.targets) == probed
    assert nodes[0] in chosen.targets  # this node stays probed, as cilium-health lists localhost
    assert list(chosen.targets) == sorted(chosen.targets)
    assert chosen.plan.nodes == n
    assert chosen.plan.k == k and chosen.plan.full_mesh is full_mesh
    assert chosen.plan.targets_per_node == probed - 1


def test_the_plan_info_names_the_settings_and_the_epoch() -> None:
    nodes = cluster_of(40)
    chosen = choose_targets(nodes[3], nodes, T0 + 59.9, PlanSettings(10.0))
    plan = chosen.plan
    assert plan.epoch == int(T0 // 60)
    assert (plan.k, plan.rotation_rounds, plan.full_mesh_max_nodes) == (
        defaults.PLAN_PROBE_TARGETS,
        defaults.PLAN_ROTATION_ROUNDS,
        defaults.PLAN_FULL_MESH_MAX_NODES,
    )
    assert plan.subset


def test_the_epoch_is_the_one_the_round_starts_in() -> None:
    """One wall-clock time per round: a round that starts a moment before a boundary
    keeps that epoch's targets; the next round takes the next epoch's."""
    nodes = cluster_of(60)
    before = choose_targets(nodes[0], nodes, T0 - 0.001, PlanSettings(10.0))
    after = choose_targets(nodes[0], nodes, T0, PlanSettings(10.0))
    assert after.plan.epoch == before.plan.epoch + 1
    plan_before = build_plan([(t.cluster, t.node) for t in nodes], before.plan.epoch)
    expected = {n for _, n in plan_before.targets_of(("c1", "node0"))} | {"node0"}
    assert names(before.targets) == expected
    assert names(before.targets) != names(after.targets)  # 60 nodes, k = 5: the ring moved


def test_this_node_counts_in_even_before_discovery_lists_it() -> None:
    nodes = cluster_of(30)
    newcomer = node(99)
    chosen = choose_targets(newcomer, nodes, T0, PlanSettings(10.0, 3))
    everyone = [(t.cluster, t.node) for t in [*nodes, newcomer]]
    plan = build_plan(everyone, chosen.plan.epoch, 3)
    assert names(chosen.targets) == {n for _, n in plan.targets_of(("c1", "node99"))} | {"node99"}
    assert chosen.plan.nodes == 31


def test_this_nodes_own_entry_wins_over_a_listed_one() -> None:
    nodes = cluster_of(5)
    own = Target("c1", "node0", "127.0.0.9", "127.0.0.10")
    chosen = choose_targets(own, nodes, T0, PlanSettings(10.0))
    assert own in chosen.targets and nodes[0] not in chosen.targets


def test_clustermesh_remotes_are_planned_with_the_local_nodes() -> None:
    nodes = [node(i, "c1") for i in range(15)] + [node(i, "c2") for i in range(15)]
    seen_remote = set()
    for epoch in range(40):
        chosen = choose_targets(nodes[0], nodes, epoch * 60.0, PlanSettings(10.0))
        assert chosen.plan.nodes == 30
        seen_remote |= {t for t in chosen.targets if t.cluster == "c2"}
    assert len(seen_remote) > 5  # remotes are targets like any node, over the epochs


@PROPERTIES
@given(
    n=st.integers(1, 60),
    k=st.integers(1, 8),
    full_mesh=st.booleans(),
    unix_time_s=st.floats(0, 4e9, allow_nan=False),
    interval_s=st.sampled_from([1.0, 2.5, 10.0]),
)
def test_every_nodes_choice_makes_the_whole_plan(
    n: int, k: int, full_mesh: bool, unix_time_s: float, interval_s: float
) -> None:
    """Each agent choosing alone, together: every node probed by itself and by exactly
    the plan's in-degree of others, and each choice equals the plan's targets."""
    nodes = cluster_of(n)
    config = PlanSettings(interval_s, k, full_mesh)
    probers: dict[str, int] = {t.node: 0 for t in nodes}
    for me in nodes:
        chosen = choose_targets(me, nodes, unix_time_s, config)
        assert me in chosen.targets
        assert len(chosen.targets) == chosen.plan.targets_per_node + 1
        for target in chosen.targets:
            if target != me:
                probers[target.node] += 1
    per_node = n - 1 if full_mesh or n <= max(k + 1, 16) else k
    assert set(probers.values()) == {per_node}
