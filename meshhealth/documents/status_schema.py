"""The shape of the status document and of the healthz answer, field by field.

These are JSON objects (plain types only) and the product's public API: `GET /v1/status`,
`meshhealth status -o json`, the feed's snapshot and docs/status.md all show them. The
builders are in meshhealth.documents.status; the key order of each TypedDict below is
the order of the JSON. A new field goes here, in the builder and in docs/status.md (a
test checks that every field is documented).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from meshhealth.documents.findings import FindingJSON
from meshhealth.documents.maintenance import MaintenanceDocument
from meshhealth.documents.plan import ProbePlanDocument as ProbePlanDocument  # noqa: PLC0414
from meshhealth.model import Reachability


class IndirectDocument(TypedDict):
    """What helpers found when this failing path was checked through them (indirect
    probes, docs/indirect-probes.md). Nodes are "<cluster>/<node>"."""

    conclusion: str  # path-broken | target-down | no-answer | no-helper
    detail: str  # "reachable via lab1/node5, lab1/node7: path from this node broken"
    reachable_via: list[str]  # helpers that reach the path
    failed_via: list[str]  # helpers that answered and fail it too
    checked_at: str | None


class PathDocument(TypedDict):
    """One path (an address over ICMP or HTTP): the newest result and the window's
    figures. Times are RFC 3339 UTC (meshhealth.timefmt.iso_time), durations seconds.
    `indirect` is there only while the path fails and helpers were asked about it."""

    status: str  # a ProbeStatus value: ok, timeout, refused, ..., unknown
    text: str  # what cilium-health users read: OK, Connection timed out, HTTP 503
    detail: str
    latency_s: float | None  # the newest RTT
    loss: float  # 0..1 over the window
    rtt_p50_s: float | None
    rtt_p95_s: float | None
    rtt_max_s: float | None
    samples: int
    last_probed: str | None
    last_success: str | None
    consecutive_failures: int
    state: Reachability  # reachable, suspect, unreachable, unknown (the agent's verdict)
    state_since: str | None  # when the path entered `state` (None: unknown)
    # ICMP: hops to the target (1: same link), guessed from the newest reply's TTL / hop
    # limit (probe/hop_count.py); absent when not known (no reply yet, HTTP)
    hops: NotRequired[int]
    indirect: NotRequired[IndirectDocument]


class DontFragmentPathDocument(PathDocument):
    """The MTU probe's path (node/icmp-df): a PATH object and the size it probes."""

    size_bytes: int  # the IP packet size of its newest probe (0: not probed yet)


class TcpPathDocument(PathDocument):
    """A TCP connect probe's path (node/tcp:PORT): a PATH object and its port."""

    port: int


class AddressDocument(TypedDict):
    ip: str
    icmp: PathDocument
    http: PathDocument
    # the host's don't-fragment MTU probe (the agent's --mtu-probe-size), when it runs;
    # not part of `reachable` / `state`
    icmp_df: NotRequired[DontFragmentPathDocument]
    # the host's UDP echo probe (the agent's --udp-source-ports), when it runs; not part of
    # `reachable` / `state`
    udp: NotRequired[PathDocument]
    # the host's TCP connect probes (the agent's --probe-tcp-ports), one per port, in
    # port order; not part of `reachable` / `state`
    tcp: NotRequired[list[TcpPathDocument]]


class PrimaryAddressDocument(TypedDict):
    """cilium-health's `host` / `health-endpoint` object: one `primary_address`, and
    for a dual-stack node its `secondary_addresses` (the other family; absent when the
    node has none, as Cilium omits an empty list)."""

    primary_address: AddressDocument
    secondary_addresses: NotRequired[list[AddressDocument]]


class NodeDocument(TypedDict):
    cluster: str
    name: str
    is_local: bool
    host: PrimaryAddressDocument
    health_endpoint: PrimaryAddressDocument | None  # None: the node has no HealthIP
    reachable: bool
    state: Reachability
    host_state: Reachability  # the Node column of `cilium status --verbose`
    health_endpoint_state: Reachability | None  # the Endpoints column
    # Only for a node whose agent's lease expired without a clean leave: since when
    # (RFC 3339); kept in view, its NodeIP probed, for the retention time.
    agent_down_since: NotRequired[str]


class LocalDocument(TypedDict):
    cluster: str
    name: str
    node_ip: str
    health_ip: str | None
    node_ip_secondary: NotRequired[str]  # dual stack only
    health_ip_secondary: NotRequired[str]  # dual stack with a secondary HealthIP only


class EtcdDocument(TypedDict):
    up: bool
    since: str | None  # when `up` last changed
    last_error: str | None  # one line, when down
    endpoint: NotRequired[str]  # the member requests go to now (when known)


class RoundDocument(TypedDict):
    running: bool
    last_started_at: str | None
    last_duration_s: float | None
    completed: int


class ClusterDocument(TypedDict):
    name: str
    id: int | None
    local: bool
    state: str  # ok | etcd_down | waiting | refused
    error: str | None
    etcd: EtcdDocument
    node_count: int


class SummaryDocument(TypedDict):
    reachable: int
    unreachable: int
    suspect: int  # neither reachable nor unreachable: failing, not for long enough yet
    unknown: int
    total: int


class DiscountedObserverDocument(TypedDict):
    """An observer whose own row explains its failures: they do not count against the
    nodes it fails to reach (docs/diagnosis.md "The cluster verdict")."""

    node: str  # cluster/node
    reason: str  # the finding that names it (egress-blocked, ...) or `degraded`
    text: str  # the reason in words: `lab1/node3 cannot reach out (egress-blocked)`
    fails: int  # targets it fails to reach ...
    targets: int  # ... of those it probed
    reached_by: int  # its observers that reach it ...
    observers: int  # ... of those that probed it


class ClusterHealthDocument(TypedDict):
    """One cluster's verdict: its aggregator's summary, else this node's own probes."""

    cluster: str
    # "summary" (every observer, via the aggregator) | "local" (this node's own probes) |
    # "reports" (every observer, from the reports in etcd, by a reader: `watch --etcd`)
    source: str
    aggregator: str | None  # cluster/node of the agent that wrote the summary
    updated_at: str | None  # when the summary last changed
    age_s: float | None  # generated_at - updated_at
    reachable: int
    unreachable: int
    suspect: int
    unknown: int
    total: int
    # Nodes in planned maintenance: in none of the counts above, nor in `total`
    maintenance: int
    observers_min: int | None  # fewest observers of any node (summary only)
    observers_median: float | None
    # cluster/node -> state of every node that is not reachable (summary only)
    node_states: dict[str, str]
    # The observers the verdict left out for the nodes they fail to reach (summary only)
    discounted_observers: list[DiscountedObserverDocument]
    # Those observers in the findings' words, as the headline prints them; None: none
    discounted_text: str | None
    # When this node is one of them: what is wrong with it, the status's first line
    this_node: str | None
    # The nodes in planned maintenance, each with its own state and window (summary only)
    maintenance_nodes: list[MaintenanceDocument]
    # Only when true: a cluster of one node that nobody observes (no other node to probe
    # it): its counts say nothing, and the texts say so (ALONE_TEXT).
    alone: NotRequired[bool]


class FindingDocument(FindingJSON):
    """One finding as the status document and the feed carry it: the findings document's
    entry (`meshhealth diagnose -o json`) and one field more."""

    # Only when true: this node's own probes, newer than the summary that carries the
    # finding, pass on the paths it rests on (the evidence says so too)
    stale: NotRequired[bool]


class StatusHeadDocument(TypedDict):
    """The fields before `nodes`: they change with every request."""

    v: int
    generated_at: str | None
    probe_time: str | None
    probe_interval_s: float
    local: LocalDocument
    etcd: EtcdDocument
    round: RoundDocument
    probe_plan: ProbePlanDocument | None  # None: no plan known yet
    local_health: LocalHealthDocument | None  # None: not measured yet


class LocalHealthDocument(TypedDict):
    """The agent's own health (local health awareness, docs/diagnosis.md)."""

    score: int  # 0 (well) .. 7
    degraded: bool  # from score 2: its own failures are suspected first
    degraded_since: str | None
    reasons: list[str]  # e.g. "event loop lagging 0.8 s"
    reason_codes: NotRequired[list[str]]  # the same as codes: loop-lag, targets-failing, ...


class StatusDocument(StatusHeadDocument):
    """`GET /v1/status`: the head, then every node (local first), clusters, summary,
    the cluster verdicts and the findings."""

    nodes: list[NodeDocument]
    clusters: list[ClusterDocument]
    summary: SummaryDocument
    cluster_health: list[ClusterHealthDocument]
    findings: list[FindingDocument]


class StatusTailDocument(TypedDict):
    """The fields after `nodes` (encoded apart when the cached nodes are spliced in)."""

    clusters: list[ClusterDocument]
    summary: SummaryDocument
    cluster_health: list[ClusterHealthDocument]
    findings: list[FindingDocument]


class HealthzDocument(TypedDict):
    """`GET /v1/healthz`: the agent answers, and etcd's state."""

    status: str  # always "ok": the agent answered
    started_at: str | None
    uptime_s: float
    etcd: EtcdDocument
    registered: NotRequired[bool]  # the agent adds whether its node lease is alive
