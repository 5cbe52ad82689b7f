"""The UDP echo protocol (pure): datagrams, replies, matching, results, the gate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.model import ProbeStatus
from meshhealth.probe import udp_echo
from meshhealth.probe.udp_echo import (
    COOKIE_BYTES,
    MAX_DATAGRAM_BYTES,
    MIN_DATAGRAM_BYTES,
    echo_reply,
    echo_request,
    is_reply_to,
    udp_result,
)
from meshhealth.probe.udp_responder import EchoGate

COOKIE = bytes(range(COOKIE_BYTES))
cookies = st.binary(min_size=COOKIE_BYTES, max_size=COOKIE_BYTES)
sequences = st.integers(0, udp_echo.MAX_SEQUENCE)


def test_a_request_is_the_smallest_answered_datagram() -> None:
    request = echo_request(COOKIE, 3)
    assert len(request) == MIN_DATAGRAM_BYTES
    assert request.startswith(udp_echo.MAGIC)
    assert request.endswith(COOKIE)


@pytest.mark.parametrize(
    ("cookie", "seq", "message"),
    [
        (b"short", 0, "a cookie is 16 bytes"),
        (COOKIE, -1, "outside"),
        (COOKIE, 70_000, "outside"),
    ],
)
def test_bad_requests_are_refused(cookie: bytes, seq: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        echo_request(cookie, seq)


@given(cookies, sequences, st.binary(max_size=MAX_DATAGRAM_BYTES - MIN_DATAGRAM_BYTES))
def test_the_reply_echoes_the_request_and_is_never_bigger(
    cookie: bytes, seq: int, padding: bytes
) -> None:
    request = echo_request(cookie, seq) + padding
    reply = echo_reply(request)
    assert reply is not None
    assert len(reply) == len(request)
    assert is_reply_to(reply, request)
    assert echo_reply(reply) is None  # a reply is never answered: no ping-pong loops


@given(st.binary(max_size=2 * MAX_DATAGRAM_BYTES))
def test_no_datagram_gets_a_bigger_answer(datagram: bytes) -> None:
    reply = echo_reply(datagram)
    assert reply is None or len(reply) == len(datagram) <= MAX_DATAGRAM_BYTES


@given(cookies, cookies, sequences, sequences)
def test_a_reply_counts_only_for_its_own_cookie_and_sequence(
    cookie: bytes, other: bytes, seq: int, other_seq: int
) -> None:
    request = echo_request(cookie, seq)
    reply = echo_reply(echo_request(other, other_seq))
    assert reply is not None
    assert is_reply_to(reply, request) == (cookie == other and seq == other_seq)


@pytest.mark.parametrize(
    ("datagram", "answered"),
    [
        (echo_request(COOKIE, 0), True),
        (echo_request(COOKIE, 0)[:-1], False),  # too short
        (echo_request(COOKIE, 0) + bytes(MAX_DATAGRAM_BYTES), False),  # too big
        (b"XXXX" + echo_request(COOKIE, 0)[4:], False),  # not our magic
        (b"MHU\x02" + echo_request(COOKIE, 0)[4:], False),  # another version
        (echo_reply(echo_request(COOKIE, 0)), False),  # a reply
        (b"", False),
    ],
)
def test_what_the_responder_answers(datagram: bytes, answered: bool) -> None:
    assert (echo_reply(datagram) is not None) is answered


def test_a_request_is_not_its_own_reply() -> None:
    request = echo_request(COOKIE, 1)
    assert not is_reply_to(request, request)


@pytest.mark.parametrize(
    ("sent", "rtts", "refused", "error", "status", "detail"),
    [
        (4, (0.001,) * 4, 0, "", ProbeStatus.OK, ""),
        (4, (0.001,) * 3, 0, "", ProbeStatus.TIMEOUT, "1 of 4 datagrams lost"),
        (4, (), 0, "", ProbeStatus.TIMEOUT, ""),
        (4, (), 4, "", ProbeStatus.REFUSED, "ICMP port unreachable"),
        (4, (), 1, "", ProbeStatus.REFUSED, "ICMP port unreachable"),
        (4, (0.001,), 3, "", ProbeStatus.TIMEOUT, "3 of 4 datagrams lost"),
        (0, (), 0, "Address family not supported", ProbeStatus.ERROR, "Address family"),
        (0, (), 0, "", ProbeStatus.TIMEOUT, ""),
    ],
)
def test_result_classification(
    *,
    sent: int,
    rtts: tuple[float, ...],
    refused: int,
    error: str,
    status: ProbeStatus,
    detail: str,
) -> None:
    result = udp_result(100.0, sent=sent, rtts_s=rtts, refused=refused, error=error)
    assert result.status is status
    assert result.detail.startswith(detail)
    assert result.received == len(rtts)
    assert result.sent == sent
    if status is ProbeStatus.OK:
        assert result.loss == 0.0


@given(st.integers(1, 64), st.data())
def test_loss_is_the_share_of_datagrams_without_a_reply(sent: int, data: st.DataObject) -> None:
    received = data.draw(st.integers(0, sent))
    result = udp_result(0.0, sent=sent, rtts_s=(0.001,) * received)
    assert result.loss == pytest.approx(1 - received / sent)
    assert result.ok is (received == sent)


def _gate(trusted: set[str] | None, **limits: float) -> EchoGate:
    check = None if trusted is None else trusted.__contains__
    return EchoGate(trusted=check, **limits)  # type: ignore[arg-type]


def test_the_gate_answers_registered_nodes_and_drops_others() -> None:
    gate = _gate({"10.0.0.2"})
    request = echo_request(COOKIE, 0)
    assert gate.answer(request, "10.0.0.2", 0.0) == (echo_reply(request), "")
    assert gate.answer(request, "10.9.9.9", 0.0) == (None, "unregistered")
    assert gate.answer(b"junk", "10.0.0.2", 0.0) == (None, "malformed")


def test_without_a_registry_the_gate_answers_anyone() -> None:
    gate = _gate(None)
    assert gate.answer(echo_request(COOKIE, 0), "192.0.2.1", 0.0)[0] is not None


def test_the_gate_limits_each_source_and_all_of_them() -> None:
    gate = _gate(None, rate_per_s=1.0, burst=2, total_rate_per_s=2.0)
    request = echo_request(COOKIE, 0)
    reasons = [gate.answer(request, "10.0.0.1", 0.0)[1] for _ in range(3)]
    assert reasons == ["", "", "rate"]  # its own bucket (burst 2) is empty
    # the total bucket (2 a second, burst 2) is empty too, whoever asks
    assert gate.answer(request, "10.0.0.2", 0.0)[1] == "rate"
    assert gate.answer(request, "10.0.0.2", 1.0)[1] == ""
    assert gate.answer(request, "10.0.0.1", 1.0)[1] == ""  # refilled: one a second
