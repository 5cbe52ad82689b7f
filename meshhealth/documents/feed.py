"""The live feed's messages and the per-client coalescing queue (pure, no I/O).

Every message of the feed (meshhealth.agent.serving.feed_server) is one JSON object
with `"v": FEED_VERSION`, a `type` (snapshot, path, round, lagging) and a `seq`;
docs/watch.md documents them. A `path` message's `changed` says what a viewer that
wants only news should look at (status, RTT bucket). `CoalescingQueue` keeps at most
one pending message per key, so a slow reader gets the newest value per path; one too
far behind gets a single `lagging` message and is disconnected.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable
from typing import Literal, NotRequired, TypedDict

from meshhealth.documents.status import PathVerdictLike, path_document
from meshhealth.documents.status_schema import (
    ClusterHealthDocument,
    EtcdDocument,
    FindingDocument,
    LocalDocument,
    PathDocument,
    RoundDocument,
    StatusDocument,
    SummaryDocument,
)
from meshhealth.model import PathKey, PathSummary, ProbeResult, Reachability, protocol_name

FEED_VERSION = 1
FEED_PATH = "/v1/feed"  # the WebSocket resource; anything else is answered 404

# Upper bounds of the RTT buckets (a 1-3-10 ladder); the last bucket is open.
RTT_BUCKET_BOUNDS_S: tuple[float, ...] = (
    100e-6,
    300e-6,
    1e-3,
    3e-3,
    10e-3,
    30e-3,
    100e-3,
    300e-3,
    1.0,
)

SNAPSHOT_KEY = ("snapshot",)
ROUND_KEY = ("round",)
LAGGING_KEY = ("lagging",)


def feed_socket_path(admin_socket: str) -> str:
    """The feed's unix socket, beside the admin socket: `health.sock` -> `health.feed.sock`
    (any other name gets `.feed` appended). A path that is already a feed socket is kept."""
    if admin_socket.endswith(".feed.sock") or admin_socket.endswith(".feed"):
        return admin_socket
    if admin_socket.endswith(".sock"):
        return admin_socket.removesuffix(".sock") + ".feed.sock"
    return admin_socket + ".feed"


def rtt_bucket(rtt_s: float | None) -> int | None:
    """The bucket index of an RTT (0 = under 100 µs), None when there is no RTT."""
    if rtt_s is None:
        return None
    for index, bound in enumerate(RTT_BUCKET_BOUNDS_S):
        if rtt_s < bound:
            return index
    return len(RTT_BUCKET_BOUNDS_S)


def path_changes(previous: ProbeResult | None, current: ProbeResult) -> list[str]:
    """What changed between two results of one path: `status`, `rtt_bucket` (see module)."""
    changed: list[str] = []
    if previous is None or previous.status is not current.status:
        changed.append("status")
    if previous is None or rtt_bucket(previous.rtt_s) != rtt_bucket(current.rtt_s):
        changed.append("rtt_bucket")
    return changed


class SnapshotMessage(TypedDict):
    """On connect: the whole status document."""

    v: int
    type: Literal["snapshot"]
    seq: int
    status: StatusDocument


class PathMessage(TypedDict):
    """One path's newest result, as soon as its probe ends."""

    v: int
    type: Literal["path"]
    seq: int
    cluster: str
    node: str
    target_type: str  # node | endpoint
    protocol: str  # icmp | http | icmp-df | udp | tcp:PORT (model.protocol_name)
    ip: str
    changed: list[str]  # status, rtt_bucket (see the module doc)
    path: PathDocument
    secondary: NotRequired[bool]  # True: a dual-stack target's secondary address


class RoundNodeDocument(TypedDict):
    """A node of the probe set in a `round` message (no paths)."""

    cluster: str
    name: str
    is_local: bool
    node_ip: str
    health_ip: str | None
    state: Reachability


class RoundMessage(TypedDict):
    """A round finished: the status document's head and summary, and the probe set."""

    v: int
    type: Literal["round"]
    seq: int
    generated_at: str | None
    probe_time: str | None
    probe_interval_s: float
    duration_s: float
    local: LocalDocument
    etcd: EtcdDocument
    round: RoundDocument
    summary: SummaryDocument
    nodes: list[RoundNodeDocument]
    cluster_health: list[ClusterHealthDocument]  # as in the status document
    findings: list[FindingDocument]


class LaggingMessage(TypedDict):
    """The client fell too far behind; the connection is closed next."""

    v: int
    type: Literal["lagging"]
    seq: int | None
    reason: str
    dropped: int


FeedMessage = SnapshotMessage | PathMessage | RoundMessage | LaggingMessage


def encode(message: FeedMessage) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def snapshot_message(status: StatusDocument, seq: int) -> SnapshotMessage:
    return {"v": FEED_VERSION, "type": "snapshot", "seq": seq, "status": status}


def path_message(
    key: PathKey,
    ip: str,
    summary: PathSummary,
    changed: list[str],
    seq: int,
    *,
    verdict: PathVerdictLike | None = None,
) -> PathMessage:
    message: PathMessage = {
        "v": FEED_VERSION,
        "type": "path",
        "seq": seq,
        "cluster": key.cluster,
        "node": key.node,
        "target_type": key.target_type.value,
        "protocol": protocol_name(key.protocol, key.port),
        "ip": ip,
        "changed": changed,
        "path": path_document(summary, verdict=verdict),
    }
    if key.secondary:
        message["secondary"] = True
    return message


def round_message(status: StatusDocument, duration_s: float, seq: int) -> RoundMessage:
    """From the status document after the round: everything but the per-path details."""
    nodes: list[RoundNodeDocument] = [
        {
            "cluster": node["cluster"],
            "name": node["name"],
            "is_local": node["is_local"],
            "node_ip": node["host"]["primary_address"]["ip"],
            "health_ip": (
                None
                if node["health_endpoint"] is None
                else node["health_endpoint"]["primary_address"]["ip"]
            ),
            "state": node["state"],
        }
        for node in status["nodes"]
    ]
    return {
        "v": FEED_VERSION,
        "type": "round",
        "seq": seq,
        "generated_at": status["generated_at"],
        "probe_time": status["probe_time"],
        "probe_interval_s": status["probe_interval_s"],
        "duration_s": duration_s,
        "local": status["local"],
        "etcd": status["etcd"],
        "round": status["round"],
        "summary": status["summary"],
        "nodes": nodes,
        "cluster_health": status["cluster_health"],
        "findings": status["findings"],
    }


def lagging_message(reason: str, dropped: int, seq: int | None = None) -> LaggingMessage:
    return {"v": FEED_VERSION, "type": "lagging", "seq": seq, "reason": reason, "dropped": dropped}


class CoalescingQueue:
    """Pending messages of one client: the newest per key, in order of their last update.

    `put` never blocks and never grows the queue past `max_pending` keys; it returns
    False once the client is lagging (see the module docstring). After that, `pop`
    gives the one `lagging` message, then None for ever (`finished` is True).
    """

    def __init__(self, *, max_pending: int, max_rounds_behind: int) -> None:
        if max_pending < 2 or max_rounds_behind < 1:
            raise ValueError("max_pending must be >= 2 and max_rounds_behind >= 1")
        self.max_pending = max_pending
        self.max_rounds_behind = max_rounds_behind
        self._pending: OrderedDict[Hashable, str] = OrderedDict()
        self.rounds_behind = 0  # round messages queued since the client got one
        self.coalesced = 0  # messages replaced by a newer one before they were sent
        self.lagging = False
        self.finished = False

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, key: Hashable, message: str, *, is_round: bool = False) -> bool:
        if self.lagging:
            return False
        if key in self._pending:
            self.coalesced += 1
            self._pending.move_to_end(key)
        self._pending[key] = message
        if is_round:
            self.rounds_behind += 1
        if self.rounds_behind > self.max_rounds_behind:
            self._lag(f"more than {self.max_rounds_behind} rounds behind")
        elif len(self._pending) > self.max_pending:
            self._lag(f"more than {self.max_pending} updates pending")
        return not self.lagging

    def _lag(self, reason: str) -> None:
        dropped = len(self._pending) + self.coalesced
        self._pending.clear()
        self._pending[LAGGING_KEY] = encode(lagging_message(reason, dropped))
        self.lagging = True

    def pop(self) -> str | None:
        """The oldest pending message, or None when nothing is pending."""
        if not self._pending:
            if self.lagging:
                self.finished = True
            return None
        key, message = self._pending.popitem(last=False)
        if key == ROUND_KEY:
            self.rounds_behind = 0
        if key == LAGGING_KEY:
            self.finished = True
        return message
