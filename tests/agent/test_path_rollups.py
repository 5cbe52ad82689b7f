"""The roll-up core (meshhealth/agent/path_rollups.py) and its wire value
(meshhealth/wire/rollup.py): availability, windows closing at wall-clock boundaries,
the time and byte bounds, restoring what an earlier run wrote."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.agent.path_rollups import PathRollups
from meshhealth.model import PathKey, ProbeResult, ProbeStatus, Protocol, TargetType
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.rollup import (
    HOUR_S,
    MINUTES10_S,
    NodeRollups,
    PathRollup,
    Window,
    decode_rollups,
    encode_rollups,
)

T0 = 1_700_000_400.0  # a 10-minute boundary, 20 minutes into an hour
HOUR0 = T0 - 1200
assert T0 % MINUTES10_S == 0 and HOUR0 % HOUR_S == 0
ICMP = PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP)
HTTP2 = PathKey("c1", "n2", TargetType.ENDPOINT, Protocol.HTTP, secondary=True)


def ok(at: float, rtt: float = 0.001) -> ProbeResult:
    return ProbeResult(ProbeStatus.OK, at, (rtt,), 1, 1)


def bad(at: float) -> ProbeResult:
    return ProbeResult(ProbeStatus.TIMEOUT, at, (), 1, 0)


def only(rollups: PathRollups, now: float) -> PathRollup:
    (path,) = rollups.snapshot(now).paths
    return path


@pytest.mark.parametrize(
    ("oks", "fails", "availability"),
    [(10, 0, 1.0), (9, 1, 0.9), (0, 4, 0.0), (3, 1, 0.75), (1, 0, 1.0)],
)
def test_availability_is_one_minus_failures_over_probes(
    oks: int, fails: int, availability: float
) -> None:
    rollups = PathRollups("c1", "n1")
    for i in range(oks):
        rollups.record(ICMP, ok(T0 + i))
    for i in range(fails):
        rollups.record(ICMP, bad(T0 + 100 + i))
    assert rollups.close(T0 + MINUTES10_S)
    (window,) = only(rollups, T0 + MINUTES10_S).minutes10
    assert (window.probes, window.failures) == (oks + fails, fails)
    assert window.availability == pytest.approx(availability)
    assert (window.rtt_p50_s is None) == (oks == 0)


def test_latency_percentiles_are_nearest_rank_of_the_successes() -> None:
    rollups = PathRollups("c1", "n1")
    for i in range(1, 21):  # 1 .. 20 ms
        rollups.record(ICMP, ok(T0 + i, i / 1000))
    rollups.record(ICMP, bad(T0 + 30))
    rollups.close(T0 + MINUTES10_S)
    (window,) = only(rollups, T0 + MINUTES10_S).minutes10
    assert (window.rtt_p50_s, window.rtt_p95_s, window.rtt_max_s) == (0.010, 0.019, 0.020)


@pytest.mark.parametrize(
    ("now", "closed10", "closed_hours"),
    [
        (T0 + MINUTES10_S - 0.001, 0, 0),  # a millisecond before the boundary: open
        (T0 + MINUTES10_S, 1, 0),  # at the boundary: closed
        (T0 + 3 * MINUTES10_S, 1, 0),
        (HOUR0 + HOUR_S - 1, 1, 0),
        (HOUR0 + HOUR_S, 1, 1),  # the hour the results fell in has ended
    ],
)
def test_windows_close_at_wall_clock_boundaries(
    now: float, closed10: int, closed_hours: int
) -> None:
    rollups = PathRollups("c1", "n1")
    rollups.record(ICMP, ok(T0 + 5))
    assert rollups.close(now) is (closed10 > 0)
    assert rollups.windows() == (closed10, closed_hours)
    assert rollups.close(now) is False  # said once
    if closed10:
        (window,) = only(rollups, now).minutes10
        assert window.start == T0
    if closed_hours:
        (hour,) = only(rollups, now).hours
        assert hour.start == HOUR0


def test_a_result_of_a_later_window_closes_the_open_one() -> None:
    rollups = PathRollups("c1", "n1")
    rollups.record(ICMP, ok(T0 + 599))
    rollups.record(ICMP, bad(T0 + 600))
    assert rollups.windows() == (1, 0)
    assert rollups.close(T0 + 601)  # reported with the next close
    rollups.record(ICMP, ok(T0 + 10))  # its window is closed: late, dropped
    assert rollups.late == 1
    rollups.close(T0 + 2 * MINUTES10_S)
    assert [w.probes for w in only(rollups, T0 + 1200).minutes10] == [1, 1]


def test_windows_older_than_the_horizons_are_dropped() -> None:
    rollups = PathRollups("c1", "n1", keep_minutes10_s=3600, keep_hours_s=3 * 3600)
    for minute in range(0, 6 * 60, 5):  # one probe every 5 minutes for 6 hours
        rollups.record(ICMP, ok(T0 + minute * 60))
    now = T0 + 6 * 3600
    rollups.close(now)
    path = only(rollups, now)
    assert [w.start for w in path.minutes10] == [now - 3600 + i * 600 for i in range(6)]
    assert all(w.start + HOUR_S > now - 3 * 3600 for w in path.hours)
    assert len(path.hours) == 3


def test_paths_of_nodes_that_left_are_kept_until_their_windows_age_out() -> None:
    rollups = PathRollups("c1", "n1", keep_minutes10_s=3600, keep_hours_s=3600)
    rollups.record(HTTP2, ok(T0))
    rollups.close(T0 + 600)
    assert len(rollups) == 1
    assert only(rollups, T0 + 600).path == "endpoint/http@secondary"
    rollups.close(T0 + 5 * 3600)
    assert len(rollups) == 0 and rollups.snapshot(T0 + 5 * 3600).paths == ()


def test_restore_takes_back_the_windows_an_earlier_run_wrote() -> None:
    first = PathRollups("c1", "n1")
    for i in range(30):
        first.record(ICMP, ok(T0 + i * 60) if i % 3 else bad(T0 + i * 60))
    first.close(T0 + 1800)
    written = decode_rollups(encode_rollups(first.snapshot(T0 + 1800)))
    second = PathRollups("c1", "n1")
    second.record(ICMP, ok(T0 + 1800 + 5))  # a round before the read-back came
    second.restore(written, now=T0 + 1805)
    second.close(T0 + 2400)
    path = only(second, T0 + 2400)
    assert [w.start for w in path.minutes10] == [T0, T0 + 600, T0 + 1200, T0 + 1800]
    assert path.minutes10[:3] == written.paths[0].minutes10


SIZES = st.lists(
    st.tuples(
        st.integers(0, 3 * 24 * 3600),  # seconds after T0
        st.integers(0, 40),  # target node
        st.sampled_from([(t, p) for t in TargetType for p in Protocol]),
        st.booleans(),  # ok
        st.floats(0.00001, 2.0),  # rtt
    ),
    max_size=300,
)


@settings(max_examples=60, deadline=None)
@given(results=SIZES, max_bytes=st.integers(300, 6000))
def test_bounds_hold_and_the_byte_count_is_exact(
    results: list[tuple[int, int, tuple[TargetType, Protocol], bool, float]], max_bytes: int
) -> None:
    rollups = PathRollups("c1", "node-1", max_bytes=max_bytes)
    now = T0
    for offset, target, (kind, protocol), success, rtt in sorted(results):
        now = T0 + offset
        port = 10250 if protocol is Protocol.TCP else 0  # a TCP path has its port
        path = PathKey("c1", f"n{target}", kind, protocol, port=port)
        rollups.record(path, ok(now, rtt) if success else bad(now))
        if offset % 7 == 0:
            rollups.close(now)
    rollups.close(now + 60)
    value = rollups.snapshot(now + 60)
    encoded = encode_rollups(value)
    assert len(encoded) == rollups.wire_bytes() <= max_bytes
    for path in value.paths:
        assert all(w.start + HOUR_S > now + 60 - 7 * 24 * 3600 for w in path.hours)
        assert all(w.start + MINUTES10_S > now + 60 - 24 * 3600 for w in path.minutes10)
        for window in (*path.minutes10, *path.hours):
            assert 0 <= window.failures <= window.probes
    assert decode_rollups(encoded) == decode_rollups(encode_rollups(decode_rollups(encoded)))


@settings(max_examples=40, deadline=None)
@given(
    windows=st.lists(
        st.tuples(st.integers(1, 50), st.integers(1, 100), st.integers(0, 100)),
        min_size=1,
        max_size=20,
    )
)
def test_windows_round_trip_through_the_wire(windows: list[tuple[int, int, int]]) -> None:
    start = T0
    made = []
    for gap, probes, failed in windows:
        start += gap * MINUTES10_S
        failures = min(failed, probes)
        rtts = (None, None, None) if failures == probes else (0.000123, 0.0042, 1.5)
        made.append(Window(start, probes, failures, *rtts))
    value = NodeRollups("c1", "n1", T0, (PathRollup("c1", "n2", "node/tcp", tuple(made)),))
    assert decode_rollups(encode_rollups(value)) == value


@pytest.mark.parametrize(
    ("m10", "message"),
    [
        ([1, 2, 3], "not a multiple of 6"),
        ([5, 2, 3, 1, 1, 1], "failures"),
        ([5, 2, 2, 1, 1, 1], "RTTs of a window without a success"),
        ([5, 2, 1, 1, None, 1], "all nil or all numbers"),
        ([5, 2, 1, 1, 1, 1, 0, 2, 1, 1, 1, 1], "start"),
        ([5, 0, 0, None, None, None], "probes"),
    ],
)
def test_bad_windows_are_refused_naming_the_place(m10: list[object], message: str) -> None:
    import msgpack

    value = {
        "v": 1,
        "cluster": "c1",
        "node": "n1",
        "written_at": T0,
        "paths": [{"target": "c1/n2", "path": "node/icmp", "m10": m10, "h1": []}],
    }
    with pytest.raises(DecodeError, match=message) as caught:
        decode_rollups(msgpack.packb(value))
    assert "paths[0].m10" in str(caught.value)
