"""The health report's wire form (`state/health/v1/<cluster>/<node>`): model <-> map,
with validation. Pure, no I/O; codec.py adds the schema version and msgpack.

The biggest and busiest value in etcd: one per node, rewritten when a path's state
changes, read by the aggregator and the matrix. Field names are those of
docs/kvstore.md. Optional fields (the plan, local health, suspicion states, extra and
secondary paths) are written only when they say something, so older readers keep
reading what they know.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

from meshhealth import defaults
from meshhealth import wire_fields as wf
from meshhealth.model import (
    ADDRESS_FAMILIES,
    PATH_VERDICTS,
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathHealth,
    PlanInfo,
    ProbeStatus,
    Protocol,
    TargetHealth,
    TargetType,
    path_name,
)
from meshhealth.wire_fields import DecodeError

MAX_TARGETS = 10_000
MAX_HEALTH_SCORE = defaults.LOCAL_HEALTH_MAX_MULTIPLIER - 1
MAX_DEGRADED_REASONS = 16
_REASON_CODE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
# The probe plan's settings (HealthReport.plan): caps far above any real use.
MAX_PLAN_EPOCH = 2**53
MAX_PLAN_K = MAX_TARGETS
MAX_PLAN_ROTATION_ROUNDS = 1_000_000
MAX_PLAN_NODES = 1_000_000

# "node/icmp", "node/http", "endpoint/icmp", "endpoint/http": every reader knows them.
CORE_PATH_NAMES: tuple[str, ...] = tuple(
    path_name(t, p) for t in TargetType for p in REACHABILITY_PROTOCOLS
)
# Paths added since ("node/icmp-df"): written in the optional `extra_paths` map, because
# readers older than them refuse a report whose `paths` holds a name they do not know.
EXTRA_PATH_NAMES: tuple[str, ...] = (path_name(TargetType.NODE, Protocol.ICMP_DF),)
PATH_NAMES: tuple[str, ...] = CORE_PATH_NAMES + EXTRA_PATH_NAMES


def shared_secondary_family(targets: Iterable[TargetHealth]) -> str | None:
    """The family of most dual-stack targets' secondary paths (ties: the first in
    ADDRESS_FAMILIES), written once in the report; a target of another family says its
    own. None without a dual-stack target that says one."""
    counts = Counter(
        t.secondary_family for t in targets if t.secondary_paths and t.secondary_family
    )
    return max(sorted(counts), key=counts.__getitem__) if counts else None


def health_to_wire(r: HealthReport) -> dict[str, object]:
    """The report's map, without the schema version."""
    shared = shared_secondary_family(r.targets)
    return {
        "node": r.node,
        "cluster": r.cluster,
        "probe_time": r.probe_time,
        "interval_s": r.interval_s,
        "targets": [_target_to_wire(t, shared) for t in r.targets],
        # Optional (dual stack): the family the targets' secondary paths are, once.
        **({} if shared is None else {"secondary_family": shared}),
        **({} if r.plan is None else {"plan": _plan_to_wire(r.plan)}),
        # Optional (local health awareness): only from an agent that is not well.
        **({} if r.health_score == 0 else {"health_score": r.health_score}),
        **({} if r.degraded_since is None else {"degraded_since": r.degraded_since}),
        **({} if not r.degraded_reasons else {"degraded_reasons": list(r.degraded_reasons)}),
    }


def _plan_to_wire(p: PlanInfo) -> dict[str, object]:
    return {
        "epoch": p.epoch,
        "k": p.k,
        "rotation_rounds": p.rotation_rounds,
        "full_mesh": p.full_mesh,
        "full_mesh_max_nodes": p.full_mesh_max_nodes,
        "nodes": p.nodes,
    }


def _path_to_wire(p: PathHealth) -> dict[str, object]:
    wire: dict[str, object] = {"status": str(p.status), "rtt_s": p.rtt_s, "loss": p.loss}
    # Optional (suspicion): older readers ignore them and read the status.
    if p.state is not None:
        wire["state"] = p.state
    if p.state_since is not None:
        wire["state_since"] = p.state_since
    return wire


def _paths_to_wire(paths: Mapping[str, PathHealth]) -> dict[str, object]:
    return {name: _path_to_wire(p) for name, p in sorted(paths.items())}


def _target_to_wire(t: TargetHealth, shared: str | None) -> dict[str, object]:
    core = {name: p for name, p in t.paths.items() if name not in EXTRA_PATH_NAMES}
    wire: dict[str, object] = {
        "cluster": t.cluster,
        "node": t.node,
        "paths": _paths_to_wire(core),
    }
    if len(core) != len(t.paths):  # optional: older readers ignore the field
        extra = {name: p for name, p in t.paths.items() if name in EXTRA_PATH_NAMES}
        wire["extra_paths"] = _paths_to_wire(extra)
    # Optional (dual stack), only when the target has secondary addresses: older
    # readers ignore the field and keep reading `paths`.
    if t.secondary_paths:
        wire["secondary_paths"] = _paths_to_wire(t.secondary_paths)
    # Optional: only a target whose family is not the report's says its own.
    if t.secondary_family != (shared if t.secondary_paths else None):
        wire["secondary_family"] = t.secondary_family
    return wire


def health_from_wire(m: Mapping[str, object]) -> HealthReport:
    """The report in map `m` (untrusted: DecodeError says what is wrong and where)."""
    node = wf.node_name(m, "node")
    cluster = wf.cluster_name(m, "cluster")
    probe_time = wf.seconds(wf.field(m, "probe_time"), "probe_time")
    interval_s = wf.seconds(wf.field(m, "interval_s"), "interval_s")
    if interval_s <= 0:
        raise DecodeError(f"field 'interval_s': must be > 0, got {interval_s}")
    targets: list[TargetHealth] = []
    seen: set[tuple[str, str]] = set()
    shared = _family(m.get("secondary_family"), "secondary_family")
    for i, raw in enumerate(wf.list_of(m, "targets", dict, MAX_TARGETS)):
        target = _target_health(raw, f"targets[{i}]", shared)
        if (target.cluster, target.node) in seen:
            raise DecodeError(
                f"field 'targets[{i}]': duplicate target {target.cluster}/{target.node}"
            )
        seen.add((target.cluster, target.node))
        targets.append(target)
    raw_plan = m.get("plan")  # optional: agents older than the probe plan wrote none
    health_score = 0  # optional: written only by an agent that is not well
    if m.get("health_score") is not None:
        health_score = wf.integer(m, "health_score", 0, MAX_HEALTH_SCORE)
    degraded = m.get("degraded_since")
    reasons: tuple[str, ...] = ()  # optional: agents older than the reason codes wrote none
    if m.get("degraded_reasons") is not None:
        reasons = _reason_codes(m)
    return HealthReport(
        node=node,
        cluster=cluster,
        probe_time=probe_time,
        interval_s=interval_s,
        targets=tuple(targets),
        plan=None if raw_plan is None else _plan_from_wire(raw_plan),
        health_score=health_score,
        degraded_since=None if degraded is None else wf.seconds(degraded, "degraded_since"),
        degraded_reasons=reasons,
    )


def _reason_codes(m: Mapping[str, object]) -> tuple[str, ...]:
    """`degraded_reasons`: short codes; an unknown one (a newer agent's) is kept."""
    codes = wf.list_of(m, "degraded_reasons", str, MAX_DEGRADED_REASONS)
    for i, code in enumerate(codes):
        if not _REASON_CODE.fullmatch(code):
            raise DecodeError(
                f"field 'degraded_reasons[{i}]': not a reason code (a-z, 0-9, '-'), "
                f"got {wf.short(code)}"
            )
    return tuple(codes)


def _plan_from_wire(raw: object) -> PlanInfo:
    if not isinstance(raw, dict):
        raise DecodeError(f"field 'plan': must be a map, got {wf.type_name(raw)}")
    return PlanInfo(
        epoch=wf.integer(raw, "epoch", 0, MAX_PLAN_EPOCH, "plan"),
        k=wf.integer(raw, "k", 1, MAX_PLAN_K, "plan"),
        rotation_rounds=wf.integer(raw, "rotation_rounds", 1, MAX_PLAN_ROTATION_ROUNDS, "plan"),
        full_mesh=wf.boolean(raw, "full_mesh", "plan"),
        full_mesh_max_nodes=wf.integer(raw, "full_mesh_max_nodes", 0, MAX_PLAN_NODES, "plan"),
        nodes=wf.integer(raw, "nodes", 1, MAX_PLAN_NODES, "plan"),
    )


def _family(value: object, where: str) -> str | None:
    """`ipv4`, `ipv6` or None (nil); anything else is refused."""
    if value is not None and value not in ADDRESS_FAMILIES:
        raise DecodeError(
            f"field '{where}': must be one of {', '.join(ADDRESS_FAMILIES)}, got {wf.short(value)}"
        )
    return None if value is None else str(value)


def _target_health(m: Mapping[str, object], where: str, shared: str | None) -> TargetHealth:
    cluster = wf.cluster_name(m, "cluster", where)
    node = wf.node_name(m, "node", where)
    paths = _paths(wf.field(m, "paths", where), f"{where}.paths")
    raw_extra = m.get("extra_paths")  # optional; names this reader does not know: skipped
    if raw_extra is not None:
        paths.update(_paths(raw_extra, f"{where}.extra_paths", skip_unknown=True))
    raw_secondary = m.get("secondary_paths")
    secondary = {} if raw_secondary is None else _paths(raw_secondary, f"{where}.secondary_paths")
    if "secondary_family" in m:
        family = _family(m["secondary_family"], f"{where}.secondary_family")
    else:
        family = shared if secondary else None
    return TargetHealth(
        cluster=cluster,
        node=node,
        paths=paths,
        secondary_paths=secondary,
        secondary_family=family,
    )


def _paths(raw_paths: object, where: str, *, skip_unknown: bool = False) -> dict[str, PathHealth]:
    if not isinstance(raw_paths, dict):
        raise DecodeError(f"field '{where}': must be a map, got {wf.type_name(raw_paths)}")
    paths: dict[str, PathHealth] = {}
    for name, raw in raw_paths.items():
        if skip_unknown and name not in PATH_NAMES:
            continue
        if name not in PATH_NAMES:
            raise DecodeError(
                f"field '{where}': unknown path {wf.short(name)}, expected one of "
                + ", ".join(PATH_NAMES)
            )
        paths[name] = _path_health(raw, f'{where}["{name}"]')
    return paths


def _path_health(raw: object, where: str) -> PathHealth:
    if not isinstance(raw, dict):
        raise DecodeError(f"field '{where}': must be a map, got {wf.type_name(raw)}")
    status_text = wf.string(raw, "status", where)
    try:
        status = ProbeStatus(status_text)
    except ValueError:
        raise DecodeError(
            f"field '{where}.status': unknown status {wf.short(status_text)}, expected one of "
            + ", ".join(s.value for s in ProbeStatus)
        ) from None
    rtt = wf.field(raw, "rtt_s", where)
    rtt_s = None if rtt is None else wf.seconds(rtt, f"{where}.rtt_s")
    loss = wf.number(wf.field(raw, "loss", where), f"{where}.loss")
    if not 0.0 <= loss <= 1.0:
        raise DecodeError(f"field '{where}.loss': must be 0..1, got {loss}")
    # Optional (suspicion). A verdict this version does not know is ignored (the status
    # decides), so a newer agent's report is still read.
    state = raw.get("state")
    if state is not None and not isinstance(state, str):
        raise DecodeError(f"field '{where}.state': must be a string, got {wf.type_name(state)}")
    since = raw.get("state_since")
    return PathHealth(
        status=status,
        rtt_s=rtt_s,
        loss=loss,
        state=state if state in PATH_VERDICTS else None,
        state_since=None if since is None else wf.seconds(since, f"{where}.state_since"),
    )
