"""The findings timeline's pure core (meshhealth.diagnosis.timeline): which events open,
grow and close as successive sets of findings come in, a finding's settle time, the
bounds, and what was open at a time; then its key, its codec's refusals, and the
document and text of `meshhealth events`."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.cli.format_events import format_events_text, timeline_line
from meshhealth.diagnosis.timeline import (
    Advance,
    advance,
    expired,
    findings_at,
    next_expiry,
    open_at,
    open_events,
    since,
)
from meshhealth.documents.events import events_document
from meshhealth.wire import keys
from meshhealth.wire.event import (
    FindingEvent,
    Identity,
    decode_event,
    encode_event,
    event_id,
    identity,
)
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.summary import SummaryFinding

T0 = 1_795_749_120.0  # 2026-11-27T03:12:00Z
DOWN = SummaryFinding("node-down", ("lab1/n3",), 0.5, T0 - 5, "3 of 4 fail")
PATH = SummaryFinding("path", ("lab1/n1", "lab1/n2"), 0.25, T0, "n1 -> n2 fails")


def run(
    rounds: list[list[SummaryFinding]],
    *,
    start: dict[str, FindingEvent] | None = None,
    settle_s: float = 0.0,
) -> tuple[dict[str, FindingEvent], list[list[FindingEvent]]]:
    """Feed one set of findings per round (10 s apart), writing every write; the store
    and the writes of each round."""
    stored = dict(start or {})
    held: dict[str, FindingEvent] = {}
    pending: dict[Identity, float] = {}
    writes = []
    for i, findings in enumerate(rounds):
        step = advance(
            stored,
            held,
            findings,
            pending=pending,
            settle_s=settle_s,
            cluster="lab1",
            aggregator="n1",
            now=T0 + 10 * i,
        )
        for event in step.writes:
            stored[event.id] = event
        held, pending = step.held, step.pending
        writes.append(list(step.writes))
    return stored, writes


def step_at(
    now: float,
    findings: list[SummaryFinding],
    stored: dict[str, FindingEvent] | None = None,
    pending: dict[Identity, float] | None = None,
    *,
    settle_s: float = 10.0,
) -> Advance:
    """One call of `advance` at `now` (nothing held)."""
    return advance(
        stored or {},
        {},
        findings,
        pending=pending or {},
        settle_s=settle_s,
        cluster="lab1",
        aggregator="n2",
        now=now,
    )


# (rounds of findings, writes per round, events open at the end, events closed at the end)
TABLE = {
    "nothing": ([[], []], [0, 0], 0, 0),
    "opens once, written once": ([[DOWN], [DOWN], [DOWN]], [1, 0, 0], 1, 0),
    "opens and closes": ([[DOWN], [DOWN], []], [1, 0, 1], 0, 1),
    "two at once, one ends": ([[DOWN, PATH], [DOWN]], [2, 1], 1, 1),
    "reopens as a new event": ([[PATH], [], [PATH]], [1, 1, 1], 1, 1),
    "a duplicate in one set is one finding": ([[DOWN, DOWN]], [1], 1, 0),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_events_open_and_close_with_the_findings(name: str) -> None:
    rounds, per_round, still_open, closed = TABLE[name]
    stored, writes = run(rounds)
    assert [len(w) for w in writes] == per_round
    assert sum(e.closed_at is None for e in stored.values()) == still_open
    assert sum(e.closed_at is not None for e in stored.values()) == closed


def test_an_event_holds_its_times_and_its_strongest_evidence() -> None:
    stronger = SummaryFinding("node-down", ("lab1/n3",), 0.55, T0, "4 of 4 fail")
    strongest = SummaryFinding("node-down", ("lab1/n3",), 0.88, T0, "5 of 5 fail")
    weaker = SummaryFinding("node-down", ("lab1/n3",), 0.3, T0, "2 of 4 fail")
    stored, writes = run([[DOWN], [stronger], [weaker], [strongest], [weaker], []])
    # opened; +0.05 is held, not written; +0.38 since written is; closed with the best
    assert [len(w) for w in writes] == [1, 0, 0, 1, 0, 1]
    (event,) = stored.values()
    assert event.opened_at == DOWN.since  # since when the evidence held
    assert event.closed_at == T0 + 50  # the first set without it
    assert (event.confidence, event.evidence) == (0.88, "5 of 5 fail")
    assert (event.opened_by, event.closed_by) == ("n1", "n1")
    assert event.id == event_id(("node-down", ("lab1/n3",)), DOWN.since)


def test_an_event_is_expected_only_while_its_finding_always_was() -> None:
    """A finding in planned maintenance opens an expected event; one seen outside the
    window makes the event unexpected for good (written then: not at the closing only,
    so a reader does not see a real outage as planned meanwhile), and the JSON, the
    text and `diagnose --at` say which."""
    planned = replace(DOWN, expected=True)
    stored, writes = run([[planned], [planned], []])
    (event,) = stored.values()
    assert event.expected and [len(w) for w in writes] == [1, 0, 1]
    assert decode_event(encode_event(event)) == event

    stored, writes = run([[planned], [DOWN], [planned], []])
    (event,) = stored.values()
    assert [len(w) for w in writes] == [1, 1, 0, 1]
    assert writes[1][0].expected is False and event.closed_at is not None
    assert not event.expected  # the window came back: it stays unexpected

    stored, writes = run([[DOWN], [planned], []])
    (event,) = stored.values()
    assert [len(w) for w in writes] == [1, 0, 1] and not event.expected  # never retro-planned

    planned_path = replace(PATH, expected=True)
    stored, _ = run([[planned, planned_path], [planned, PATH], [planned, PATH]])
    doc = events_document(since(list(stored.values()), 0), now=T0 + 30, since=None)
    by_kind = {e["kind"]: e for e in doc["events"]}
    assert by_kind["node-down"]["expected"] is True and "expected" not in by_kind["path"]
    down_line, path_line = format_events_text(doc).splitlines()[2:]
    assert down_line.endswith("0.50        (expected: in maintenance) 3 of 4 fail")
    assert path_line.endswith("0.25        n1 -> n2 fails")
    assert timeline_line(by_kind["node-down"]).endswith(
        "node-down lab1/n3 (confidence 0.50, expected: in maintenance)"
    )
    at = findings_at(open_at(stored.values(), T0 + 25), T0 + 25)["findings"]
    assert [f.get("expected", False) for f in at] == [True, False]


def test_a_new_aggregator_takes_over_the_open_events_instead_of_reopening() -> None:
    before, _ = run([[DOWN, PATH]])
    # The next aggregator reads them from etcd; DOWN goes on, PATH ended meanwhile.
    step = step_at(T0 + 60, [DOWN], before, settle_s=0.0)
    assert len(step.writes) == 1
    (closed,) = step.writes
    assert closed.kind == "path" and closed.closed_at == T0 + 60 and closed.closed_by == "n2"
    assert set(step.held) == {e.id for e in before.values() if e.kind == "node-down"}


def test_two_open_events_of_one_finding_keep_the_earlier() -> None:
    first, _ = run([[DOWN]])
    later = SummaryFinding("node-down", ("lab1/n3",), 0.5, T0 + 100, "again")
    (twin,) = step_at(T0 + 100, [later], settle_s=0.0).writes
    stored = {**first, twin.id: twin}
    step = step_at(T0 + 200, [DOWN], stored, settle_s=0.0)
    assert [(e.id, e.closed_at) for e in step.writes] == [(twin.id, T0 + 200)]
    assert next(iter(open_events(stored).values())).opened_at == DOWN.since


findings_st = st.lists(
    st.builds(
        SummaryFinding,
        kind=st.sampled_from(["node-down", "path", "egress-blocked"]),
        nodes=st.sampled_from([("lab1/a",), ("lab1/b",), ("lab1/a", "lab1/b")]),
        confidence=st.floats(0, 1),
        since=st.floats(T0 - 100, T0),
        evidence=st.text(max_size=5),
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(findings_st, max_size=8), st.integers(0, 7), st.sampled_from([0.0, 1.0, 2.5]))
def test_the_open_events_are_the_settled_findings(
    rounds: list[list[SummaryFinding]], takeover_at: int, settle_s: float
) -> None:
    """Whatever the sequence (one set a second), and with a takeover (the held and
    pending state forgotten) anywhere: after each set, exactly one open event per
    current finding that either had one already or has been seen for `settle_s` by
    this aggregator, and none for the others; nothing is closed for a set that equals
    the previous one; every event closes after it opens; `settles_at` is when the first
    of the waiting ones settles."""
    stored: dict[str, FindingEvent] = {}
    held: dict[str, FindingEvent] = {}
    pending: dict[Identity, float] = {}
    first_seen: dict[Identity, float] = {}  # in every set since, by this aggregator
    was_open: set[Identity] = set()
    previous: set[Identity] | None = None
    for i, findings in enumerate(rounds):
        now = T0 + i
        if i == takeover_at:
            held, pending, first_seen = {}, {}, {}
        step = advance(
            stored,
            held,
            findings,
            pending=pending,
            settle_s=settle_s,
            cluster="lab1",
            aggregator="a",
            now=now,
        )
        for event in step.writes:
            stored[event.id] = event
        held, pending = step.held, step.pending
        current = {identity(f) for f in findings}
        first_seen = {k: first_seen.get(k, now) for k in current}
        wanted = {k for k in current if k in was_open or now - first_seen[k] >= settle_s}
        opened = [e.identity for e in stored.values() if e.closed_at is None]
        assert sorted(opened) == sorted(wanted)
        waiting = [first_seen[k] + settle_s for k in current - wanted]
        assert step.settles_at == min(waiting, default=None)
        if previous == current:
            assert all(e.closed_at is None and e.id in stored for e in step.writes)
        previous, was_open = current, set(opened)
        assert all(e.closed_at is None or e.closed_at >= e.opened_at for e in stored.values())


def test_a_finding_gone_before_it_settles_writes_nothing() -> None:
    """Seen at 0 s and 10 s, gone at 20 s (settle 15 s): no event. Back at 30 s, it is
    seen anew: it waits another 15 s (opens at 50 s, not at 30 s)."""
    stored, writes = run([[PATH], [PATH], [], [PATH], [PATH], [PATH]], settle_s=15.0)
    assert [len(w) for w in writes] == [0, 0, 0, 0, 0, 1]
    (event,) = stored.values()
    assert event.opened_at == PATH.since and event.closed_at is None


def test_a_finding_that_stays_opens_when_it_settles_at_its_since() -> None:
    """A transient's shape from the soak: the finding's evidence began 31 s before this
    aggregator saw it (its `since`). It waits `settle_s` from when first seen, then
    opens at its since, as it would have at once."""
    late = SummaryFinding("path", ("lab1/node2", "lab1/node8"), 0.5, T0 - 31, "2 -> 8 fails")
    step = step_at(T0, [late, DOWN])
    assert step.writes == () and step.held == {}
    assert step.pending == {identity(late): T0, identity(DOWN): T0}
    assert step.settles_at == T0 + 10
    step = step_at(T0 + 9.999, [late, DOWN], pending=step.pending)
    assert step.writes == () and step.settles_at == T0 + 10
    step = step_at(T0 + 10, [late, DOWN], pending=step.pending)
    assert sorted((e.kind, e.opened_at, e.closed_at) for e in step.writes) == [
        ("node-down", DOWN.since, None),
        ("path", T0 - 31, None),
    ]
    assert step.settles_at is None


def test_the_wake_time_is_the_earliest_waiting_finding() -> None:
    step = step_at(T0, [DOWN])
    step = step_at(T0 + 4, [DOWN, PATH], pending=step.pending)
    assert step.settles_at == T0 + 10  # DOWN's, the first seen
    step = step_at(T0 + 10, [DOWN, PATH], pending=step.pending)
    assert [e.kind for e in step.writes] == ["node-down"]
    assert step.settles_at == T0 + 14  # then PATH's
    stored = {e.id: e for e in step.writes}
    step = step_at(T0 + 12, [DOWN], stored, step.pending)
    assert step.writes == () and step.settles_at is None  # PATH went: nothing waits
    assert step.pending == {}  # DOWN has its event: not waiting


def test_a_failed_write_opens_on_the_retry_without_waiting_again() -> None:
    """The opening's write failed (nothing stored): the next call still knows when the
    finding was first seen and writes the opening again at once."""
    step = step_at(T0, [PATH])
    step = step_at(T0 + 10, [PATH], pending=step.pending)
    (lost,) = step.writes
    step = step_at(T0 + 11, [PATH], pending=step.pending)
    assert step.writes == (lost,)


def test_an_open_event_is_not_delayed() -> None:
    """A takeover or restart: the event is already open in etcd. The new aggregator
    takes it over at once (nothing waits, nothing written), writes its stronger
    evidence at once, and closes it at once when the finding goes."""
    before, _ = run([[DOWN]])
    (event,) = before.values()
    step = step_at(T0 + 60, [DOWN], before)
    assert step.writes == () and step.pending == {} and step.settles_at is None
    assert set(step.held) == {event.id}
    strong = SummaryFinding("node-down", ("lab1/n3",), 0.9, T0, "5 of 5 fail")
    (grown,) = step_at(T0 + 61, [strong], before).writes
    assert (grown.id, grown.confidence) == (event.id, 0.9)
    (closed,) = step_at(T0 + 62, [], before).writes
    assert (closed.id, closed.closed_at) == (event.id, T0 + 62)


def closed_event(n: int, closed_at: float) -> FindingEvent:
    return FindingEvent(
        "lab1", f"{n:013d}-{'0' * 12}", "path", ("lab1/a", "lab1/b"), 0.5, "x", n, closed_at
    )


def test_old_events_and_those_over_the_count_go_oldest_first() -> None:
    day = 86400.0
    stored = {e.id: e for e in (closed_event(i, T0 - i * day) for i in range(10))}
    opened = FindingEvent("lab1", f"{1:013d}-{'1' * 12}", "node-down", ("lab1/a",), 1, "x", 1)
    stored[opened.id] = opened
    gone = expired(stored, now=T0, max_age_s=7 * day + 1, max_count=100)
    assert sorted(stored[i].closed_at or 0 for i in gone) == [T0 - 9 * day, T0 - 8 * day]
    gone = expired(stored, now=T0, max_age_s=30 * day, max_count=4)
    assert len(gone) == 7 and opened.id not in gone  # the 7 oldest closed, open stays
    assert {stored[i].closed_at for i in gone} == {T0 - i * day for i in range(3, 10)}
    assert next_expiry(stored, max_age_s=day) == T0 - 9 * day + day
    assert next_expiry({opened.id: opened}) is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 20), max_size=30), st.integers(0, 30), st.floats(1, 25))
def test_what_is_left_is_within_the_bounds(ages: list[float], cap: int, max_age: float) -> None:
    stored = {e.id: e for e in (closed_event(i, T0 - a) for i, a in enumerate(ages))}
    gone = set(expired(stored, now=T0, max_age_s=max_age, max_count=cap))
    left = [e for i, e in stored.items() if i not in gone]
    assert len(left) <= cap
    assert all((e.closed_at or 0) >= T0 - max_age for e in left)
    # the oldest go first: nothing left is older than anything deleted by count
    if left and gone:
        assert min(e.closed_at or 0 for e in left) >= max(stored[i].closed_at or 0 for i in gone)


def test_what_was_open_at_a_time() -> None:
    stored, _ = run([[DOWN], [DOWN, PATH], [DOWN], []])
    assert [e.kind for e in open_at(stored.values(), T0 + 15)] == ["node-down", "path"]
    assert [e.kind for e in open_at(stored.values(), T0 + 20)] == ["node-down"]  # closed
    assert open_at(stored.values(), T0 + 30) == []
    assert open_at(stored.values(), T0 - 6) == []  # before it opened
    doc = findings_at(open_at(stored.values(), T0 + 15), T0 + 15)
    assert doc["generated_at"] == "2026-11-27T03:12:15Z"
    assert [(f["kind"], f["since"]) for f in doc["findings"]] == [
        ("node-down", "2026-11-27T03:11:55Z"),
        ("path", "2026-11-27T03:12:00Z"),
    ]
    assert [e.kind for e in since(list(stored.values()), T0 + 25)] == ["node-down"]


def test_the_key_and_the_codec() -> None:
    event = FindingEvent(
        "lab1", event_id(("path", ("lab1/a",)), T0), "path", ("lab1/a",), 0.5, "e", T0
    )
    key = keys.event_key("lab1", event.id)
    assert key == "meshhealth/state/events/v1/lab1/1795749120000-" + event.id[-12:]
    assert keys.parse_key(key) == keys.ParsedKey(keys.KeyKind.EVENT, "lab1", event.id)
    with pytest.raises(keys.InvalidKey, match="invalid event id"):
        keys.parse_key("meshhealth/state/events/v1/lab1/node1")
    assert decode_event(encode_event(event)) == event
    with pytest.raises(ValueError, match=r"closed_at.*before opened_at"):
        encode_event(FindingEvent("lab1", event.id, "path", ("lab1/a",), 0.5, "e", T0, T0 - 1))
    with pytest.raises(DecodeError, match="field 'id'"):
        decode_event(encode_event(event).replace(event.id.encode(), b"x" * len(event.id)))


def test_the_text_names_times_durations_and_escapes() -> None:
    bad = SummaryFinding("path", ("lab1/n1", "lab1/n2"), 0.25, T0, "evil \x1b[2J text")
    stored, _ = run([[DOWN], [DOWN, bad], [DOWN], [DOWN]])
    doc = events_document(since(list(stored.values()), 0), now=T0 + 125, since=T0 - 3600)
    text = format_events_text(doc)
    assert text.splitlines()[0] == "Events since 2026-11-27T02:12:00Z: 2 (1 open)"
    down, path = text.splitlines()[2:]
    assert down.startswith("2026-11-27T03:11:55Z  open                  2m10s ")
    assert path.startswith("2026-11-27T03:12:00Z  2026-11-27T03:12:20Z  20s ")
    assert "lab1/n1,lab1/n2" in path and "\\x1b[2J" in path and "\x1b" not in text
    assert doc["events"][0]["duration_s"] == 130.0 and doc["events"][1]["duration_s"] == 20.0
    assert "none" in format_events_text(events_document([], now=T0, since=None))


def test_watch_shows_the_last_events_latest_last() -> None:
    from meshhealth.cli.watch_state import WatchState
    from meshhealth.cli.watch_view import RECENT_EVENTS, frame_text

    rounds = [[SummaryFinding("path", ("lab1/a", f"lab1/n{i}"), 0.5, T0, "x")] for i in range(8)]
    down = SummaryFinding("node-down", ("lab1/n3",), 0.5, T0 + 80, "3 of 4 fail")
    stored, _ = run([*rounds, [down]])
    state = WatchState(source="etcd")
    assert "Recent events" not in frame_text(state, now=T0 + 100, width=120)
    state.events = dict(stored)
    text = frame_text(state, now=T0 + 100, width=200)
    lines = text.splitlines()
    start = lines.index("Recent events (meshhealth events):")
    shown = lines[start + 1 : start + 1 + RECENT_EVENTS]
    assert len(shown) == RECENT_EVENTS and "lab1/a,lab1/n3" not in text  # older ones left out
    assert shown[-1] == ("2026-11-27T03:13:20Z -> open (20s) node-down lab1/n3 (confidence 0.50)")
    assert shown[-2] == (
        "2026-11-27T03:12:00Z -> 03:13:20Z (1m20s) path lab1/a,lab1/n7 (confidence 0.50)"
    )
