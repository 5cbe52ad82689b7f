"""What `meshhealth watch` knows: the view state and how messages change it (pure).

    state = WatchState(source="unix:///run/meshhealth/health.feed.sock")
    changes = apply_feed_message(state, json.loads(text), now=time.time())
    changes = apply_health_reports(state, reports, now=time.time())   # --etcd

Both return the status changes (`Change`) the plain renderer prints one per line. A
path's history keeps its last `WATCH_SPARKLINE_POINTS` RTTs (None for a failed probe)
for the sparkline; it grows on `path` messages and on new etcd reports, never on a
snapshot (a reconnect must not repeat points).
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from meshhealth import defaults
from meshhealth.documents.feed import LaggingMessage, PathMessage, RoundMessage, SnapshotMessage
from meshhealth.documents.matrix_json import MatrixDocument
from meshhealth.documents.reachability import (
    combined_reachability,
    status_reachability,
)
from meshhealth.documents.status_schema import (
    ClusterHealthDocument,
    FindingDocument,
    PathDocument,
    StatusDocument,
)
from meshhealth.model import (
    PATH_STATES,
    REACHABILITY_PROTOCOLS,
    SECONDARY_SUFFIX,
    STATUS_TEXT,
    HealthReport,
    ProbeStatus,
    Reachability,
    TargetType,
    path_name,
)
from meshhealth.naming import node_order
from meshhealth.timefmt import parse_iso_time
from meshhealth.wire.event import FindingEvent

NodeRef = tuple[str, str]  # (cluster, node)
PATH_NAMES: tuple[str, ...] = tuple(
    path_name(t, p) for t in (TargetType.NODE, TargetType.ENDPOINT) for p in REACHABILITY_PROTOCOLS
)
_REACHABILITY_NAMES = frozenset(PATH_NAMES)
Connection = Literal["connecting", "connected", "disconnected"]


@dataclass(slots=True)
class PathView:
    status: str  # a ProbeStatus value
    text: str  # what cilium-health users read: OK, Connection timed out, ...
    rtt_s: float | None = None
    loss: float = 0.0
    last_probed: float | None = None  # unix seconds
    state: Reachability | None = None  # the agent's verdict (None: by status alone)
    history: deque[float | None] = field(
        default_factory=lambda: deque(maxlen=defaults.WATCH_SPARKLINE_POINTS)
    )


@dataclass(slots=True)
class NodeView:
    cluster: str
    name: str
    is_local: bool = False
    node_ip: str | None = None
    health_ip: str | None = None
    paths: dict[str, PathView] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.cluster}/{self.name}"

    @property
    def state(self) -> Reachability:
        """reachable / suspect / unreachable / unknown (meshhealth.documents.reachability):
        each path's verdict when the agent sent one, else its status; of the paths that
        decide reachability only (the MTU and L4 paths, node/icmp-df, node/udp,
        node/tcp:PORT, are shown as changes but are no outage)."""
        return combined_reachability(
            status_reachability(path.status) if path.state is None else path.state
            for name, path in self.paths.items()
            if name.removesuffix(SECONDARY_SUFFIX) in _REACHABILITY_NAMES
        )


@dataclass(slots=True)
class WatchState:
    source: str  # where the data comes from, as shown in the header
    connection: Connection = "connecting"
    connection_detail: str = ""
    nodes: dict[NodeRef, NodeView] = field(default_factory=dict)
    probe_time: float | None = None
    probe_interval_s: float | None = None
    etcd_up: bool | None = None
    etcd_error: str | None = None
    last_update: float | None = None  # unix seconds of the newest message
    mode: Literal["list", "matrix"] = "list"
    matrix: MatrixDocument | None = None  # from the agent's admin API, or built (--etcd)
    matrix_note: str = ""  # why there is no matrix (yet)
    invalid_values: int = 0  # values in etcd skipped because they do not decode (--etcd)
    note: str = ""
    # From the agent's status: each cluster's verdict and the findings of its summary
    # (an agent from before cluster summaries sends none).
    cluster_health: list[ClusterHealthDocument] = field(default_factory=list)
    findings: list[FindingDocument] = field(default_factory=list)
    # The findings timeline's events (--etcd: read from etcd, followed), every cluster's;
    # the view shows the last few.
    events: dict[str, FindingEvent] = field(default_factory=dict)
    # The agent probes a subset of the nodes (the probe plan, from its status snapshot):
    # `nodes` are its direct targets, not the cluster.
    subset_plan: bool = False

    @property
    def health(self) -> tuple[int, int]:
        """(reachable nodes, nodes); suspect nodes are neither."""
        nodes = list(self.nodes.values())
        return sum(1 for n in nodes if n.state == "reachable"), len(nodes)


@dataclass(frozen=True, slots=True)
class Change:
    """One path's status changed (old is None the first time the path is seen)."""

    at: float | None  # unix seconds: the probe that showed it
    node: str  # cluster/node
    path: str  # node/icmp ...
    old: str | None
    new: str


def _time(text: object) -> float | None:
    return parse_iso_time(text) if isinstance(text, str) else None


def _state(value: object) -> Reachability | None:
    for state in PATH_STATES:  # a state this viewer does not know: by status
        if value == state:
            return state
    return None


def shown_text(text: str, state: Reachability | None) -> str:
    """What a change line shows: the text, marked `(suspect)` while the path is."""
    return f"{text} (suspect)" if state == "suspect" else text


def _path_from_document(doc: PathDocument, old: PathView | None) -> PathView:
    view = PathView(
        status=str(doc.get("status", ProbeStatus.UNKNOWN.value)),
        text=str(doc.get("text", STATUS_TEXT[ProbeStatus.UNKNOWN])),
        rtt_s=doc.get("latency_s"),
        loss=float(doc.get("loss", 0.0)),
        last_probed=_time(doc.get("last_probed")),
        state=_state(doc.get("state")),
    )
    if old is not None:
        view.history = old.history
    return view


def _update_path(
    state: WatchState, node: NodeView, name: str, new: PathView, *, add_point: bool
) -> list[Change]:
    old = node.paths.get(name)
    if old is None and new.status == ProbeStatus.UNKNOWN:
        node.paths[name] = new
        return []
    if (
        # A snapshot seeds a new path's history with its newest RTT; later points come
        # from `path` messages (or new reports), so a reconnect never repeats one.
        (add_point or old is None)
        and new.last_probed is not None
        and (old is None or old.last_probed != new.last_probed)
    ):
        new.history.append(new.rtt_s if new.status == ProbeStatus.OK else None)
    node.paths[name] = new
    new_text = shown_text(new.text, new.state)
    old_text = None if old is None else shown_text(old.text, old.state)
    if old is not None and old.status == new.status and old_text == new_text:
        return []
    # A path never probed (an agent that restarted) has no probe time: the change is
    # dated when this viewer learnt it.
    at = new.last_probed if new.last_probed is not None else state.last_update
    return [Change(at, node.label, name, old_text, new_text)]


def _node(state: WatchState, cluster: str, name: str) -> NodeView:
    key = (cluster, name)
    node = state.nodes.get(key)
    if node is None:
        node = state.nodes[key] = NodeView(cluster, name)
    return node


def _apply_header(state: WatchState, doc: StatusDocument | RoundMessage) -> None:
    state.probe_time = _time(doc.get("probe_time"))
    state.probe_interval_s = doc.get("probe_interval_s")
    etcd = doc.get("etcd")
    state.etcd_up = None if etcd is None else etcd.get("up")
    state.etcd_error = None if etcd is None else etcd.get("last_error")
    state.cluster_health = list(doc.get("cluster_health") or [])
    state.findings = list(doc.get("findings") or [])


def _apply_snapshot(state: WatchState, status: StatusDocument) -> list[Change]:
    _apply_header(state, status)
    plan = status.get("probe_plan")
    state.subset_plan = bool(plan and plan.get("subset"))
    changes: list[Change] = []
    seen: set[NodeRef] = set()
    for doc in status.get("nodes", []):
        node = _node(state, doc["cluster"], doc["name"])
        seen.add((node.cluster, node.name))
        node.is_local = bool(doc.get("is_local"))
        node.node_ip = doc["host"]["primary_address"]["ip"]
        endpoint = doc.get("health_endpoint")
        node.health_ip = None if endpoint is None else endpoint["primary_address"]["ip"]
        for target_type, section in (("node", doc["host"]), ("endpoint", endpoint)):
            if section is None:
                continue
            addresses = [(section["primary_address"], "")]
            addresses += [(a, SECONDARY_SUFFIX) for a in section.get("secondary_addresses", [])]
            for address, suffix in addresses:
                for protocol, doc_path in (("icmp", address["icmp"]), ("http", address["http"])):
                    name = f"{target_type}/{protocol}{suffix}"
                    path = _path_from_document(doc_path, node.paths.get(name))
                    changes += _update_path(state, node, name, path, add_point=False)
    for key in set(state.nodes) - seen:
        del state.nodes[key]
    return changes


def _apply_round(state: WatchState, message: RoundMessage) -> None:
    _apply_header(state, message)
    seen: set[NodeRef] = set()
    for doc in message.get("nodes", []):
        node = _node(state, doc["cluster"], doc["name"])
        node.is_local = bool(doc.get("is_local"))
        node.node_ip = doc.get("node_ip")
        node.health_ip = doc.get("health_ip")
        seen.add((node.cluster, node.name))
    for key in set(state.nodes) - seen:
        del state.nodes[key]


def apply_feed_message(
    state: WatchState, message: Mapping[str, Any], *, now: float
) -> list[Change]:
    """Apply one decoded feed message (meshhealth.documents.feed; read as the type it
    names, fields checked as they are used); ValueError for a message this viewer
    cannot read."""
    if message.get("v") != 1:
        raise ValueError(f"feed version {message.get('v')!r} is not supported (expected 1)")
    state.last_update = now
    kind = message.get("type")
    try:
        if kind == "snapshot":
            state.note = ""
            return _apply_snapshot(state, cast(SnapshotMessage, message)["status"])
        if kind == "path":
            update = cast(PathMessage, message)
            node = _node(state, update["cluster"], update["node"])
            suffix = SECONDARY_SUFFIX if update.get("secondary") else ""
            name = f"{update['target_type']}/{update['protocol']}{suffix}"
            path = _path_from_document(update["path"], node.paths.get(name))
            return _update_path(state, node, name, path, add_point=True)
        if kind == "round":
            _apply_round(state, cast(RoundMessage, message))
            return []
        if kind == "lagging":
            reason = cast(LaggingMessage, message).get("reason", "lagging")
            state.note = f"the agent dropped this viewer: {reason}"
            return []
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed {kind} message: missing {exc}") from None
    return []  # unknown types are for newer viewers


# --- --etcd: the published health reports of every node -------------------------------


def aggregate_paths(reports: Iterable[HealthReport]) -> dict[NodeRef, dict[str, PathView]]:
    """Per target node and path, what all sources see: OK when every source sees OK;
    otherwise the most common failure, with how many sources see it (suspect when every
    failing source's verdict is suspect); the median RTT of
    the OK sources; the mean loss; the newest probe time."""
    seen: dict[NodeRef, dict[str, list[tuple[float, Any]]]] = {}
    for report in reports:
        seen.setdefault((report.cluster, report.node), {})
        for target in report.targets:
            per_path = seen.setdefault((target.cluster, target.node), {})
            for name, health in target.paths.items():
                per_path.setdefault(name, []).append((report.probe_time, health))
            for name, health in target.secondary_paths.items():
                label = name + SECONDARY_SUFFIX
                per_path.setdefault(label, []).append((report.probe_time, health))
    views: dict[NodeRef, dict[str, PathView]] = {}
    for ref, per_path in seen.items():
        views[ref] = {}
        for name, observations in per_path.items():
            statuses = [h.status for _, h in observations]
            failing = [s for s in statuses if s is not ProbeStatus.OK]
            rtts = [h.rtt_s for _, h in observations if h.status is ProbeStatus.OK and h.rtt_s]
            path_state: Reachability | None = None
            if failing:
                worst = Counter(failing).most_common(1)[0][0]
                status, text = worst.value, f"{STATUS_TEXT[worst]} ({len(failing)}/{len(statuses)})"
                # suspect only while every failing source says so (their verdicts)
                path_state = combined_reachability(
                    status_reachability(h.status, h.state)
                    for _, h in observations
                    if h.status is not ProbeStatus.OK
                )
            else:
                status, text = ProbeStatus.OK.value, STATUS_TEXT[ProbeStatus.OK]
            views[ref][name] = PathView(
                status=status,
                text=text,
                rtt_s=statistics.median(rtts) if rtts else None,
                loss=sum(h.loss for _, h in observations) / len(observations),
                last_probed=max(t for t, _ in observations),
                state=path_state,
            )
    return views


def apply_health_reports(
    state: WatchState,
    reports: list[HealthReport],
    *,
    now: float,
    matrix: MatrixDocument | None = None,
) -> list[Change]:
    """The list view from every node's published report (and the matrix, when given)."""
    state.last_update = now
    state.matrix = matrix
    state.probe_time = max((r.probe_time for r in reports), default=None)
    state.probe_interval_s = max((r.interval_s for r in reports), default=None)
    changes: list[Change] = []
    views = aggregate_paths(reports)
    for (cluster, name), paths in sorted(views.items(), key=lambda item: node_order(item[0])):
        node = _node(state, cluster, name)
        for path, view in paths.items():
            old = node.paths.get(path)
            if old is not None:
                view.history = old.history
            changes += _update_path(state, node, path, view, add_point=True)
    for key in set(state.nodes) - set(views):
        del state.nodes[key]
    return changes
