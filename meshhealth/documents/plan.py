"""The probe plan as JSON: the part every document that shows a plan shares (pure).

The matrix shows the plan each source's report followed (`plan_document`); `status`
shows the plan of this node's last round, with how many targets it probes
(`probe_plan_document`). One function builds the shared fields, so both say the same.
See docs/scale.md for what each field means.
"""

from __future__ import annotations

from typing import TypedDict

from meshhealth.model import PlanInfo


class PlanDocument(TypedDict):
    """The probe plan a report followed."""

    epoch: int
    k: int  # --probe-targets
    rotation_rounds: int
    full_mesh: bool  # --full-mesh
    full_mesh_max_nodes: int
    nodes: int  # nodes in the plan, the observer included
    subset: bool  # each node probes only k of the others: unlisted targets are unassigned


class ProbePlanDocument(PlanDocument):
    """The probe plan this node's last round followed."""

    targets: int  # nodes this node probes this epoch, itself not counted


def plan_document(plan: PlanInfo | None) -> PlanDocument | None:
    if plan is None:
        return None
    return {
        "epoch": plan.epoch,
        "k": plan.k,
        "rotation_rounds": plan.rotation_rounds,
        "full_mesh": plan.full_mesh,
        "full_mesh_max_nodes": plan.full_mesh_max_nodes,
        "nodes": plan.nodes,
        "subset": plan.subset,
    }


def probe_plan_document(plan: PlanInfo | None) -> ProbePlanDocument | None:
    shared = plan_document(plan)
    if plan is None or shared is None:
        return None
    return {**shared, "targets": plan.targets_per_node}
