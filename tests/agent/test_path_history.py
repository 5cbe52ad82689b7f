"""The per-path history of one-minute summaries behind the web page's sparklines (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.agent.path_history import MINUTE_S, PathHistory, summarise_minute
from meshhealth.model import (
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
    TargetType,
)

KEY = PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP)
T0 = 1_800_000_000 - 1_800_000_000 % MINUTE_S  # the start of a minute


def ok(at: float, rtt_s: float) -> ProbeResult:
    return ProbeResult(ProbeStatus.OK, at, rtts_s=(rtt_s,), sent=1, received=1)


def failed(at: float) -> ProbeResult:
    return ProbeResult(ProbeStatus.TIMEOUT, at, sent=1, received=0)


@pytest.mark.parametrize(
    ("rtts_ms", "p50", "p95", "top"),
    [
        ([], None, None, None),
        ([5.0], 5.0, 5.0, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 2.0, 4.0, 4.0),
        ([9.0, 1.0, 5.0], 5.0, 9.0, 9.0),
    ],
)
def test_summarise_minute_percentiles(
    rtts_ms: list[float], p50: float | None, p95: float | None, top: float | None
) -> None:
    summary = summarise_minute(7, 6, 6 - len(rtts_ms), [r / 1000 for r in rtts_ms])
    got = (summary.rtt_p50_s, summary.rtt_p95_s, summary.rtt_max_s)
    want = tuple(None if v is None else v / 1000 for v in (p50, p95, top))
    assert got == want
    assert summary.failures == 6 - len(rtts_ms)


def test_results_of_one_minute_make_one_open_summary() -> None:
    history = PathHistory(minutes=60)
    for i, rtt_ms in enumerate((1.0, 2.0, 3.0)):
        history.record(KEY, ok(T0 + i * 10, rtt_ms / 1000))
    history.record(KEY, failed(T0 + 40))
    (minute,) = history.minutes(KEY, now=T0 + 50)
    assert minute.start == T0
    assert (minute.probes, minute.failures) == (4, 1)
    assert minute.rtt_p50_s == pytest.approx(0.002)
    assert minute.rtt_max_s == pytest.approx(0.003)
    assert minute.failure_share == 0.25


def test_minutes_close_into_the_ring_and_old_ones_fall_out() -> None:
    history = PathHistory(minutes=5)
    for m in range(8):  # 8 minutes of one probe each; the window keeps the last 5
        history.record(KEY, ok(T0 + m * MINUTE_S, (m + 1) / 1000))
    minutes = history.minutes(KEY, now=T0 + 7 * MINUTE_S + 30)
    assert [m.start for m in minutes] == [T0 + m * MINUTE_S for m in range(3, 8)]
    # float32 storage: close to, not exactly, the RTT
    assert minutes[0].rtt_p50_s == pytest.approx(0.004, rel=1e-6)
    assert history.memory_bytes() == 5 * 20


def test_gaps_are_absent_not_zero_filled() -> None:
    history = PathHistory(minutes=60)
    history.record(KEY, ok(T0, 0.001))
    history.record(KEY, failed(T0 + 10 * MINUTE_S))
    minutes = history.minutes(KEY, now=T0 + 10 * MINUTE_S + 1)
    assert [(m.start, m.probes, m.failures) for m in minutes] == [
        (T0, 1, 0),
        (T0 + 10 * MINUTE_S, 1, 1),
    ]
    assert minutes[1].rtt_p50_s is None  # no success: no RTT, not 0


def test_old_minutes_leave_the_window_as_time_passes() -> None:
    history = PathHistory(minutes=3)
    history.record(KEY, ok(T0, 0.001))
    assert history.minutes(KEY, now=T0 + 2 * MINUTE_S) != []
    assert history.minutes(KEY, now=T0 + 3 * MINUTE_S) == []


def test_a_result_from_before_the_open_minute_is_dropped() -> None:
    history = PathHistory()
    history.record(KEY, ok(T0 + MINUTE_S, 0.001))
    history.record(KEY, ok(T0, 0.5))  # the clock stepped back
    (minute,) = history.minutes(KEY, now=T0 + MINUTE_S + 1)
    assert minute.probes == 1 and minute.rtt_max_s == pytest.approx(0.001)


def test_record_round_and_retain_targets() -> None:
    history = PathHistory()
    n2 = Target("c1", "n2", "10.0.0.2", "10.1.0.2")
    n3 = Target("c1", "n3", "10.0.0.3", None)
    key3 = PathKey("c1", "n3", TargetType.NODE, Protocol.HTTP)
    report = RoundReport(
        started_at=T0,
        duration_s=0.1,
        targets=(n2, n3),
        paths=(
            PathReport(KEY, "10.0.0.2", ok(T0, 0.001)),
            PathReport(key3, "10.0.0.3", failed(T0)),
        ),
    )
    history.record_round(report)
    assert len(history) == 2
    assert history.retain_targets([n2]) == [key3]
    assert history.minutes(key3, now=T0) == []
    assert len(history.minutes(KEY, now=T0)) == 1


def test_minutes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="minutes"):
        PathHistory(minutes=0)


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=180 * MINUTE_S),
            st.one_of(st.none(), st.floats(min_value=1e-6, max_value=5.0)),
        ),
        max_size=200,
    )
)
def test_summaries_stay_in_window_and_in_order(events: list[tuple[int, float | None]]) -> None:
    history = PathHistory(minutes=60)
    events = sorted(events, key=lambda e: e[0])
    for offset, rtt_s in events:
        history.record(KEY, failed(T0 + offset) if rtt_s is None else ok(T0 + offset, rtt_s))
    now = T0 + 180 * MINUTE_S + 59
    minutes = history.minutes(KEY, now=now)
    starts = [m.start for m in minutes]
    assert starts == sorted(set(starts))
    assert all(now - 60 * MINUTE_S < s <= now for s in starts)
    first_start = (now // MINUTE_S - 59) * MINUTE_S
    in_window = [e for e in events if T0 + e[0] >= first_start]
    assert sum(m.probes for m in minutes) == len(in_window)
    for m in minutes:
        assert m.failures <= m.probes
        if m.rtt_p50_s is not None:
            assert m.rtt_max_s is not None and m.rtt_p95_s is not None
            assert m.rtt_p50_s <= m.rtt_p95_s <= m.rtt_max_s * (1 + 1e-6)
            assert not math.isnan(m.rtt_p50_s)
