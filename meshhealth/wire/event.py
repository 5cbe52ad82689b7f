"""A finding event (`state/events/v1/<cluster>/<id>`, no lease): one finding of the
cluster's timeline, from its opening to its closing, as the cluster's aggregator records
it (docs/events.md, docs/kvstore.md "Finding events").

A finding is the same finding while its kind and nodes stay the same (`identity`); the
event's id is its opening time in unix milliseconds and a hash of that identity
(`event_id`), so the same opening written twice is one key, and keys sort by time.
`closed_at` is absent while the finding lasts; `confidence` and `evidence` are the
strongest the aggregator saw; `expected` holds while every time the aggregator saw the
finding, all its culprits were in planned maintenance (a window that ends while the
finding goes on makes the event unexpected, and stays so).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import DecodeError, Field
from meshhealth.wire.summary import FINDING_FIELDS, SummaryFinding

# A finding's identity: its kind and its nodes ("cluster/node"), in the finding's order.
Identity = tuple[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class FindingEvent:
    """One finding from its opening to its closing (None while it lasts)."""

    cluster: str
    id: str  # keys.validate_event_id: `event_id(kind, nodes, opened_at)`
    kind: str  # a diagnosis FindingKind value (an unknown kind is kept: newer writers)
    nodes: tuple[str, ...]  # "cluster/node", the culprits
    confidence: float  # 0 .. 1, the strongest seen
    evidence: str  # the evidence when it was strongest
    opened_at: float  # unix seconds: since when the finding held
    closed_at: float | None = None  # unix seconds: when the aggregator saw it end
    groups: tuple[tuple[str, ...], ...] = ()  # partition only
    opened_by: str = ""  # the aggregator (node name) that opened it
    closed_by: str = ""  # ... and the one that closed it
    expected: bool = False  # every culprit in planned maintenance, all along

    @property
    def identity(self) -> Identity:
        return (self.kind, self.nodes)

    def open_at(self, when: float) -> bool:
        """Whether the finding held at unix time `when`."""
        return self.opened_at <= when and (self.closed_at is None or when < self.closed_at)

    def as_finding(self) -> SummaryFinding:
        """The finding as a summary publishes it, `since` its opening."""
        return SummaryFinding(
            self.kind,
            self.nodes,
            self.confidence,
            self.opened_at,
            self.evidence,
            self.groups,
            self.expected,
        )


def identity(finding: SummaryFinding) -> Identity:
    return (finding.kind, finding.nodes)


def event_id(ident: Identity, opened_at: float) -> str:
    """`<unix ms, 13 digits>-<12 hex digits of the identity>`."""
    kind, nodes = ident
    digest = hashlib.sha256("\0".join((kind, *nodes)).encode()).hexdigest()[:12]
    return f"{min(int(opened_at * 1000), 10**13 - 1):013d}-{digest}"


def _check(event: FindingEvent) -> FindingEvent:
    if event.closed_at is not None and event.closed_at < event.opened_at:
        raise DecodeError(
            f"field 'closed_at': {event.closed_at} is before opened_at {event.opened_at}"
        )
    return event


_finding = {field.name: field for field in FINDING_FIELDS}
FIELDS = (
    Field("cluster", f.cluster_name),
    Field("id", f.event_id),
    _finding["kind"],
    _finding["nodes"],
    _finding["confidence"],
    _finding["evidence"],
    Field("opened_at", f.seconds),
    Field("closed_at", f.seconds, default=None),
    _finding["groups"],
    Field("opened_by", f.node_name, default=""),
    Field("closed_by", f.node_name, default=""),
    _finding["expected"],
)
EVENT = Codec.of("finding event", FindingEvent, FIELDS, _check)
encode_event, decode_event, event_to_wire = EVENT.encode, EVENT.decode, EVENT.to_wire
