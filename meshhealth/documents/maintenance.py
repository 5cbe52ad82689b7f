"""Planned maintenance in the documents and views, said once (pure).

    maintenance_document(window, now)      a window as `meshhealth maintenance list -o json`
    maintenance_note_text(note, now)       "in maintenance until 12:00:00Z (1h59m left): why"
    headline_suffix(count)                 ", 1 in maintenance" after "3/3 reachable"

A window (meshhealth.wire.maintenance, set by `meshhealth maintenance start`) takes its
node out of the cluster's verdict and alerts while it lasts; the summary carries each
such node's own state (`MaintenanceNote`), and every view says "in maintenance" with it.
Reasons and names are anyone's who can write etcd: the views escape them.
"""

from __future__ import annotations

from typing import TypedDict

from meshhealth.timefmt import format_interval, iso_time
from meshhealth.wire.maintenance import MaintenanceWindow
from meshhealth.wire.summary import MaintenanceNote

IN_MAINTENANCE = "in maintenance"
# Why the verdict discounts an observer in maintenance (the summary's `discounted`).
MAINTENANCE_REASON = "maintenance"


class MaintenanceDocument(TypedDict):
    """One maintenance window (`meshhealth maintenance list -o json`, the status's
    `maintenance` entries): times RFC 3339 UTC, `left_s` seconds until its end."""

    node: str  # cluster/node
    state: str | None  # the node's own state, kept while it is in maintenance (None: not said)
    start: str | None  # None: not said (a summary carries only the end)
    end: str | None
    left_s: float
    reason: str
    by: str


def maintenance_document(window: MaintenanceWindow, now: float) -> MaintenanceDocument:
    return {
        "node": f"{window.cluster}/{window.node}",
        "state": None,
        "start": iso_time(window.start),
        "end": iso_time(window.end),
        "left_s": round(max(0.0, window.end - now), 3),
        "reason": window.reason,
        "by": window.by,
    }


def note_document(node: str, note: MaintenanceNote, now: float) -> MaintenanceDocument:
    return {
        "node": node,
        "state": note.state,
        "start": None,
        "end": iso_time(note.end),
        "left_s": round(max(0.0, note.end - now), 3),
        "reason": note.reason,
        "by": note.by,
    }


def until_text(end: float, now: float) -> str:
    """`until 2026-11-27T08:00:00Z (1h59m left)`."""
    return f"until {iso_time(end)} ({format_interval(max(0.0, end - now))} left)"


def note_text(document: MaintenanceDocument) -> str:
    """`lab1/node2 in maintenance (unreachable) until ... (1h59m left) by alice: why`,
    unescaped (the caller escapes)."""
    state = f" ({document['state']})" if document["state"] else ""
    end = f" until {document['end']} ({format_interval(document['left_s'])} left)"
    by = f" by {document['by']}" if document["by"] else ""
    reason = f": {document['reason']}" if document["reason"] else ""
    return f"{document['node']} {IN_MAINTENANCE}{state}{end}{by}{reason}"


def headline_suffix(count: int) -> str:
    """What `Cluster health: 3/3 reachable` goes on with when nodes are in maintenance."""
    return f", {count} {IN_MAINTENANCE}" if count else ""
