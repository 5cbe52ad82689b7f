"""The cluster's verdict and diagnosis at 5,000 nodes, in CPU seconds: no network.

    .venv/bin/python bench/verdict_scale.py [--nodes 1000,5000] [--k 5] [--repeat 5]

What the aggregator does once per round (meshhealth.agent.cluster_view), on a synthetic
cluster of N nodes probing a subset (K targets each, chosen by the probe plan,
meshhealth.probe.assignment, as the agents would), every path healthy but:

- one node down: its report is stale, its K probers fail every path to it;
- one egress-blocked node: its own probes all fail (its report is degraded for
  `targets-failing` only) while its probers reach it;
- one path drop: one observer fails every path to one of its targets, nobody else does;
- one degraded observer: its event loop lags (`loop-lag`) and its HTTP probes fail.

Stages, each timed alone with time.process_time (CPU seconds of this process, the
garbage collector included, with the agent's GC settings: meshhealth.gc_tuning, unless
--default-gc), --repeat times (the min and the median are printed):

    build_matrix    documents/matrix.py: the reports -> the N x N matrix
    matrix_view     diagnosis/view.py: the matrix as diagnosis reads it, indexed (the
                    layers' verdicts per pair)
    diagnose        diagnosis/diagnose.py: the findings
    build_summary   diagnosis/cluster_summary.py: the verdict the aggregator publishes
    total           the four, one after the other

Then the findings of the last repetition (each fault should be named) and the verdict.
docs/performance.md ("Verdict and diagnosis at 5,000 nodes") has the figures. Prints
figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from meshhealth import defaults
from meshhealth.diagnosis.cluster_summary import build_summary
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import Finding
from meshhealth.diagnosis.local_health import REASON_LOOP_LAG, REASON_TARGETS_FAILING
from meshhealth.diagnosis.view import matrix_view
from meshhealth.documents.matrix import build_matrix
from meshhealth.gc_tuning import tune_gc_for_probing
from meshhealth.model import HealthReport, PathHealth, PlanInfo, ProbeStatus, TargetHealth
from meshhealth.probe.assignment import NodeKey, build_plan

CLUSTER = "lab1"
NOW = 1_800_000_000.0
INTERVAL_S = 10.0
EPOCH = 3_000_000
ROTATION_ROUNDS = defaults.PLAN_ROTATION_ROUNDS
PATHS = ("node/icmp", "node/http", "endpoint/icmp", "endpoint/http")
T = TypeVar("T")


def path(status: ProbeStatus, since: float | None = None) -> PathHealth:
    if status is ProbeStatus.OK:
        return PathHealth(status, 0.0004, 0.0)
    return PathHealth(status, None, 1.0, state="unreachable", state_since=since)


OK_PATHS = {name: path(ProbeStatus.OK) for name in PATHS}
DOWN_PATHS = {name: path(ProbeStatus.TIMEOUT, NOW - 60) for name in PATHS}
HTTP_FAILING = {
    name: path(ProbeStatus.TIMEOUT, NOW - 60) if name.endswith("http") else path(ProbeStatus.OK)
    for name in PATHS
}


def synthetic_reports(n: int, k: int) -> tuple[list[HealthReport], dict[str, NodeKey]]:
    """Every node's report (itself and its K plan targets), with the four faults;
    returns the reports and the faulty nodes by fault."""
    nodes = [(CLUSTER, f"node{i}") for i in range(1, n + 1)]
    plan = build_plan(nodes, EPOCH, k)
    info = PlanInfo(
        epoch=EPOCH,
        k=k,
        rotation_rounds=ROTATION_ROUNDS,
        full_mesh=False,
        full_mesh_max_nodes=defaults.PLAN_FULL_MESH_MAX_NODES,
        nodes=n,
    )
    # Spread over the ring, so that no two faults share a prober.
    step = n // 5
    down, egress, degraded, observer = (plan.ring[i * step] for i in range(1, 5))
    dropped = plan.targets_of(observer)[0]
    faults = {
        "down": down,
        "egress-blocked": egress,
        "degraded": degraded,
        "path drop from": observer,
        "path drop to": dropped,
    }
    reports = []
    for node in nodes:
        targets = []
        for target in (node, *plan.targets_of(node)):
            paths = OK_PATHS
            if (target == down and node != down) or (node == egress and target != egress):
                paths = DOWN_PATHS
            elif node == degraded and target != degraded:
                paths = HTTP_FAILING
            elif (node, target) == (observer, dropped):
                paths = DOWN_PATHS
            targets.append(TargetHealth(target[0], target[1], dict(paths)))
        age_s = 300.0 if node == down else 2.0  # the down node's last report
        reasons: tuple[str, ...] = ()
        if node == egress:
            reasons = (REASON_TARGETS_FAILING,)
        elif node == degraded:
            reasons = (REASON_LOOP_LAG,)
        reports.append(
            HealthReport(
                node=node[1],
                cluster=node[0],
                probe_time=NOW - age_s,
                interval_s=INTERVAL_S,
                targets=tuple(targets),
                plan=info,
                health_score=3 if reasons else 0,
                degraded_since=NOW - 60 if reasons else None,
                degraded_reasons=reasons,
            )
        )
    return reports, faults


def cpu_s(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def run(n: int, k: int, repeat: int) -> tuple[dict[str, list[float]], tuple[Finding, ...]]:
    reports, faults = synthetic_reports(n, k)
    print(
        f"\n{n} nodes, k={k}: faults " + ", ".join(f"{f} {c}/{m}" for f, (c, m) in faults.items())
    )
    times: dict[str, list[float]] = {
        s: [] for s in ("build_matrix", "matrix_view", "diagnose", "build_summary", "total")
    }
    findings: tuple[Finding, ...] = ()
    for _ in range(repeat):
        gc.collect()
        t_matrix, matrix = cpu_s(lambda: build_matrix(reports, now=NOW))
        t_view, view = cpu_s(lambda: matrix_view(matrix))  # noqa: B023 (called at once)
        t_diag, findings = cpu_s(lambda: diagnose(view))  # noqa: B023
        t_summary, summary = cpu_s(
            lambda: build_summary(matrix, findings, cluster=CLUSTER, aggregator="node1")  # noqa: B023
        )
        for stage, t in zip(times, (t_matrix, t_view, t_diag, t_summary), strict=False):
            times[stage].append(t)
        times["total"].append(t_matrix + t_view + t_diag + t_summary)
    counts = summary.nodes
    print(
        f"verdict: {counts.reachable}/{n} reachable, {counts.unreachable} unreachable, "
        f"{counts.suspect} suspect, {counts.unknown} unknown; observers "
        f"{summary.observers_min}+ (median {summary.observers_median:g})"
    )
    for finding in findings:
        nodes = ", ".join(str(node) for node in finding.nodes)
        print(f"  finding: {finding.kind.value} {nodes} ({finding.confidence:.2f})")
    return times, findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="5000", help="comma-separated sizes (5000)")
    parser.add_argument("--k", type=int, default=defaults.PLAN_PROBE_TARGETS)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep CPython's GC thresholds (the agent tunes them)",
    )
    args = parser.parse_args(argv)
    if not args.default_gc:
        tune_gc_for_probing()  # as `meshhealth agent` does at start
    sizes = [int(s) for s in args.nodes.split(",")]
    rows = []
    for n in sizes:
        times, _ = run(n, args.k, args.repeat)
        for stage, values in times.items():
            rows.append((n, stage, min(values), statistics.median(values)))
    print(f"\n| nodes | stage | cpu s min | cpu s median |   ({args.repeat} repetitions)")
    print("|---:|---|---:|---:|")
    for n, stage, low, median in rows:
        print(f"| {n:,} | {stage} | {low:.3f} | {median:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
