"""The findings timeline (pure): which events open, grow and close as successive sets of
findings come in, and which old events go (docs/events.md).

    result = advance(stored, held, summary.findings, pending=pending, settle_s=10.0,
                     cluster="lab1", aggregator="node1", now=now)
    result.writes      # the events to write to etcd (an opening, a closing, a stronger
                       # finding, one no longer expected): nothing while the findings
                       # stay as they are
    result.held        # the open events as they stand, strongest evidence included
    result.pending     # the findings not yet events: identity -> first seen
    result.settles_at  # when the next of them becomes an event (None: none waits)
    expired(stored, now=now)   # the ids of the events to delete (age, count)

`stored` is what etcd holds (id -> event), as the aggregator read it when it took the
claim and wrote it since; `held` the open events with the strongest confidence and
evidence seen, written when they close (or grew by `stronger_step`, or stopped being
expected: seen outside planned maintenance). A finding is the
same finding while its kind and nodes stay the same (`wire.event.identity`): one that
goes on across an aggregator's restart or a takeover finds its open event in `stored`
and is neither opened again nor closed. An open event whose finding is gone is closed
at `now`; two open events of one finding (an older writer's) keep the earlier.

A finding becomes an event only once this aggregator has seen it in its summaries for
`settle_s` (`pending` holds when it first saw each finding without an open event, as
`held` is passed in and returned); it then opens as it would have at once, at its
`since`. One gone before that (a fault's onset or recovery seen one observer at a time)
is forgotten: nothing is written. A finding whose event is already open (a takeover, a
restart) goes on at once.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from meshhealth import defaults
from meshhealth.documents.findings import FindingJSON, FindingsJSON
from meshhealth.timefmt import iso_time
from meshhealth.wire.event import FindingEvent, Identity, event_id, identity
from meshhealth.wire.summary import SummaryFinding


@dataclass(frozen=True, slots=True)
class Advance:
    """The open events after a set of findings, and the events to write."""

    held: dict[str, FindingEvent]
    writes: tuple[FindingEvent, ...]
    pending: dict[Identity, float]
    settles_at: float | None


def open_events(stored: Mapping[str, FindingEvent]) -> dict[Identity, FindingEvent]:
    """identity -> its open event (the earliest, should there be two)."""
    out: dict[Identity, FindingEvent] = {}
    for event in sorted(stored.values(), key=lambda e: (e.opened_at, e.id)):
        if event.closed_at is None:
            out.setdefault(event.identity, event)
    return out


def seen_again(event: FindingEvent, finding: SummaryFinding) -> FindingEvent:
    """`event` with the finding's confidence and evidence when they are stronger, and no
    longer expected once the finding is seen outside planned maintenance."""
    if event.expected and not finding.expected:
        event = replace(event, expected=False)
    if finding.confidence <= event.confidence:
        return event
    return replace(
        event, confidence=finding.confidence, evidence=finding.evidence, groups=finding.groups
    )


def opened(
    finding: SummaryFinding,
    *,
    cluster: str,
    aggregator: str,
    now: float,
    not_before: float = 0.0,
    taken: Collection[str] = (),
) -> FindingEvent:
    """A new event for `finding`, opened when its evidence started to hold, and never
    before `not_before` (when an earlier event of the same finding closed: a finding back
    with the same `since` is a new event after a gap, not that event reopened), with an
    id not in `taken`."""
    ident = identity(finding)
    at = max(min(finding.since, now), not_before)
    new_id = event_id(ident, at)
    while new_id in taken:  # the same millisecond as an earlier one: the next one
        at += 0.001
        new_id = event_id(ident, at)
    return FindingEvent(
        cluster=cluster,
        id=new_id,
        kind=finding.kind,
        nodes=finding.nodes,
        confidence=finding.confidence,
        evidence=finding.evidence,
        opened_at=at,
        groups=finding.groups,
        opened_by=aggregator,
        expected=finding.expected,
    )


def advance(
    stored: Mapping[str, FindingEvent],
    held: Mapping[str, FindingEvent],
    findings: Iterable[SummaryFinding],
    *,
    pending: Mapping[Identity, float],
    settle_s: float,
    cluster: str,
    aggregator: str,
    now: float,
    stronger_step: float = defaults.EVENTS_STRONGER_STEP,
) -> Advance:
    """The timeline after `findings` (see the module docstring)."""
    current = open_events(stored)
    ended: dict[Identity, float] = {}
    for done in stored.values():
        if done.closed_at is not None:
            ended[done.identity] = max(done.closed_at, ended.get(done.identity, 0.0))
    next_held: dict[str, FindingEvent] = {}
    next_pending: dict[Identity, float] = {}
    settles: list[float] = []
    writes: list[FindingEvent] = []
    seen: set[Identity] = set()
    for finding in findings:
        ident = identity(finding)
        if ident in seen:
            continue
        seen.add(ident)
        event = current.get(ident)
        if event is None:
            # Kept until its event is in `stored`: a failed write opens it on the retry.
            first_seen = next_pending[ident] = min(pending.get(ident, now), now)
            if now - first_seen < settle_s:
                settles.append(first_seen + settle_s)
                continue
            new = opened(
                finding,
                cluster=cluster,
                aggregator=aggregator,
                now=now,
                not_before=ended.get(ident, 0.0),
                taken=stored.keys(),
            )
            next_held[new.id] = new
            writes.append(new)
            continue
        grown = seen_again(held.get(event.id, event), finding)
        next_held[event.id] = grown
        stronger = grown.confidence >= event.confidence + stronger_step - 1e-9
        if stronger or grown.expected != event.expected:
            writes.append(grown)
    for event in sorted(stored.values(), key=lambda e: (e.opened_at, e.id)):
        if event.closed_at is not None or event.id in next_held:
            continue
        last = held.get(event.id, event)
        writes.append(
            replace(last, closed_at=max(now, event.opened_at), closed_by=aggregator or "")
        )
    return Advance(next_held, tuple(writes), next_pending, min(settles, default=None))


def expired(
    stored: Mapping[str, FindingEvent],
    *,
    now: float,
    max_age_s: float = defaults.EVENTS_MAX_AGE_S,
    max_count: int = defaults.EVENTS_MAX_COUNT,
) -> tuple[str, ...]:
    """The ids of the events to delete: those closed more than `max_age_s` ago, then the
    oldest closed ones while more than `max_count` are left. Open events stay."""
    closed = sorted(
        (e for e in stored.values() if e.closed_at is not None),
        key=lambda e: (e.closed_at or 0.0, e.id),
    )
    old = [e.id for e in closed if (e.closed_at or 0.0) < now - max_age_s]
    over = len(stored) - len(old) - max_count
    extra = [e.id for e in closed[len(old) :][: max(0, over)]]
    return (*old, *extra)


def next_expiry(
    stored: Mapping[str, FindingEvent], *, max_age_s: float = defaults.EVENTS_MAX_AGE_S
) -> float | None:
    """When the next closed event turns too old (None: no closed event)."""
    return min(
        ((e.closed_at or 0.0) + max_age_s for e in stored.values() if e.closed_at is not None),
        default=None,
    )


def open_at(events: Iterable[FindingEvent], when: float) -> list[FindingEvent]:
    """The events whose finding held at `when`, most confident first (diagnosis's order),
    then the earliest."""
    return sorted(
        (e for e in events if e.open_at(when)), key=lambda e: (-e.confidence, e.opened_at, e.id)
    )


def latest(events: Iterable[FindingEvent], count: int) -> list[FindingEvent]:
    """The `count` events that changed last (opened, or closed), the latest last."""
    changed = sorted(events, key=lambda e: (e.closed_at or e.opened_at, e.opened_at, e.id))
    return changed[-count:] if count > 0 else []


def since(events: Sequence[FindingEvent], start: float) -> list[FindingEvent]:
    """The events that held at some time from `start` on (open, or closed after it),
    oldest first."""
    return sorted(
        (e for e in events if e.closed_at is None or e.closed_at >= start),
        key=lambda e: (e.opened_at, e.id),
    )


def findings_at(events: Iterable[FindingEvent], when: float) -> FindingsJSON:
    """The events open at `when` as `meshhealth diagnose`'s document (`since`: when each
    opened; `generated_at`: `when`)."""
    findings: list[FindingJSON] = []
    for event in events:
        finding: FindingJSON = {
            "kind": event.kind,
            "nodes": list(event.nodes),
            "confidence": event.confidence,
            "since": iso_time(event.opened_at),
            "evidence": event.evidence,
        }
        if event.groups:
            finding["groups"] = [list(group) for group in event.groups]
        if event.expected:
            finding["expected"] = True
        findings.append(finding)
    return {"findings": findings, "generated_at": iso_time(when)}
