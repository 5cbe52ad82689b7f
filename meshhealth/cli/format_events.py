"""Text (and JSON) of the findings timeline (pure): `meshhealth events`, and the last
few events under `watch`.

    Events since 2026-11-27T01:00:00Z: 2 (1 open)
    OPENED                CLOSED                DURATION  KIND       CULPRIT     CONFIDENCE  ...
    2026-11-27T03:12:00Z  2026-11-27T03:20:05Z  8m5s      node-down  lab1/node3  0.88        ...
    2026-11-27T03:25:10Z  open                  4m50s     path       lab1/n1,... 0.50        ...

One line per event, oldest first; times are RFC 3339 UTC, DURATION runs to the closing
(or, while open, to the document's `generated_at`); an event in planned maintenance all
along says so before its evidence, as findings do. Every field read from etcd is
escaped (meshhealth.terminal_text).
"""

from __future__ import annotations

import json

from meshhealth.cli.format_findings import evidence_text, expected_suffix
from meshhealth.documents.events import EventJSON, EventsJSON
from meshhealth.terminal_text import escape
from meshhealth.timefmt import format_age

HEADER = ("OPENED", "CLOSED", "DURATION", "KIND", "CULPRIT", "CONFIDENCE", "EVIDENCE")
GAP = "  "
OPEN = "open"


def event_columns(event: EventJSON) -> tuple[str, ...]:
    return tuple(
        escape(cell)
        for cell in (
            event["opened_at"],
            event["closed_at"] or OPEN,
            format_age(event["duration_s"]),
            event["kind"],
            ",".join(event["nodes"]),
            f"{event['confidence']:.2f}",
            evidence_text(event["evidence"], event.get("expected", False)),
        )
    )


def event_table(events: list[EventJSON]) -> list[str]:
    """The header and one aligned line per event."""
    rows = [HEADER, *(event_columns(e) for e in events)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    return [
        GAP.join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    ]


def timeline_line(event: EventJSON) -> str:
    """`2026-11-27T05:39:16Z -> 05:39:21Z (5s) node-isolated lab1/node3 (confidence
    0.94)`: one event in a line (`watch`'s recent events; `open` while it lasts)."""
    closed = event["closed_at"]
    until = OPEN if closed is None else closed.partition("T")[2]
    return escape(
        f"{event['opened_at']} -> {until} ({format_age(event['duration_s'])}) "
        f"{event['kind']} {','.join(event['nodes'])} (confidence {event['confidence']:.2f}"
        f"{expected_suffix(event.get('expected', False))})"
    )


def format_events_text(doc: EventsJSON) -> str:
    """`Events since T: N (k open)` (or `Events: N` without a start), then the table."""
    events = doc["events"]
    start = f"Events since {doc['since']}" if doc["since"] else "Events"
    if not events:
        return f"{start}: none (at {doc['generated_at']})\n"
    still_open = sum(1 for e in events if e["closed_at"] is None)
    lines = [f"{start}: {len(events)} ({still_open} open)", *event_table(events)]
    return "\n".join(lines) + "\n"


def format_events_json(doc: EventsJSON) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
