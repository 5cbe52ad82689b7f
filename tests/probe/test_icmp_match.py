"""Which datagrams count as answers (meshhealth.probe.icmp_match): no sockets, any user.

Each case registers echo requests with a ReplyMatcher as the pinger does, feeds it the
bytes a raw socket would hand over, and checks what counted.
"""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.model import ProbeStatus
from meshhealth.probe.icmp_match import EchoProbe, ReplyMatcher, canonical_ip
from meshhealth.probe.icmp_packet import build_echo_request
from tests.probe.test_icmp_packet import echo, ipv4_header, ipv6_header, unreach_v4, unreach_v6, v4

IDENT = 0x4242
COOKIE = bytes(range(16))
TARGET4, TARGET6 = "10.0.0.2", "fd00::2"
SENT_AT, TIMEOUT_S = 100.0, 1.0


def setup(*, ipv6: bool, count: int = 1) -> tuple[ReplyMatcher, EchoProbe, list[int]]:
    """A matcher with one probe whose `count` requests were sent at SENT_AT."""
    matcher = ReplyMatcher(ipv6=ipv6, identifier=IDENT, first_sequence=7)
    probe = EchoProbe(TARGET6 if ipv6 else TARGET4, count, COOKIE)
    sequences = []
    for index in range(count):
        sequence = matcher.allocate(probe, index)
        assert sequence is not None
        sequences.append(sequence)
        probe.mark_sent(index, SENT_AT, TIMEOUT_S)
    return matcher, probe, sequences


def reply(
    *, ipv6: bool, seq: int = 7, ident: int = IDENT, payload: bytes = COOKIE, icmp_type: int = -1
) -> bytes:
    if icmp_type < 0:
        icmp_type = 129 if ipv6 else 0
    message = echo(icmp_type, ident, seq, payload)
    if ipv6:
        return message[:2] + b"\0\0" + message[4:]  # the kernel checks ICMPv6 checksums
    return v4(message, src=TARGET4, dst="10.0.0.1")


def error(*, ipv6: bool, seq: int = 7, dst: str = "", quoted_payload: bytes = COOKIE) -> bytes:
    request = build_echo_request(ipv6=ipv6, identifier=IDENT, sequence=seq, payload=COOKIE)
    request = request[:8] + quoted_payload  # routers may quote only a prefix
    if ipv6:
        quoted = ipv6_header("fd00::1", dst or TARGET6, len(request)) + request
        return unreach_v6(3, quoted)
    quoted = ipv4_header("10.0.0.1", dst or TARGET4, len(request)) + request
    return unreach_v4(1, quoted)


def corrupt_checksum(data: bytes) -> bytes:
    return data[:22] + bytes([data[22] ^ 0xFF]) + data[23:]


ROUTER4, ROUTER6 = "10.9.0.1", "fd00::9"
IN_TIME = SENT_AT + 0.25

# (name, ipv6, datagram, source, arrival, counts as: "reply" | "error" | None)
CASES = [
    ("reply v4", False, reply(ipv6=False), TARGET4, IN_TIME, "reply"),
    ("reply v6", True, reply(ipv6=True), TARGET6, IN_TIME, "reply"),
    ("reply v6 with scope", True, reply(ipv6=True), TARGET6 + "%eth0", IN_TIME, "reply"),
    ("reply at the deadline", False, reply(ipv6=False), TARGET4, SENT_AT + TIMEOUT_S, "reply"),
    ("late reply", False, reply(ipv6=False), TARGET4, SENT_AT + TIMEOUT_S + 1e-6, None),
    ("late reply v6", True, reply(ipv6=True), TARGET6, SENT_AT + 5, None),
    ("wrong source", False, reply(ipv6=False), "10.0.0.3", IN_TIME, None),
    ("wrong source v6", True, reply(ipv6=True), "fd00::3", IN_TIME, None),
    ("wrong identifier", False, reply(ipv6=False, ident=IDENT ^ 1), TARGET4, IN_TIME, None),
    ("unknown sequence", False, reply(ipv6=False, seq=8), TARGET4, IN_TIME, None),
    ("wrong cookie", False, reply(ipv6=False, payload=COOKIE[::-1]), TARGET4, IN_TIME, None),
    ("short cookie", True, reply(ipv6=True, payload=COOKIE[:8]), TARGET6, IN_TIME, None),
    ("long cookie", True, reply(ipv6=True, payload=COOKIE + b"x"), TARGET6, IN_TIME, None),
    ("bad checksum v4", False, corrupt_checksum(reply(ipv6=False)), TARGET4, IN_TIME, None),
    # Our own requests, as a raw socket sees them on loopback.
    ("own request v4", False, reply(ipv6=False, icmp_type=8), TARGET4, IN_TIME, None),
    ("own request v6", True, reply(ipv6=True, icmp_type=128), TARGET6, IN_TIME, None),
    ("other type v4", False, reply(ipv6=False, icmp_type=11), TARGET4, IN_TIME, None),
    ("truncated v4", False, reply(ipv6=False)[:27], TARGET4, IN_TIME, None),
    ("truncated v6", True, reply(ipv6=True)[:7], TARGET6, IN_TIME, None),
    ("empty", False, b"", TARGET4, IN_TIME, None),
    # ICMP errors quoting our request, from a router.
    ("error v4", False, error(ipv6=False), ROUTER4, IN_TIME, "error"),
    ("error v6", True, error(ipv6=True), ROUTER6 + "%eth0", IN_TIME, "error"),
    (
        "error quoting 8 bytes",
        False,
        error(ipv6=False, quoted_payload=b""),
        ROUTER4,
        IN_TIME,
        "error",
    ),
    ("error, other destination", False, error(ipv6=False, dst="10.0.0.3"), ROUTER4, IN_TIME, None),
    (
        "error, other cookie",
        True,
        error(ipv6=True, quoted_payload=b"\xff" * 4),
        ROUTER6,
        IN_TIME,
        None,
    ),
    ("error, unknown sequence", False, error(ipv6=False, seq=9), ROUTER4, IN_TIME, None),
    ("late error", False, error(ipv6=False), ROUTER4, SENT_AT + 2, None),
]


@pytest.mark.parametrize(
    ("ipv6", "data", "source", "now", "counts"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_what_counts(ipv6: bool, data: bytes, source: str, now: float, counts: str | None) -> None:
    matcher, probe, (sequence,) = setup(ipv6=ipv6)
    matched = matcher.match(data, source, now)
    if counts is None:
        assert matched is None
        assert (probe.rtts, probe.errors, probe.outstanding) == ([None], [], 1)
        assert matcher.waiters == {sequence: (probe, 0)}  # still waiting for an answer
        assert probe.result(0.0).status is ProbeStatus.TIMEOUT
        return
    assert matched is probe
    assert probe.outstanding == 0
    assert matcher.waiters == {}  # the request is retired
    result = probe.result(0.0)
    if counts == "reply":
        assert probe.rtts == [pytest.approx(now - SENT_AT)]
        assert (result.status, result.received, result.sent) == (ProbeStatus.OK, 1, 1)
    else:
        assert probe.rtts == [None]
        router = ROUTER6 if ipv6 else ROUTER4
        text = "address unreachable" if ipv6 else "host unreachable"
        assert probe.errors == [f"{text} from {router}"]
        assert (result.status, result.detail) == (ProbeStatus.UNREACHABLE, probe.errors[0])


def with_source(data: bytes, source: str) -> bytes:
    """An IPv4 datagram as sent by `source` (its header's source address rewritten)."""
    if len(data) < 20:
        return data
    return data[:12] + socket.inet_pton(socket.AF_INET, source.partition("%")[0]) + data[16:]


@pytest.mark.parametrize(
    ("data", "source", "now", "counts"),
    [case[2:] for case in CASES if not case[1]],
    ids=[case[0] for case in CASES if not case[1]],
)
def test_the_ipv4_fast_path_follows_the_same_rules(
    data: bytes, source: str, now: float, counts: str | None
) -> None:
    # The receiver reads IPv4 datagrams into one buffer and takes the source from the IP
    # header (where recvfrom() takes it from): every case counts exactly as in `match`.
    matcher, probe, (sequence,) = setup(ipv6=False)
    buffer = bytearray(2048)
    datagram = with_source(data, source)
    buffer[: len(datagram)] = datagram
    matched = matcher.match_ipv4(buffer, len(datagram), now)
    if counts is None:
        assert matched is None
        assert matcher.waiters == {sequence: (probe, 0)}
        assert (probe.rtts, probe.errors, probe.outstanding) == ([None], [], 1)
    else:
        assert matched is probe
        assert matcher.waiters == {}
        assert (probe.rtts == [None]) == (counts == "error")
        assert bool(probe.errors) == (counts == "error")


@given(st.binary(max_size=200), st.floats(0, 200))
def test_random_bytes_never_count_in_the_ipv4_fast_path(data: bytes, now: float) -> None:
    matcher, probe, _ = setup(ipv6=False)
    buffer = bytearray(2048)
    buffer[: len(data)] = data
    assert matcher.match_ipv4(buffer, len(data), now) is None
    assert probe.outstanding == 1


@pytest.mark.parametrize("ipv6", [False, True])
def test_duplicates_count_once(ipv6: bool) -> None:
    matcher, probe, _ = setup(ipv6=ipv6)
    data, source = reply(ipv6=ipv6), probe.target
    assert matcher.match(data, source, IN_TIME) is probe
    assert matcher.match(data, source, IN_TIME + 0.01) is None
    assert matcher.match(error(ipv6=ipv6), ROUTER4, IN_TIME) is None  # answered already
    assert probe.rtts == [pytest.approx(0.25)]
    assert probe.outstanding == 0


def test_no_answer_before_the_request_left() -> None:
    # Sequence allocated but the request not sent yet (its deadline is -inf).
    matcher = ReplyMatcher(ipv6=False, identifier=IDENT, first_sequence=7)
    probe = EchoProbe(TARGET4, 1, COOKIE)
    assert matcher.allocate(probe, 0) == 7
    assert matcher.match(reply(ipv6=False), TARGET4, IN_TIME) is None


def test_each_request_of_a_probe_has_its_own_deadline() -> None:
    matcher = ReplyMatcher(ipv6=False, identifier=IDENT, first_sequence=7)
    probe = EchoProbe(TARGET4, 2, COOKIE)
    assert matcher.allocate(probe, 0) == 7
    probe.mark_sent(0, 100.0, 0.3)
    assert matcher.allocate(probe, 1) == 8
    probe.mark_sent(1, 100.4, 0.3)
    # request 0's reply comes at 100.35: after its own deadline, while the probe waits
    assert matcher.match(reply(ipv6=False, seq=7), TARGET4, 100.35) is None
    assert matcher.match(reply(ipv6=False, seq=8), TARGET4, 100.45) is probe
    result = probe.result(0.0)
    assert (result.sent, result.received, result.status) == (2, 1, ProbeStatus.OK)
    assert result.rtts_s == (pytest.approx(0.05),)
    # which request went unanswered (`probe -C` prints `-` in its place)
    assert result.request_rtts_s == (None, pytest.approx(0.05))


def test_sequences_are_unique_in_flight_and_released() -> None:
    matcher = ReplyMatcher(ipv6=False, identifier=IDENT, first_sequence=0xFFFE)
    a, b = EchoProbe(TARGET4, 3, COOKIE), EchoProbe("10.0.0.3", 1, COOKIE)
    seqs_a = [matcher.allocate(a, i) for i in range(3)]
    assert seqs_a == [0xFFFE, 0xFFFF, 0]  # wraps around
    matcher.next_sequence = 0xFFFF  # force a collision: the next free one is taken
    assert matcher.allocate(b, 0) == 1
    matcher.release(a)
    assert matcher.waiters == {1: (b, 0)}
    matcher.release(a)  # twice: harmless, and never another probe's entry
    assert matcher.in_flight == 1


def test_full_table_refuses() -> None:
    matcher = ReplyMatcher(ipv6=True, identifier=IDENT)
    probe = EchoProbe(TARGET6, 1, COOKIE)
    matcher.waiters = {seq: (probe, 0) for seq in range(1 << 16)}
    assert matcher.allocate(probe, 0) is None


@pytest.mark.parametrize(
    ("ip", "expected"),
    [
        ("10.0.0.1", (2, "10.0.0.1")),
        ("fd00:0::0001", (10, "fd00::1")),
        ("::ffff:10.0.0.1", (10, "::ffff:10.0.0.1")),
    ],
)
def test_canonical_ip(ip: str, expected: tuple[int, str]) -> None:
    assert canonical_ip(ip) == expected


@pytest.mark.parametrize("bad", ["", "10.0.0", "example.org", "fe80::1%lo", "1.2.3.4/32"])
def test_canonical_ip_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="not an IP address"):
        canonical_ip(bad)


@given(st.binary(max_size=200), st.booleans(), st.floats(0, 200))
def test_random_bytes_never_count(data: bytes, ipv6: bool, now: float) -> None:
    matcher, probe, _ = setup(ipv6=ipv6)
    # Without our 16-byte random cookie nothing counts, whatever the bytes.
    assert matcher.match(data, probe.target, now) is None
    assert probe.outstanding == 1


@given(
    st.integers(0, 0xFFFF),
    st.binary(min_size=16, max_size=16),
    st.floats(0, 1),
    st.booleans(),
    st.integers(0, 0xFFFF),
)
def test_the_true_reply_counts_exactly_once(
    first: int, cookie: bytes, delay_s: float, ipv6: bool, ident: int
) -> None:
    matcher = ReplyMatcher(ipv6=ipv6, identifier=ident, first_sequence=first)
    target = TARGET6 if ipv6 else TARGET4
    probe = EchoProbe(target, 1, cookie)
    sequence = matcher.allocate(probe, 0)
    assert sequence == first
    probe.mark_sent(0, SENT_AT, TIMEOUT_S)
    message = echo(129 if ipv6 else 0, ident, sequence, cookie)
    data = message if ipv6 else v4(message, src=TARGET4)
    assert matcher.match(data, target, SENT_AT + delay_s) is probe
    assert matcher.match(data, target, SENT_AT + delay_s) is None
    assert probe.rtts == [pytest.approx(delay_s)]


def test_header_layout_of_the_helpers() -> None:
    # The helpers build what a raw socket hands over: IPv4 with its header, IPv6 without.
    assert struct.unpack_from("!BB", reply(ipv6=False), 20) == (0, 0)
    assert reply(ipv6=True)[0] == 129
