"""ICMP codec: table-driven cases and "random bytes never raise"."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.probe.icmp_packet import (
    Echo,
    EchoError,
    build_echo_request,
    checksum,
    echo_request_v4,
    parse_datagram,
    payload_sum,
)

COOKIE = bytes(range(16))


def ipv4_header(src: str, dst: str, payload_len: int, *, proto: int = 1, ihl: int = 5) -> bytes:
    options = b"\x01" * ((ihl - 5) * 4)  # NOP options
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x40 | ihl,
        0,
        ihl * 4 + payload_len,
        0,
        0,
        64,
        proto,
        0,
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    )
    return header + options


def ipv6_header(src: str, dst: str, payload_len: int, *, next_header: int = 58) -> bytes:
    return (
        struct.pack("!IHBB", 0x60000000, payload_len, next_header, 64)
        + ipaddress.IPv6Address(src).packed
        + ipaddress.IPv6Address(dst).packed
    )


def with_checksum(message: bytes) -> bytes:
    message = message[:2] + b"\0\0" + message[4:]
    return message[:2] + checksum(message).to_bytes(2, "big") + message[4:]


def echo(icmp_type: int, ident: int, seq: int, payload: bytes = COOKIE) -> bytes:
    return with_checksum(struct.pack("!BBHHH", icmp_type, 0, 0, ident, seq) + payload)


def v4(message: bytes, *, ihl: int = 5, src: str = "10.0.0.2", dst: str = "10.0.0.1") -> bytes:
    return ipv4_header(src, dst, len(message), ihl=ihl) + message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("", 0xFFFF),
        ("0000", 0xFFFF),
        ("ffff", 0x0000),
        # RFC 1071 example: 0001 f203 f4f5 f6f7 sums to ddf2 -> checksum 220d.
        ("0001f203f4f5f6f7", 0x220D),
        ("01", 0xFEFF),  # odd length: padded with a zero byte
    ],
)
def test_checksum(data: str, expected: int) -> None:
    assert checksum(bytes.fromhex(data)) == expected


def rfc1071_checksum(data: bytes) -> int:
    """The textbook algorithm: sum 16-bit words with end-around carry, complement."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


# Words whose sum is a multiple of 0xFFFF (the remainder trick's one special case).
FOLDS_TO_FFFF = st.lists(st.sampled_from([0x0000, 0xFFFF, 0x8000, 0x7FFF, 0x0001, 0xFFFE]))


@given(st.binary(max_size=300) | FOLDS_TO_FFFF.map(lambda ws: struct.pack(f"!{len(ws)}H", *ws)))
def test_checksum_matches_rfc1071(data: bytes) -> None:
    assert checksum(data) == rfc1071_checksum(data)


@pytest.mark.parametrize(
    ("ipv6", "ident", "seq", "payload", "expected_hex"),
    [
        (False, 0x1234, 1, b"", "0800e5ca12340001"),
        (False, 0, 0, b"ab", "0800969d00000000" + "6162"),
        (True, 0x1234, 0xFFFF, b"", "800000001234ffff"),
        (True, 7, 9, b"\x01", "800000000007000901"),
    ],
)
def test_build_echo_request(
    ipv6: bool, ident: int, seq: int, payload: bytes, expected_hex: str
) -> None:
    packet = build_echo_request(ipv6=ipv6, identifier=ident, sequence=seq, payload=payload)
    assert packet.hex() == expected_hex
    if not ipv6:
        assert checksum(packet) == 0  # a valid checksum sums to zero


@pytest.mark.parametrize(
    ("data", "ipv6", "expected"),
    [
        # IPv4 echo reply, plain 20-byte header
        (v4(echo(0, 0xBEEF, 5)), False, Echo(0, 0, 0xBEEF, 5, COOKIE)),
        # IPv4 header with options (IHL 7): stripped by IHL, not by a fixed 20
        (v4(echo(0, 1, 2), ihl=7), False, Echo(0, 0, 1, 2, COOKIE)),
        # our own echo request seen on loopback: parsed, as a request (type 8)
        (v4(echo(8, 1, 2)), False, Echo(8, 0, 1, 2, COOKIE)),
        # IPv6: no IP header, checksum left to the kernel
        (echo(129, 0xBEEF, 65535), True, Echo(129, 0, 0xBEEF, 65535, COOKIE)),
        (echo(128, 3, 4), True, Echo(128, 0, 3, 4, COOKIE)),
        # garbage
        (b"", False, None),
        (b"", True, None),
        (echo(129, 1, 1)[:7], True, None),  # truncated header
        (v4(echo(0, 1, 2))[:27], False, None),  # truncated ICMP header
        (v4(echo(0, 1, 2))[:19], False, None),  # truncated IP header
        (b"\x60" + v4(echo(0, 1, 2))[1:], False, None),  # not IPv4
        (v4(echo(0, 1, 2))[:-1] + b"\x00", False, None),  # bad checksum
        (ipv4_header("10.0.0.2", "10.0.0.1", 24, proto=17) + echo(0, 1, 2), False, None),
        (b"\x44" + v4(echo(0, 1, 2))[1:], False, None),  # IHL 4 < 5
        (v4(echo(13, 1, 2)), False, None),  # timestamp request: not ours
        (echo(135, 1, 2), True, None),  # neighbour solicitation
        (echo(0, 1, 2), True, None),  # a v4 echo reply type on the v6 socket
        (v4(echo(129, 1, 2)), False, None),  # a v6 type on the v4 socket
    ],
)
def test_parse_datagram(data: bytes, ipv6: bool, expected: Echo | EchoError | None) -> None:
    assert parse_datagram(data, ipv6=ipv6) == expected


def unreach_v4(code: int, quoted: bytes) -> bytes:
    return v4(with_checksum(struct.pack("!BBHI", 3, code, 0, 0) + quoted), src="10.9.0.1")


def unreach_v6(code: int, quoted: bytes) -> bytes:
    return struct.pack("!BBHI", 1, code, 0, 0) + quoted


REQ4 = build_echo_request(ipv6=False, identifier=0x4242, sequence=7, payload=COOKIE)
REQ6 = build_echo_request(ipv6=True, identifier=0x4242, sequence=7, payload=COOKIE)
QUOTED4 = ipv4_header("10.0.0.1", "10.0.0.99", len(REQ4)) + REQ4
QUOTED6 = ipv6_header("fd00::1", "fd00::99", len(REQ6)) + REQ6


@pytest.mark.parametrize(
    ("data", "ipv6", "expected"),
    [
        (unreach_v4(1, QUOTED4), False, EchoError(3, 1, "10.0.0.99", 0x4242, 7, COOKIE)),
        # a router quoting only 8 bytes of the ICMP message: no payload
        (unreach_v4(0, QUOTED4[:28]), False, EchoError(3, 0, "10.0.0.99", 0x4242, 7, b"")),
        (unreach_v6(3, QUOTED6), True, EchoError(1, 3, "fd00::99", 0x4242, 7, COOKIE)),
        # quoting something that is not an echo request: not about us
        (unreach_v4(3, ipv4_header("10.0.0.1", "10.0.0.99", 8, proto=17) + b"\0" * 8), False, None),
        (unreach_v4(1, QUOTED4[:26]), False, None),  # quote too short for id/seq
        (unreach_v6(3, QUOTED6[:44]), True, None),
        (unreach_v6(3, ipv6_header("fd00::1", "fd00::99", 8, next_header=17) + REQ6), True, None),
        (unreach_v6(3, QUOTED6[:40] + echo(129, 1, 1)), True, None),  # quotes a reply
    ],
)
def test_parse_unreachable(data: bytes, ipv6: bool, expected: EchoError | None) -> None:
    assert parse_datagram(data, ipv6=ipv6) == expected


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (EchoError(3, 1, "10.0.0.1", 0, 0, b""), "host unreachable"),
        (EchoError(3, 13, "10.0.0.1", 0, 0, b""), "communication administratively prohibited"),
        (EchoError(1, 3, "fd00::1", 0, 0, b""), "address unreachable"),
        (EchoError(1, 99, "fd00::1", 0, 0, b""), "destination unreachable (code 99)"),
    ],
)
def test_error_text(error: EchoError, text: str) -> None:
    assert error.text == text


@given(st.binary(max_size=200), st.booleans())
def test_random_bytes_never_raise(data: bytes, ipv6: bool) -> None:
    result = parse_datagram(data, ipv6=ipv6)
    assert result is None or isinstance(result, Echo | EchoError)


@given(st.binary(max_size=120), st.booleans())
def test_random_bytes_after_valid_headers_never_raise(tail: bytes, ipv6: bool) -> None:
    # Reach the deeper branches: a well-formed outer header followed by junk.
    data = unreach_v6(0, tail) if ipv6 else unreach_v4(0, tail)
    result = parse_datagram(data, ipv6=ipv6)
    assert result is None or isinstance(result, EchoError)


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.binary(max_size=64), st.booleans())
def test_request_round_trip(ident: int, seq: int, payload: bytes, ipv6: bool) -> None:
    packet = build_echo_request(ipv6=ipv6, identifier=ident, sequence=seq, payload=payload)
    data = packet if ipv6 else v4(packet)
    request_type = 128 if ipv6 else 8
    assert parse_datagram(data, ipv6=ipv6) == Echo(request_type, 0, ident, seq, payload)


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.binary(max_size=64))
def test_incremental_checksum_is_the_full_one(ident: int, seq: int, payload: bytes) -> None:
    # echo_request_v4 adds the payload's precomputed share to the header's words; the
    # packet must be the one the full checksum (checked against RFC 1071 above) gives.
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    expected = header[:2] + checksum(header + payload).to_bytes(2, "big") + header[4:] + payload
    assert echo_request_v4(ident, seq, payload, payload_sum(payload)) == expected
    assert build_echo_request(ipv6=False, identifier=ident, sequence=seq, payload=payload) == (
        expected
    )
