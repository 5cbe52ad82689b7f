"""The probe plan alone (meshhealth.probe.assignment), N = 10 .. 5,000: no network.

    .venv/bin/python bench/plan_sim.py [--sizes 10,30,100,...] [--k 5] [--interval 10]
                                       [--rotation 6] [--cover-up-to 1000] [--churn 20]
                                       [--seed 1]

Prints four tables (docs/performance.md "Scale: the probe plan" has the figures):
1. the plan against full mesh and against Cilium's interval rule (60 s * ln(1 + N)):
   probes/s per node and cluster-wide, in-degree min/max, epochs and time to probe
   every ordered pair (measured up to --cover-up-to nodes; the bound and the mean for
   one pair everywhere), assignments moved per join and per leave, time to compute;
2. k from 3 to 8 at 1,000 and 5,000 nodes: the cost and the observers' margin;
3. a churning node list (one change per second for a whole epoch) at the largest N;
4. the rejected deterministic sweep (circulant offsets on a fixed ring): its cover
   bound is tight, its moves per join grow with N.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

from meshhealth import defaults
from meshhealth.probe.assignment import (
    NodeKey,
    ProbePlan,
    build_plan,
    cover_bound_epochs,
    expected_pair_epochs,
    moved_assignments,
    ring_key,
    targets_for,
)

# ICMP and HTTP, to the NodeIP and to the HealthIP: the probes one target costs per round.
PROBES_PER_TARGET = 4
CILIUM_K_S = 60.0  # Cilium's interval rule: k * ln(1 + N) seconds
DEFAULT_SIZES = (10, 30, 100, 300, 1000, 3000, 5000)
CLUSTERS = ("default", "east", "west")  # a clustermesh: every third node is remote


def cluster_nodes(n: int, prefix: str = "node") -> list[NodeKey]:
    return [(CLUSTERS[i % len(CLUSTERS)], f"{prefix}{i}.example") for i in range(n)]


def median_ms(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def plan_timings(nodes: list[NodeKey], epoch: int, k: int, mesh: int) -> tuple[float, float]:
    """Milliseconds to build the whole plan, and to find one node's own targets."""
    me = nodes[len(nodes) // 2]
    whole = median_ms(lambda: build_plan(nodes, epoch, k, full_mesh_max_nodes=mesh))
    own = median_ms(lambda: targets_for(me, nodes, epoch, k, full_mesh_max_nodes=mesh))
    return whole, own


def in_degree_range(nodes: list[NodeKey], epochs: Sequence[int], k: int, mesh: int) -> str:
    low, high = math.inf, 0
    for epoch in epochs:
        plan = build_plan(nodes, epoch, k, full_mesh_max_nodes=mesh)
        degree = Counter({node: 0 for node in nodes})
        degree.update(target for _, target in plan.assignments())
        low, high = min(low, *degree.values()), max(high, *degree.values())
    return f"{low}/{high}"


def epochs_to_cover(nodes: list[NodeKey], first_epoch: int, k: int, mesh: int) -> int:
    """Epochs from `first_epoch` until every ordered pair has been assigned once."""
    n = len(nodes)
    index = {node: i for i, node in enumerate(nodes)}
    covered = bytearray(n * n)
    for i in range(n):
        covered[i * n + i] = 1
    left = n * (n - 1)
    epoch = first_epoch
    while True:
        plan = build_plan(nodes, epoch, k, full_mesh_max_nodes=mesh)
        ring = [index[node] for node in plan.ring]
        rows = [i * n for i in ring]
        for step in range(1, plan.k + 1):
            for code in map(int.__add__, rows, ring[step:] + ring[:step]):
                if not covered[code]:
                    covered[code] = 1
                    left -= 1
        epoch += 1
        if not left:
            return epoch - first_epoch


def churn_moves(
    nodes: list[NodeKey], epoch: int, k: int, mesh: int, *, events: int, rng: random.Random
) -> tuple[int, int]:
    """Max assignments moved by one join, and by one leave, over `events` of each."""
    base = build_plan(nodes, epoch, k, full_mesh_max_nodes=mesh)
    join_max = leave_max = 0
    for i in range(events):
        joined = build_plan([*nodes, ("default", f"new{i}")], epoch, k, full_mesh_max_nodes=mesh)
        join_max = max(join_max, moved_assignments(base, joined))
        gone = rng.randrange(len(nodes))
        left = build_plan(nodes[:gone] + nodes[gone + 1 :], epoch, k, full_mesh_max_nodes=mesh)
        leave_max = max(leave_max, moved_assignments(base, left))
    return join_max, leave_max


def fmt_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def table(header: Sequence[str], rows: list[Sequence[object]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print()


def plan_against_full_mesh_and_cilium(args: argparse.Namespace, rng: random.Random) -> None:
    k, mesh, interval, rotation = args.k, args.full_mesh_max_nodes, args.interval, args.rotation
    epoch_s = interval * rotation
    print(
        f"## 1. Plan (k={k}, full mesh up to {mesh} nodes, interval {interval:g} s, "
        f"rotation {rotation} rounds = {epoch_s:g} s) vs full mesh vs Cilium's rule\n"
    )
    rows: list[Sequence[object]] = []
    for n in args.sizes:
        nodes = cluster_nodes(n)
        epoch = rng.randrange(2**31)
        plan: ProbePlan = build_plan(nodes, epoch, k, full_mesh_max_nodes=mesh)
        per_node = plan.k * PROBES_PER_TARGET / interval
        degrees = in_degree_range(nodes, [epoch, epoch + 1, epoch + 2], k, mesh)
        bound = cover_bound_epochs(n, k, mesh)
        mean_pair = expected_pair_epochs(n, k, mesh)
        if n <= args.cover_up_to:
            started = time.perf_counter()
            measured = epochs_to_cover(nodes, epoch, k, mesh)
            print(
                f"  N={n}: every pair covered after {measured} epochs "
                f"({time.perf_counter() - started:.1f} s to simulate)",
                file=sys.stderr,
            )
            cover = f"{measured} ({fmt_duration(measured * epoch_s)})"
        else:
            cover = "not run"
        join_max, leave_max = churn_moves(nodes, epoch, k, mesh, events=args.churn, rng=rng)
        plan_ms, own_ms = plan_timings(nodes, epoch, k, mesh)
        cilium_s = CILIUM_K_S * math.log1p(n)
        full_per_node = (n - 1) * PROBES_PER_TARGET
        rows.append(
            (
                n,
                plan.k,
                f"{per_node:.1f}",
                f"{per_node * n:,.0f}",
                degrees,
                cover,
                f"{bound:,} ({fmt_duration(bound * epoch_s)})",
                f"{mean_pair:,.0f} ({fmt_duration(mean_pair * epoch_s)})",
                f"{join_max}/{leave_max}",
                f"{plan_ms:.1f} / {own_ms:.1f}",
                f"{full_per_node / interval:,.1f}",
                f"{full_per_node * n / interval:,.0f}",
                f"{cilium_s:.0f} s",
                f"{full_per_node / cilium_s:,.2f}",
                f"{full_per_node * n / cilium_s:,.0f}",
            )
        )
    table(
        (
            "N",
            "targets",
            "probes/s per node",
            "probes/s cluster",
            "in-degree min/max",
            "epochs to cover all pairs (measured)",
            "cover bound, 1-1e-6",
            "mean wait, one pair",
            "moved per join/leave (max)",
            "plan ms: all / own targets",
            "full mesh: per node",
            "full mesh: cluster",
            "Cilium interval",
            "Cilium: per node",
            "Cilium: cluster",
        ),
        rows,
    )


def choice_of_k(args: argparse.Namespace) -> None:
    epoch_s = args.interval * args.rotation
    print(f"## 2. Choice of k (interval {args.interval:g} s, epoch {epoch_s:g} s)\n")
    rows: list[Sequence[object]] = []
    for k in range(3, 9):
        per_node = k * PROBES_PER_TARGET / args.interval
        row: list[object] = [
            k,
            f"{per_node:.1f}",
            (k - 1) // 2,
            (k - 2) // 2,
            max((k - 3) // 2, 0),
            f"{k * 240 / 1024:.1f} KB",
        ]
        for n in (1000, 5000):
            mean_pair = expected_pair_epochs(n, k, 0)
            bound = cover_bound_epochs(n, k, 0)
            row += [f"{per_node * n:,.0f}", fmt_duration(mean_pair * epoch_s)]
            row.append(fmt_duration(bound * epoch_s))
        rows.append(row)
    table(
        (
            "k",
            "probes/s per node",
            "bad observers outvoted",
            "... one silent",
            "... two silent",
            "entry at 240 B/target",
            "1,000: probes/s cluster",
            "1,000: mean wait one pair",
            "1,000: all pairs (bound)",
            "5,000: probes/s cluster",
            "5,000: mean wait one pair",
            "5,000: all pairs (bound)",
        ),
        rows,
    )


def churning_list(args: argparse.Namespace, rng: random.Random) -> None:
    n, k, mesh = max(args.sizes), args.k, args.full_mesh_max_nodes
    changes = round(args.interval * args.rotation)  # one change a second for an epoch
    print(f"## 3. A node list changing every second for one epoch ({changes} changes, N={n})\n")
    nodes = cluster_nodes(n)
    epoch = rng.randrange(2**31)
    plan = build_plan(nodes, epoch, k, full_mesh_max_nodes=mesh)
    first = {node: plan.targets_of(node) for node in nodes}
    current = list(nodes)
    moves: list[int] = []
    for i in range(changes):
        if i % 2:
            current.pop(rng.randrange(len(current)))
        else:
            current.append(("east", f"joiner{i}.example"))
        following = build_plan(current, epoch, k, full_mesh_max_nodes=mesh)
        moves.append(moved_assignments(plan, following))
        plan = following
    changed = sum(
        1 for node, targets in first.items() if node in plan and plan.targets_of(node) != targets
    )
    boundary = moved_assignments(plan, build_plan(current, epoch + 1, k, full_mesh_max_nodes=mesh))
    table(
        (
            "changes",
            "moved per change (max)",
            "moved in all",
            "bound 3k per change",
            "nodes whose targets changed",
            "moved at the next epoch boundary",
        ),
        [
            (
                changes,
                max(moves),
                sum(moves),
                3 * k,
                f"{changed} of {n} ({100 * changed / n:.1f} %)",
                f"{boundary:,} (of {2 * n * k:,} possible)",
            )
        ],
    )


def circulant_targets(ring: list[NodeKey], epoch: int, k: int) -> set[tuple[NodeKey, NodeKey]]:
    """The rejected design: a fixed ring, offsets 1 + (epoch * k + j) mod (n - 1)."""
    n = len(ring)
    offsets = [1 + (epoch * k + j) % (n - 1) for j in range(k)]
    return {(ring[i], ring[(i + off) % n]) for i in range(n) for off in offsets}


def deterministic_sweep(args: argparse.Namespace) -> None:
    k = args.k
    print(f"## 4. The rejected deterministic sweep (k={k}): tight cover, moves grow with N\n")
    rows: list[Sequence[object]] = []
    for n in sorted({100, 1000, max(args.sizes)}):
        nodes = cluster_nodes(n)
        joiner = ("default", "joiner.example")

        def ring(listed: list[NodeKey]) -> list[NodeKey]:
            return sorted(listed, key=lambda node: (ring_key(node, 0), node))

        before, after = ring(nodes), ring([*nodes, joiner])
        sweep = math.ceil((n - 1) / k)
        moved = [
            len(circulant_targets(before, epoch, k) ^ circulant_targets(after, epoch, k))
            for epoch in range(0, sweep, max(1, sweep // 8))
        ]
        rows.append((n, f"{sweep:,}", f"{cover_bound_epochs(n, k, 0):,}", f"{max(moved):,}", 3 * k))
    table(
        (
            "N",
            "sweep: every pair within (epochs)",
            "ring plan: bound, 1-1e-6",
            "sweep: moved per join (max)",
            "ring plan: moved per join",
        ),
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--k", type=int, default=defaults.PLAN_PROBE_TARGETS)
    parser.add_argument("--interval", type=float, default=defaults.PROBE_INTERVAL_S)
    parser.add_argument("--rotation", type=int, default=defaults.PLAN_ROTATION_ROUNDS)
    parser.add_argument(
        "--full-mesh-max-nodes", type=int, default=defaults.PLAN_FULL_MESH_MAX_NODES
    )
    parser.add_argument(
        "--cover-up-to",
        type=int,
        default=1000,
        help="simulate epochs until every pair is covered up to this N (5,000: ~4 min)",
    )
    parser.add_argument("--churn", type=int, default=20, help="joins and leaves tried per N")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    rng = random.Random(args.seed)
    plan_against_full_mesh_and_cilium(args, rng)
    choice_of_k(args)
    churning_list(args, rng)
    deterministic_sweep(args)


if __name__ == "__main__":
    main()
