"""The health report (`state/health/v1/<cluster>/<node>`, under the node's lease): what
one node's probes found for each of its targets, path by path.

The biggest and busiest value in etcd: rewritten when a path's state changes, read by
the aggregator and the matrix. Optional fields (the plan, local health, suspicion
states, extra and secondary paths) are written only when they say something, so older
readers keep reading what they know.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from meshhealth import defaults
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
    TraceStop,
    path_name,
)
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import DecodeError, Field

MAX_TARGETS = 10_000
MAX_PORT = 65_535
MAX_HEALTH_SCORE = defaults.LOCAL_HEALTH_MAX_MULTIPLIER - 1
MAX_DEGRADED_REASONS = 16
# The probe plan's settings (HealthReport.plan): caps far above any real use.
MAX_PLAN_EPOCH = 2**53
MAX_PLAN_K = MAX_TARGETS
MAX_PLAN_ROTATION_ROUNDS = 1_000_000
MAX_PLAN_NODES = 1_000_000
MAX_TRACE_HOP = 255  # an IP TTL

# "node/icmp", "node/http", "endpoint/icmp", "endpoint/http": every reader knows them.
CORE_PATH_NAMES: tuple[str, ...] = tuple(
    path_name(t, p) for t in TargetType for p in REACHABILITY_PROTOCOLS
)
# Paths added since ("node/icmp-df", "node/udp"): written in the optional `extra_paths`
# map, because readers older than them refuse a report whose `paths` holds a name they do
# not know; a reader skips the names in `extra_paths` it does not know.
EXTRA_PATH_NAMES: tuple[str, ...] = (
    path_name(TargetType.NODE, Protocol.ICMP_DF),
    path_name(TargetType.NODE, Protocol.UDP),
)
PATH_NAMES: tuple[str, ...] = CORE_PATH_NAMES + EXTRA_PATH_NAMES
# ... and one `node/tcp:<port>` per port of the agent's `--probe-tcp-ports` (extra too).
TCP_PATH_PREFIX = path_name(TargetType.NODE, Protocol.TCP, 0).removesuffix("0")


def known_path_name(name: str) -> bool:
    """Whether this version reads a path of that name: PATH_NAMES, or `node/tcp:<port>`
    with a port 1-65535 written without leading zeros."""
    if name in PATH_NAMES:
        return True
    port = name.removeprefix(TCP_PATH_PREFIX)
    return (
        port != name
        and port.isascii()
        and port.isdigit()
        and not port.startswith("0")
        and int(port) <= MAX_PORT
    )


def _verdict(value: object, where: str) -> str | None:
    """A suspicion verdict; one this version does not know is ignored (the status
    decides), so a newer agent's report is still read."""
    state = f.string(value, where)
    return state if state in PATH_VERDICTS else None


PATH_FIELDS = (
    Field("status", f.choice(ProbeStatus, "status")),
    Field("rtt_s", f.nullable(f.seconds)),
    Field("loss", f.fraction),
    Field("state", _verdict, default=None),  # optional (suspicion)
    f.time_field("state_since", default=None),
)
_path = f.record(PATH_FIELDS, PathHealth)


def _paths(skip_unknown: bool = False) -> f.Check:
    """A map of path name -> PathHealth; an unknown name is refused (or skipped)."""

    def check(value: object, where: str) -> dict[str, PathHealth]:
        paths: dict[str, PathHealth] = {}
        for name, raw in f.a_map(value, where).items():
            if known_path_name(name):
                paths[name] = _path(raw, f'{where}["{name}"]')
            elif not skip_unknown:
                raise DecodeError(
                    f"field '{where}': unknown path {f.short(name)}, expected one of "
                    + ", ".join(PATH_NAMES)
                )
        return paths

    return check


# Where this node's trace to the target stopped (optional: while its NodeIP ICMP path is
# unreachable): the farthest answering hop's address (nil: none answered), its number.
TRACE_FIELDS = (
    Field("address", f.nullable(f.ip)),
    Field("hop", f.integer(0, MAX_TRACE_HOP)),
    f.time_field("at"),
)
_trace = f.record(TRACE_FIELDS, TraceStop)

_family = f.one_of(ADDRESS_FAMILIES)
TARGET_FIELDS = (
    Field("cluster", f.cluster_name),
    Field("node", f.node_name),
    Field("paths", _paths()),
    Field("extra_paths", _paths(skip_unknown=True), default={}),  # names we know only
    Field("secondary_paths", _paths(), default={}),  # dual stack
    Field("trace", _trace, default=None),  # older readers ignore it
)
PLAN_FIELDS = (
    Field("epoch", f.integer(0, MAX_PLAN_EPOCH)),
    Field("k", f.integer(1, MAX_PLAN_K)),
    Field("rotation_rounds", f.integer(1, MAX_PLAN_ROTATION_ROUNDS)),
    Field("full_mesh", f.boolean),
    Field("full_mesh_max_nodes", f.integer(0, MAX_PLAN_NODES)),
    Field("nodes", f.integer(1, MAX_PLAN_NODES)),
)


def _shared(targets: Iterable[TargetHealth]) -> str | None:
    """The family of most dual-stack targets' secondary paths (ties: the first in
    ADDRESS_FAMILIES). None without a dual-stack target that says one."""
    counts = Counter(
        t.secondary_family for t in targets if t.secondary_paths and t.secondary_family
    )
    return max(sorted(counts), key=counts.__getitem__) if counts else None


def _targets(r: HealthReport) -> list[dict[str, object]]:
    shared = _shared(r.targets)
    wire = []
    for t in r.targets:
        # extra paths apart; a name nobody knows stays in `paths`, where encoding refuses it
        core = {n: p for n, p in t.paths.items() if n in CORE_PATH_NAMES or not known_path_name(n)}
        target: dict[str, object] = {"cluster": t.cluster, "node": t.node, "paths": f.plain(core)}
        if len(core) != len(t.paths):  # optional: older readers ignore the field
            target["extra_paths"] = f.plain({n: t.paths[n] for n in t.paths if n not in core})
        if t.secondary_paths:  # optional (dual stack)
            target["secondary_paths"] = f.plain(t.secondary_paths)
        if t.secondary_family != (shared if t.secondary_paths else None):
            target["secondary_family"] = t.secondary_family
        if t.trace is not None:  # optional: only while a trace says where the way stops
            target["trace"] = f.plain(t.trace)
        wire.append(target)
    return wire


FIELDS = (
    Field("node", f.node_name),
    Field("cluster", f.cluster_name),
    f.time_field("probe_time"),
    Field("interval_s", f.positive_seconds),
    Field("targets", f.list_of(f.a_map, MAX_TARGETS, of=dict), get=_targets),
    # The family most targets' secondary paths are, once (a target of another says its own).
    Field("secondary_family", _family, default=None, get=lambda r: _shared(r.targets)),
    Field("plan", f.record(PLAN_FIELDS, PlanInfo), default=None),
    # Local health awareness: only from an agent that is not well.
    Field("health_score", f.integer(0, MAX_HEALTH_SCORE), default=0),
    f.time_field("degraded_since", default=None),
    Field(
        "degraded_reasons",
        f.list_of(
            f.pattern(r"[a-z0-9][a-z0-9-]{0,39}", "not a reason code (a-z, 0-9, '-'), got {short}"),
            MAX_DEGRADED_REASONS,
        ),
        default=(),
    ),
)


def _report(m: Mapping[str, object]) -> HealthReport:
    read: dict[str, Any] = f.read(m, FIELDS)
    shared = read.pop("secondary_family")
    targets: list[TargetHealth] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(read.pop("targets")):
        where = f"targets[{i}]"
        t = f.read(raw, TARGET_FIELDS, where)
        t["paths"].update(t.pop("extra_paths"))
        if "secondary_family" in raw:
            family = f.nullable(_family)(raw["secondary_family"], f"{where}.secondary_family")
        else:
            family = shared if t["secondary_paths"] else None
        if (t["cluster"], t["node"]) in seen:
            raise DecodeError(f"field '{where}': duplicate target {t['cluster']}/{t['node']}")
        seen.add((t["cluster"], t["node"]))
        targets.append(TargetHealth(**t, secondary_family=family))
    return HealthReport(**read, targets=tuple(targets))


HEALTH = Codec("health report", _report, lambda r: f.write(r, FIELDS))
encode_health_report, decode_health_report = HEALTH.encode, HEALTH.decode
