"""The findings timeline as a document (pure): `meshhealth events -o json`.

    {"events": [{"cluster": "lab1", "id": "1795749120000-3f2a9c0b1d4e",
                 "kind": "node-down", "nodes": ["lab1/node3"], "confidence": 0.88,
                 "evidence": "...", "opened_at": "2026-11-27T03:12:00Z",
                 "closed_at": "2026-11-27T03:20:05Z", "duration_s": 485.0,
                 "opened_by": "node1", "closed_by": "node2"}],
     "since": "2026-11-27T01:00:00Z", "generated_at": "2026-11-27T03:30:00Z"}

One event per finding from its opening to its closing (docs/events.md), oldest first;
`closed_at` is null while the finding lasts, and `duration_s` then runs to
`generated_at`. `since` is null when every kept event is listed. `expected` (only when
true) marks an event whose culprits were in planned maintenance all along.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NotRequired, TypedDict

from meshhealth.timefmt import iso_time
from meshhealth.wire.event import FindingEvent


class EventJSON(TypedDict):
    cluster: str
    id: str
    kind: str
    nodes: list[str]
    confidence: float
    evidence: str
    opened_at: str
    closed_at: str | None
    duration_s: float
    opened_by: str
    closed_by: str
    groups: NotRequired[list[list[str]]]
    # Only when true: every culprit was in planned maintenance all along
    expected: NotRequired[bool]


class EventsJSON(TypedDict):
    events: list[EventJSON]
    since: str | None
    generated_at: str


def event_json(event: FindingEvent, now: float) -> EventJSON:
    end = event.closed_at if event.closed_at is not None else max(now, event.opened_at)
    out: EventJSON = {
        "cluster": event.cluster,
        "id": event.id,
        "kind": event.kind,
        "nodes": list(event.nodes),
        "confidence": event.confidence,
        "evidence": event.evidence,
        "opened_at": iso_time(event.opened_at) or "",
        "closed_at": iso_time(event.closed_at),
        "duration_s": round(end - event.opened_at, 3),
        "opened_by": event.opened_by,
        "closed_by": event.closed_by,
    }
    if event.groups:
        out["groups"] = [list(group) for group in event.groups]
    if event.expected:
        out["expected"] = True
    return out


def events_document(
    events: Iterable[FindingEvent], *, now: float, since: float | None
) -> EventsJSON:
    """The events in the order given, at `now`."""
    return {
        "events": [event_json(e, now) for e in events],
        "since": iso_time(since),
        "generated_at": iso_time(now) or "",
    }
