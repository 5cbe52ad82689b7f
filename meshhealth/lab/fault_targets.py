"""What a fault is applied to: the arguments of `lab fault KIND ...` (pure).

The target is recorded in the state file as one string, the arguments with every node
qualified: `lab1/node2`, `lab1/node1 lab1/node2` (path-drop SRC DST), `lab1/node2 1400`
(mtu NODE SIZE), `lab1/node1,lab1/node2 lab1/node3` (partition GROUP...), `lab1` (etcd),
`rack2` (link-drop RACK).
So `lab down` and `fault clear` can rebuild it after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshhealth.lab import fabric_faults as F
from meshhealth.lab import faults
from meshhealth.lab import plan as P

_USAGE = {
    "node": "NODE",
    "cluster": "[CLUSTER|NODE]",
    "path": "SRC DST",
    "groups": "GROUP... (a group: node1,node2)",
    "node-size": "NODE SIZE",
    "rack": "RACK (rack1, rack2, ...; lab up --racks N)",
}


@dataclass(frozen=True, slots=True)
class FaultTarget:
    target: str  # as recorded
    groups: tuple[tuple[P.NodePlan, ...], ...] = ()  # nodes, as the fabric script takes them
    size: int | None = None


def usage(kind: str) -> str:
    spec = faults.FAULT_KINDS[kind]
    return f"{kind} {_USAGE[spec.target]}"


def _bad(kind: str, why: str) -> P.PlanError:
    return P.PlanError(f"fault {kind}: {why} (usage: lab fault {usage(kind)})")


def parse_target(plan: P.LabPlan, kind: str, args: list[str]) -> FaultTarget:
    """The fault's target from the command line's arguments (PlanError when wrong)."""
    spec = faults.FAULT_KINDS[kind]
    if spec.target == "cluster":
        if len(args) > 1:
            raise _bad(kind, "one CLUSTER or NODE at most")
        if not args:
            return FaultTarget(plan.clusters[0].name)
        if "/" not in args[0] and args[0].startswith("lab"):
            return FaultTarget(plan.cluster(args[0]).name)
        return FaultTarget(plan.node(args[0]).cluster)
    if spec.target == "node":
        if len(args) != 1:
            raise _bad(kind, "needs one NODE (e.g. node2 or lab1/node2)")
        node = plan.node(args[0])
        return FaultTarget(node.qualified, ((node,),))
    if spec.target == "path":
        if len(args) != 2:
            raise _bad(kind, "needs SRC and DST")
        src, dst = plan.node(args[0]), plan.node(args[1])
        if src.qualified == dst.qualified:
            raise _bad(kind, "SRC and DST are the same node")
        return FaultTarget(f"{src.qualified} {dst.qualified}", ((src,), (dst,)))
    if spec.target == "node-size":
        if len(args) != 2 or not args[1].isdigit():
            raise _bad(kind, "needs NODE and SIZE (bytes, e.g. 1400)")
        node, size = plan.node(args[0]), int(args[1])
        if not F.MIN_MTU <= size <= F.MAX_MTU:
            raise _bad(kind, f"SIZE must be {F.MIN_MTU}..{F.MAX_MTU}")
        return FaultTarget(f"{node.qualified} {size}", ((node,),), size)
    if spec.target == "rack":
        if len(args) != 1:
            raise _bad(kind, "needs one RACK (e.g. rack2)")
        try:
            return FaultTarget(plan.rack(args[0]).name)
        except P.PlanError as exc:
            raise _bad(kind, str(exc)) from exc
    # groups
    if not args:
        raise _bad(kind, "needs at least one GROUP")
    groups = tuple(tuple(plan.node(n) for n in arg.split(",") if n) for arg in args)
    try:
        F.partition_groups(plan, groups)
    except ValueError as exc:
        raise _bad(kind, str(exc)) from exc
    text = " ".join(",".join(n.qualified for n in g) for g in groups)
    return FaultTarget(text, groups)


def recorded_target(plan: P.LabPlan, kind: str, target: str) -> FaultTarget:
    """The FaultTarget of a recorded fault (its target string split back)."""
    return parse_target(plan, kind, target.split())


def nodes_of(target: str) -> set[str]:
    """The qualified node names a recorded target involves (none for `lab1`)."""
    return {n for arg in target.split() for n in arg.split(",") if "/" in n}
