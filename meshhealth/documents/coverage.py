"""Who observes whom under subset probing: the matrix's coverage lines (pure).

    observers = observer_counts(fresh_reports, columns)   # per column
    found = coverage(plans, columns, observers)      # found.lines, found.below_plan

With a subset plan (docs/scale.md) each node is probed by `k` others, so "reachable"
means "reachable from its observers". These say how many observers stand behind each
node's cells: the fresh reports (other than the node's own) that include it. The
`Coverage:` line is a warning only when some node has fewer observers than `k` (then
one line names each such node); at `k` or more for every node it is information.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from meshhealth.model import HealthReport, PlanInfo

NodeRef = tuple[str, str]  # (cluster, node)
# Most nodes named one by one in the coverage lines; the rest are counted.
COVERAGE_LINES_MAX = 10


def observer_counts(fresh: Iterable[HealthReport], columns: Sequence[NodeRef]) -> list[int]:
    """Per column: the reports in `fresh` (other than the node's own) that include it."""
    index = {ref: i for i, ref in enumerate(columns)}
    counts = [0] * len(columns)
    for report in fresh:
        source = (report.cluster, report.node)
        for target in report.targets:
            ref = (target.cluster, target.node)
            i = index.get(ref)
            if i is not None and ref != source:
                counts[i] += 1
    return counts


@dataclass(frozen=True, slots=True)
class Coverage:
    """The coverage lines: the cluster's `Coverage:` line, then one per node with fewer
    observers than the plan's `k` (none without a subset plan)."""

    lines: tuple[str, ...] = ()
    below_plan: bool = False  # some node has fewer observers than `k`: a warning

    @property
    def notes(self) -> tuple[str, ...]:
        """The lines that are information, not a warning: the `Coverage:` line while
        every node has its `k` observers."""
        return () if self.below_plan else self.lines


def coverage(
    plans: Sequence[PlanInfo], columns: Sequence[NodeRef], observers: Sequence[int]
) -> Coverage:
    """With subset plans among `plans` (those of fresh reports): one line for the
    cluster, and one per node with fewer observers than the plan's `k`."""
    subset = [plan for plan in plans if plan.subset]
    if not subset:
        return Coverage()
    newest = max(subset, key=lambda plan: plan.epoch)
    k = newest.k
    lines = [
        f"Coverage:  subset probing (k={k}, epoch {newest.epoch}): "
        f"{min(observers, default=0)} to {max(observers, default=0)} observers per node "
        f"with fresh reports, {len(columns)} nodes"
    ]
    short = [(ref, n) for ref, n in zip(columns, observers, strict=True) if n < k]
    for (cluster, node), n in short[:COVERAGE_LINES_MAX]:
        observed = f"{n} observer{'' if n == 1 else 's'}" if n else "no observer"
        lines.append(f"{cluster}/{node}: {observed} this epoch (plan: {k})")
    if len(short) > COVERAGE_LINES_MAX:
        lines.append(f"... and {len(short) - COVERAGE_LINES_MAX} more nodes with fewer than {k}")
    return Coverage(tuple(lines), below_plan=bool(short))
