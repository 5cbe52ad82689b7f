"""The cluster summary (`state/summary/v1/<cluster>`, under the aggregator's lease): the
verdict the cluster's aggregator publishes, so every other agent reads one key instead
of every health report (docs/kvstore.md "Cluster summary").

It says how many nodes are reachable, unreachable, suspect or unknown, by how many
observers; how many observers fail to reach each target with failures (others read
these as confirmations of their own suspicion: `failing_observers`); diagnosis's
findings; the state of every node that is not reachable (`node_states`) and the
observers the verdict discounted (`discounted`). The last two are optional on read
(absent: empty) and always written. Nodes in planned maintenance are counted apart
(`nodes.maintenance`, not in `total`), each with its own state in `maintenance`, and a
finding whose culprits are all in maintenance is `expected`: all three optional, left
out when empty, so an older reader sees the verdict without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from meshhealth import defaults
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import DecodeError, Field
from meshhealth.wire.health import MAX_TARGETS

# Caps on repeated fields: far above any real use, low enough to bound memory.
MAX_FINDINGS = 1_000
MAX_FINDING_NODES = 10_000
MAX_GROUPS = 64
MAX_FAILING_TARGETS = MAX_TARGETS
MAX_COUNT = 10_000_000
MAX_EVIDENCE_CHARS = 1_000
MAX_KIND_CHARS = 64
# The node states a summary names (every node that is not reachable) and the observers
# it discounts: one per node at most, bounded like the targets of a report.
MAX_NODE_STATES = MAX_TARGETS
MAX_DISCOUNTED = MAX_TARGETS
NODE_STATES = ("unreachable", "suspect", "unknown")


@dataclass(frozen=True, slots=True)
class NodeCounts:
    """The cluster's nodes by verdict (documents.reachability `node_consensus`)."""

    reachable: int = 0
    unreachable: int = 0
    suspect: int = 0
    unknown: int = 0
    maintenance: int = 0  # in planned maintenance: in none of the above, nor in `total`

    @property
    def total(self) -> int:
        return self.reachable + self.unreachable + self.suspect + self.unknown


@dataclass(frozen=True, slots=True)
class SummaryFinding:
    """One finding as published: the JSON of `meshhealth diagnose`, with unix times."""

    kind: str  # a diagnosis FindingKind value (an unknown kind is kept: newer writers)
    nodes: tuple[str, ...]  # "cluster/node", the culprits
    confidence: float  # 0 .. 1
    since: float  # unix seconds
    evidence: str
    groups: tuple[tuple[str, ...], ...] = ()  # partition only
    expected: bool = False  # every culprit is in planned maintenance


@dataclass(frozen=True, slots=True)
class MaintenanceNote:
    """A node in planned maintenance (meshhealth.wire.maintenance): its own state, kept
    though it is left out of the verdict, and its window's end, reason and setter."""

    state: str  # reachable, unreachable, suspect, unknown
    end: float  # unix seconds
    reason: str = ""
    by: str = ""


@dataclass(frozen=True, slots=True)
class DiscountedObserver:
    """An observer whose own row explains its failures, so they do not count against the
    nodes it fails to reach: why (a finding's kind, or `degraded` from its own report),
    how many of the targets it observed it fails, and how many of its own observers
    reach it."""

    reason: str
    fails: int = 0
    targets: int = 0
    reached_by: int = 0
    observers: int = 0


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    cluster: str
    aggregator: str  # the node name of the agent that wrote it
    generated_at: float  # unix seconds of the matrix it was built from
    nodes: NodeCounts
    observers_min: int  # fewest fresh observers of any node of the cluster
    observers_median: float
    # "cluster/node" -> fresh observers that fail to reach it (only targets with failures)
    failing_observers: Mapping[str, int] = field(default_factory=dict)
    findings: tuple[SummaryFinding, ...] = ()
    # "cluster/node" -> its state, for every node of the cluster that is not reachable
    node_states: Mapping[str, str] = field(default_factory=dict)
    # "cluster/node" -> the observers the verdict left out, and why
    discounted: Mapping[str, DiscountedObserver] = field(default_factory=dict)
    # "cluster/node" -> its maintenance, for every node of the cluster in maintenance
    maintenance: Mapping[str, MaintenanceNote] = field(default_factory=dict)

    def same_content(self, other: ClusterSummary | None) -> bool:
        """Equal but for `generated_at`: nothing a reader would act on changed."""
        return other is not None and replace(other, generated_at=self.generated_at) == self


def node_label(cluster: str, node: str) -> str:
    return f"{cluster}/{node}"


def _groups(value: object, where: str) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list) or len(value) > MAX_GROUPS:
        raise DecodeError(f"field '{where}': must be a list of at most {MAX_GROUPS}")
    return tuple(_node_list(group, f"{where}[{i}]") for i, group in enumerate(value))


# A finding's kind: text, then at most MAX_KIND_CHARS.
_kind = f.rule(
    f.text(), lambda s: len(s) <= MAX_KIND_CHARS, f"longer than {MAX_KIND_CHARS} characters"
)
_node_list = f.list_of(f.node_ref, MAX_FINDING_NODES, of=object, tail="")
_count = f.count(MAX_COUNT)
FINDING_FIELDS = (
    Field("kind", _kind),
    Field("nodes", _node_list),
    Field("confidence", f.fraction),
    f.time_field("since"),
    Field("evidence", f.text(MAX_EVIDENCE_CHARS, allow_empty=True)),
    Field("groups", _groups, default=()),
    Field("expected", f.boolean, default=False),
)
COUNT_FIELDS = (
    *(Field(n, _count) for n in ("reachable", "unreachable", "suspect", "unknown")),
    Field("maintenance", _count, default=0),
)
OBSERVERS_FIELDS = (Field("min", _count), Field("median", f.seconds))
DISCOUNTED_FIELDS = (
    Field(
        "reason",
        f.pattern(
            rf"[a-z][a-z0-9-]{{0,{MAX_KIND_CHARS - 1}}}",
            f"must be a code like 'egress-blocked' (a-z, 0-9, '-', at most {MAX_KIND_CHARS}), "
            "got {short}",
        ),
    ),
    *(Field(name, _count) for name in ("fails", "targets", "reached_by", "observers")),
)
MAINTENANCE_FIELDS = (
    Field("state", f.one_of(("reachable", *NODE_STATES))),
    f.time_field("end"),
    Field("reason", f.text(defaults.MAINTENANCE_REASON_MAX_CHARS, allow_empty=True), default=""),
    Field("by", f.text(allow_empty=True), default=""),
)
FIELDS = (
    Field("cluster", f.cluster_name),
    Field("aggregator", f.node_name),
    f.time_field("generated_at"),
    Field("nodes", f.record(COUNT_FIELDS, NodeCounts)),
    Field(
        "observers",
        f.record(OBSERVERS_FIELDS, dict),
        get=lambda s: {"min": s.observers_min, "median": s.observers_median},
    ),
    Field("failing_observers", f.map_of(f.node_ref, _count, MAX_FAILING_TARGETS)),
    Field("findings", f.list_of(f.record(FINDING_FIELDS, SummaryFinding), MAX_FINDINGS, of=dict)),
    Field(
        "node_states",
        f.map_of(f.node_ref, f.one_of(NODE_STATES), MAX_NODE_STATES),
        default={},
        always=True,
    ),
    Field(
        "discounted",
        f.map_of(f.node_ref, f.record(DISCOUNTED_FIELDS, DiscountedObserver), MAX_DISCOUNTED),
        default={},
        always=True,
    ),
    Field(
        "maintenance",
        f.map_of(f.node_ref, f.record(MAINTENANCE_FIELDS, MaintenanceNote), MAX_NODE_STATES),
        default={},
    ),
)


def finding_to_wire(finding: SummaryFinding) -> dict[str, object]:
    return f.write(finding, FINDING_FIELDS)


def _summary(m: Mapping[str, object]) -> ClusterSummary:
    read: dict[str, Any] = f.read(m, FIELDS)
    observers = read.pop("observers")
    return ClusterSummary(
        **read, observers_min=observers["min"], observers_median=observers["median"]
    )


SUMMARY = Codec("cluster summary", _summary, lambda s: f.write(s, FIELDS))
encode_summary, decode_summary, summary_to_wire = SUMMARY.encode, SUMMARY.decode, SUMMARY.to_wire
