"""ICMP / ICMPv6 echo codec for raw sockets. Pure: bytes in, values out, no I/O.

What a Linux raw socket hands us:
- IPv4 (AF_INET, IPPROTO_ICMP): the whole IP datagram; the IP header is stripped here
  by its IHL. We send only the ICMP message and fill in its checksum ourselves.
- IPv6 (AF_INET6, IPPROTO_ICMPV6): just the ICMPv6 message. The kernel computes (on
  send) and verifies (on receive) the ICMPv6 checksum, so we leave it 0.

Written here rather than taken from icmplib: icmplib's packet helpers are private methods
of its blocking socket classes, assume a 20-byte IPv4 header, drop the payload (so no
cookie check) and do not expose the quoted destination of ICMP errors.
"""

from __future__ import annotations

import socket  # inet_ntop only: the same text form recvfrom() gives source addresses
import struct
from dataclasses import dataclass

ICMP_ECHO_REPLY = 0
ICMP_DEST_UNREACH = 3
ICMP_ECHO_REQUEST = 8
ICMPV6_DEST_UNREACH = 1
ICMPV6_ECHO_REQUEST = 128
ICMPV6_ECHO_REPLY = 129
ICMP_TIME_EXCEEDED = 11  # a router's answer to a request whose TTL ran out
ICMPV6_TIME_EXCEEDED = 3  # the same for ICMPv6 (hop limit)

IPPROTO_ICMP = 1
IPPROTO_ICMPV6 = 58
IPV6_HEADER_LEN = 40
ECHO_HEADER_LEN = 8  # type, code, checksum, identifier, sequence

_ECHO_HEADER = struct.Struct("!BBHHH")
# identifier and sequence of an echo message, at offset 4 (after type, code, checksum)
ECHO_ID_SEQ = struct.Struct("!HH")

# Codes of "destination unreachable", as users read them.
_UNREACH_TEXT_V4 = {
    0: "network unreachable",
    1: "host unreachable",
    2: "protocol unreachable",
    3: "port unreachable",
    4: "fragmentation needed",
    9: "network administratively prohibited",
    10: "host administratively prohibited",
    13: "communication administratively prohibited",
}
_UNREACH_TEXT_V6 = {
    0: "no route to destination",
    1: "communication administratively prohibited",
    3: "address unreachable",
    4: "port unreachable",
    5: "source address failed policy",
    6: "reject route to destination",
}


@dataclass(frozen=True, slots=True)
class Echo:
    """An echo request or reply."""

    type: int
    code: int
    identifier: int
    sequence: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class EchoError:
    """A destination-unreachable error quoting one of our echo requests.

    `quoted_payload` may be a prefix of what we sent (routers may quote only 8 bytes of
    the ICMP message, i.e. none of the payload).
    """

    type: int
    code: int
    destination: str  # the destination of the quoted (our) request
    identifier: int
    sequence: int
    quoted_payload: bytes

    @property
    def text(self) -> str:
        table = _UNREACH_TEXT_V6 if ":" in self.destination else _UNREACH_TEXT_V4
        return table.get(self.code, f"destination unreachable (code {self.code})")


def checksum(data: bytes | bytearray) -> int:
    """The Internet checksum (RFC 1071) of `data`.

    Computed with one big-integer remainder: as 2**16 = 1 (mod 0xFFFF), the value of
    `data` read as a big-endian number is congruent to the sum of its 16-bit words, and
    the end-around-carry sum of RFC 1071 is that sum's remainder mod 0xFFFF (0xFFFF in
    place of 0 unless every word is 0). 2-3x faster than summing unpacked words.
    """
    if len(data) % 2:
        data += b"\x00"
    folded = int.from_bytes(data, "big") % 0xFFFF
    if folded:
        return 0xFFFF - folded
    return 0 if data.count(0) != len(data) else 0xFFFF  # a sum of 0xFFFF, or all zeros


def build_echo_request(*, ipv6: bool, identifier: int, sequence: int, payload: bytes) -> bytes:
    """An ICMP (type 8) or ICMPv6 (type 128) echo request ready for a raw socket."""
    if ipv6:
        return _ECHO_HEADER.pack(ICMPV6_ECHO_REQUEST, 0, 0, identifier, sequence) + payload
    return echo_request_v4(identifier, sequence, payload, payload_sum(payload))


def payload_sum(payload: bytes) -> int:
    """What `payload` adds to an echo request's checksum (its words' sum mod 0xFFFF).

    Computed once per probe, so that each request's checksum is a few small additions
    (`echo_request_v4`) instead of a pass over the whole packet.
    """
    if len(payload) % 2:
        payload += b"\x00"
    return int.from_bytes(payload, "big") % 0xFFFF


def echo_request_v4(identifier: int, sequence: int, payload: bytes, payload_sum: int) -> bytes:
    """An ICMP echo request (type 8) whose checksum is computed incrementally.

    The checksum is the one's complement of the words' end-around-carry sum, i.e.
    `-(sum) mod 0xFFFF` (see `checksum`): header words (type/code, identifier,
    sequence) plus `payload_sum`, the payload's share, computed once per payload. The
    header is never all zeros (type 8), so 0 is the right answer for a sum of 0 mod 0xFFFF.
    """
    csum = -((ICMP_ECHO_REQUEST << 8) + identifier + sequence + payload_sum) % 0xFFFF
    return _ECHO_HEADER.pack(ICMP_ECHO_REQUEST, 0, csum, identifier, sequence) + payload


def icmp_message(data: bytes, *, ipv6: bool) -> bytes | None:
    """The ICMP message in what a raw socket received (IPv4: header stripped, checksum
    verified), or None for a truncated, non-ICMP or corrupt datagram."""
    if ipv6:
        return data if len(data) >= ECHO_HEADER_LEN else None
    message = _strip_ipv4_header(data, IPPROTO_ICMP)
    if message is None or len(message) < ECHO_HEADER_LEN or checksum(message) != 0:
        return None
    return message


def parse_datagram(data: bytes, *, ipv6: bool) -> Echo | EchoError | None:
    """What a raw socket received: an echo message, an error quoting an echo request, or
    None for anything else (other ICMP types, truncated or corrupt packets)."""
    message = icmp_message(data, ipv6=ipv6)
    return None if message is None else parse_icmp(message, ipv6=ipv6)


def _strip_ipv4_header(data: bytes, protocol: int) -> bytes | None:
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    header_len = (data[0] & 0x0F) * 4
    if header_len < 20 or len(data) < header_len or data[9] != protocol:
        return None
    return data[header_len:]


def parse_icmp(message: bytes, *, ipv6: bool) -> Echo | EchoError | None:
    """An ICMP message (as `icmp_message` returns it) as an Echo or EchoError, or None."""
    if len(message) < ECHO_HEADER_LEN:
        return None
    icmp_type, code, _csum, identifier, sequence = _ECHO_HEADER.unpack_from(message)
    echo_types = (
        (ICMPV6_ECHO_REQUEST, ICMPV6_ECHO_REPLY) if ipv6 else (ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY)
    )
    if icmp_type in echo_types:
        return Echo(icmp_type, code, identifier, sequence, message[ECHO_HEADER_LEN:])
    if icmp_type == (ICMPV6_DEST_UNREACH if ipv6 else ICMP_DEST_UNREACH):
        return parse_quoted_request(icmp_type, code, message[ECHO_HEADER_LEN:], ipv6=ipv6)
    return None


def parse_quoted_request(
    icmp_type: int, code: int, quoted: bytes, *, ipv6: bool
) -> EchoError | None:
    """An ICMP error's body (after its 8-byte header: destination unreachable, time
    exceeded) quotes the invoking packet, IP header + start of our request: that
    request's destination, identifier, sequence and quoted payload, or None when the
    quoted packet is no echo request of ours."""
    if ipv6:
        if len(quoted) < IPV6_HEADER_LEN or quoted[0] >> 4 != 6 or quoted[6] != IPPROTO_ICMPV6:
            return None
        destination = socket.inet_ntop(socket.AF_INET6, quoted[24:40])
        inner: bytes | None = quoted[IPV6_HEADER_LEN:]
        request_type = ICMPV6_ECHO_REQUEST
    else:
        inner = _strip_ipv4_header(quoted, IPPROTO_ICMP)
        if inner is None:
            return None
        destination = socket.inet_ntop(socket.AF_INET, quoted[16:20])
        request_type = ICMP_ECHO_REQUEST
    if inner is None or len(inner) < ECHO_HEADER_LEN:
        return None
    inner_type, inner_code, _csum, identifier, sequence = _ECHO_HEADER.unpack_from(inner)
    if inner_type != request_type or inner_code != 0:
        return None
    return EchoError(icmp_type, code, destination, identifier, sequence, inner[ECHO_HEADER_LEN:])
