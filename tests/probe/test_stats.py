"""meshhealth.probe.stats: loss, percentiles and counters over a window (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth import model
from meshhealth.probe.stats import PathStats, StatsBook, nearest_rank

OK = model.ProbeStatus.OK
TIMEOUT = model.ProbeStatus.TIMEOUT


def res(
    status: model.ProbeStatus = OK,
    *rtts_ms: float,
    at: float = 0.0,
    sent: int | None = None,
    received: int | None = None,
) -> model.ProbeResult:
    rtts = tuple(ms / 1000 for ms in rtts_ms)
    return model.ProbeResult(
        status=status,
        started_at=at,
        rtts_s=rtts,
        sent=len(rtts) if sent is None else sent,
        received=len(rtts) if received is None else received,
    )


@pytest.mark.parametrize(
    ("values", "percent", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0], 95, 1.0),
        ([1.0, 2.0], 50, 1.0),
        ([1.0, 2.0], 51, 2.0),
        ([1.0, 2.0, 3.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([float(i) for i in range(1, 21)], 95, 19.0),
        ([float(i) for i in range(1, 101)], 95, 95.0),
        ([float(i) for i in range(1, 101)], 50, 50.0),
    ],
)
def test_nearest_rank(values: list[float], percent: float, expected: float) -> None:
    assert nearest_rank(values, percent) == expected


@pytest.mark.parametrize("percent", [-1, 100.5])
def test_nearest_rank_rejects_bad_percent(percent: float) -> None:
    with pytest.raises(ValueError, match="percent"):
        nearest_rank([1.0], percent)


def test_nearest_rank_rejects_empty() -> None:
    with pytest.raises(ValueError, match="no values"):
        nearest_rank([], 50)


def test_empty_summary() -> None:
    s = PathStats().summary()
    assert s == model.PathSummary(
        samples=0,
        last=None,
        loss=0.0,
        rtt_last_s=None,
        rtt_p50_s=None,
        rtt_p95_s=None,
        rtt_max_s=None,
        last_probed=None,
        last_success=None,
        consecutive_failures=0,
    )


# (results in order, expected loss, p50 ms, p95 ms, max ms, last ms, consecutive failures)
CASES = [
    pytest.param([res(OK, 1.0)], 0.0, 1.0, 1.0, 1.0, 1.0, 0, id="one-ok"),
    pytest.param([res(TIMEOUT, sent=1)], 1.0, None, None, None, None, 1, id="one-timeout"),
    pytest.param(
        [res(OK, 1.0, 2.0, 3.0)], 0.0, 2.0, 3.0, 3.0, 2.0, 0, id="icmp-3-replies-mean-last"
    ),
    pytest.param([res(OK, 1.0, 2.0, sent=3)], 1 / 3, 1.0, 2.0, 2.0, 1.5, 0, id="icmp-partial-loss"),
    pytest.param(
        [res(OK, 4.0), res(TIMEOUT, sent=1), res(TIMEOUT, sent=1)],
        2 / 3,
        4.0,
        4.0,
        4.0,
        None,
        2,
        id="http-two-failures-after-ok",
    ),
    pytest.param(
        [res(OK, 5.0), res(TIMEOUT, sent=1), res(OK, 3.0), res(OK, 1.0)],
        1 / 4,
        3.0,
        5.0,
        5.0,
        1.0,
        0,
        id="recovered",
    ),
    pytest.param(
        [res(OK, 1.0, 1.0, 1.0), res(TIMEOUT, sent=3)],
        0.5,
        1.0,
        1.0,
        1.0,
        None,
        1,
        id="icmp-packets-not-probes",
    ),
    pytest.param(
        [res(TIMEOUT, sent=1), res(TIMEOUT, sent=3), res(OK, 2.0)],
        0.0,
        2.0,
        2.0,
        2.0,
        2.0,
        0,
        id="failures-before-the-first-answer-are-not-loss",
    ),
    pytest.param(
        [res(model.ProbeStatus.ERROR, sent=0)],
        1.0,
        None,
        None,
        None,
        None,
        1,
        id="nothing-sent-counts-as-lost",
    ),
    pytest.param(
        [res(OK, 2.0), res(model.ProbeStatus.ERROR, sent=0)],
        0.0,
        2.0,
        2.0,
        2.0,
        None,
        1,
        id="unsent-adds-nothing",
    ),
    pytest.param(
        [res(OK, float(ms)) for ms in range(1, 21)],
        0.0,
        10.0,
        19.0,
        20.0,
        20.0,
        0,
        id="twenty-rtts",
    ),
]


@pytest.mark.parametrize(
    ("results", "expected"), [(c.values[0], c.values[1:]) for c in CASES], ids=[c.id for c in CASES]
)
def test_summary(results: list[model.ProbeResult], expected: tuple[object, ...]) -> None:
    loss, p50_ms, p95_ms, max_ms, last_ms, failures = expected
    stats = PathStats(window=30)
    for r in results:
        stats.add(r)
    s = stats.summary()

    def ms(x: float | None) -> float | None:
        return None if x is None else round(x * 1000, 9)

    first_ok = next((i for i, r in enumerate(results) if r.ok), 0)
    assert s.samples == len(results) - first_ok  # the window starts at the first answer
    assert s.last is results[-1]
    assert s.loss == pytest.approx(loss)
    assert (ms(s.rtt_p50_s), ms(s.rtt_p95_s), ms(s.rtt_max_s)) == (p50_ms, p95_ms, max_ms)
    assert ms(s.rtt_last_s) == last_ms
    assert s.consecutive_failures == failures


def test_window_drops_old_results_but_keeps_last_success() -> None:
    stats = PathStats(window=3)
    stats.add(res(OK, 100.0, at=1.0))
    for t in (2.0, 3.0, 4.0):
        stats.add(res(TIMEOUT, sent=1, at=t))
    s = stats.summary()
    assert s.samples == 3
    assert s.loss == 1.0
    assert s.rtt_max_s is None  # the 100 ms reply left the window
    assert s.last_success == 1.0  # ... but the time of the last success did not
    assert s.last_probed == 4.0
    assert s.consecutive_failures == 3


def test_consecutive_failures_not_capped_by_window() -> None:
    stats = PathStats(window=2)
    for t in range(5):
        stats.add(res(TIMEOUT, sent=1, at=float(t)))
    assert stats.summary().consecutive_failures == 5
    stats.add(res(OK, 1.0, at=5.0))
    assert stats.summary().consecutive_failures == 0
    assert stats.summary().last_success == 5.0


@pytest.mark.parametrize("window", [0, -3])
def test_window_must_be_positive(window: int) -> None:
    with pytest.raises(ValueError, match="window"):
        PathStats(window)
    with pytest.raises(ValueError, match="window"):
        StatsBook(window)


STATUSES = st.sampled_from(list(model.ProbeStatus))
RESULTS = st.builds(
    lambda status, rtts, sent, extra: model.ProbeResult(
        status=status,
        started_at=0.0,
        rtts_s=tuple(rtts),
        sent=sent,
        received=min(len(rtts) + extra, 10),
    ),
    STATUSES,
    st.lists(st.floats(min_value=0.0, max_value=30.0), max_size=5),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=3),
)


@given(st.lists(RESULTS, min_size=1, max_size=60), st.integers(min_value=1, max_value=30))
def test_summary_invariants(results: list[model.ProbeResult], window: int) -> None:
    stats = PathStats(window)
    for r in results:
        stats.add(r)
    s = stats.summary()
    # the window starts at the first answer, if any (failures before it are not loss)
    first_ok = next((i for i, r in enumerate(results) if r.ok), 0)
    in_window = results[first_ok:][-window:]
    rtts = [x for r in in_window for x in r.rtts_s]
    assert s.samples == len(in_window)
    assert 0.0 <= s.loss <= 1.0
    if rtts:
        assert s.rtt_p50_s is not None
        assert s.rtt_p95_s is not None
        assert min(rtts) <= s.rtt_p50_s <= s.rtt_p95_s <= max(rtts)
        assert s.rtt_max_s == max(rtts)
    else:
        assert s.rtt_p50_s is s.rtt_p95_s is s.rtt_max_s is None
    trailing = 0
    for r in reversed(results):
        if r.ok:
            break
        trailing += 1
    assert s.consecutive_failures == trailing


def key(node: str, tt: str = "node", proto: str = "icmp") -> model.PathKey:
    return model.PathKey("c1", node, model.TargetType(tt), model.Protocol(proto))


def report(*entries: tuple[model.PathKey, model.ProbeResult]) -> model.RoundReport:
    return model.RoundReport(
        started_at=0.0,
        duration_s=1.0,
        targets=(),
        paths=tuple(model.PathReport(k, "10.0.0.1", r) for k, r in entries),
    )


def test_stats_book_records_rounds_and_forgets() -> None:
    book = StatsBook(window=5)
    a_icmp, a_http, b_icmp = key("a"), key("a", proto="http"), key("b")
    book.record(report((a_icmp, res(OK, 1.0)), (a_http, res(TIMEOUT, sent=1))))
    book.record(report((a_icmp, res(OK, 3.0)), (b_icmp, res(OK, 2.0))))
    summaries = book.summaries()
    assert list(summaries) == sorted([a_icmp, a_http, b_icmp])
    assert summaries[a_icmp].samples == 2
    assert summaries[a_icmp].rtt_max_s == pytest.approx(0.003)
    assert summaries[a_http].loss == 1.0
    assert book.summary(b_icmp) is not None
    assert b_icmp in book

    book.forget([b_icmp, key("never-seen")])
    assert b_icmp not in book
    assert book.summary(b_icmp) is None
    assert len(book) == 2


def test_stats_book_retain_targets() -> None:
    book = StatsBook()
    book.record(report((key("a"), res(OK, 1.0)), (key("b", "endpoint"), res(OK, 1.0))))
    gone = book.retain_targets([model.Target("c1", "a", "10.0.0.1")])
    assert gone == [key("b", "endpoint")]
    assert list(book.summaries()) == [key("a")]
