"""Which received ICMP datagrams count as answers to our echo probes. Pure: no sockets.

The pinger (meshhealth.probe.icmp) owns the sockets and the waiting; for each family it
keeps one `ReplyMatcher`, registers every echo request it sends (`allocate`, then
`EchoProbe.mark_sent`) and feeds it every datagram received (`match`). The rules live
here, so they are tested without root: a datagram answers request *k* of a probe only
when it is an echo reply (or a destination unreachable quoting the request) with our
identifier, an in-flight sequence, the probed address, the probe's cookie (a quoted
prefix of it for errors), before the request's deadline; the first answer retires the
sequence, so duplicates and late replies count for nothing.
"""

from __future__ import annotations

import functools
import math
import socket
from typing import Any

from meshhealth.model import ProbeResult, ProbeStatus
from meshhealth.probe.hop_count import hops_from_ttl
from meshhealth.probe.icmp_packet import (
    ECHO_HEADER_LEN,
    ECHO_ID_SEQ,
    ICMP_DEST_UNREACH,
    ICMP_ECHO_REPLY,
    ICMPV6_DEST_UNREACH,
    ICMPV6_ECHO_REPLY,
    IPPROTO_ICMP,
    Echo,
    checksum,
    icmp_message,
    parse_icmp,
    payload_sum,
)

SEQUENCES = 1 << 16
ADDRESS_CACHE_SIZE = 16_384  # parsed target addresses kept (a mesh's node + health IPs)

# A probe that ended in a local failure: (status, detail) for its result.
LocalError = tuple[ProbeStatus, str]


class EchoProbe:
    """One probe: `count` echo requests to one address, and what came back for each."""

    __slots__ = (
        "address",
        "batch",
        "cookie",
        "cookie_sum",
        "deadlines",
        "errors",
        "last_deadline",
        "local_error",
        "outstanding",
        "reply_ttl",
        "rtts",
        "send_times",
        "sequences",
        "size_bytes",
        "target",
    )

    def __init__(self, target: str, count: int, cookie: bytes, batch: Any = None) -> None:
        self.target = target  # canonical text form, as recvfrom() reports sources
        self.address = packed_ip(target)  # the same, as an IP header carries it
        self.cookie = cookie
        self.cookie_sum = payload_sum(cookie)  # its share of each request's checksum
        self.batch: Any = batch  # the pinger's: what to wake when this probe's answers are in
        self.sequences: list[int] = []  # allocated so far, released when the probe ends
        self.send_times = [0.0] * count
        self.deadlines = [-math.inf] * count  # -inf until sent: nothing can match early
        self.last_deadline = -math.inf  # of the last request sent (they go in order)
        self.rtts: list[float | None] = [None] * count
        self.errors: list[str] = []
        self.outstanding = 0  # sent, neither answered nor errored yet
        self.local_error: LocalError | None = None  # a send failed: no more requests
        self.size_bytes = 0  # a don't-fragment probe: its IP packets' size
        self.reply_ttl: int | None = None  # TTL (hop limit) of the newest reply, if read

    def mark_sent(self, index: int, now: float, timeout_s: float) -> None:
        """Request `index` left at `now`; an answer counts until `now + timeout_s`."""
        self.send_times[index] = now
        self.deadlines[index] = self.last_deadline = now + timeout_s
        self.outstanding += 1

    def result(self, started_at: float) -> ProbeResult:
        """OK with one RTT per reply, else the local error, UNREACHABLE or TIMEOUT."""
        rtts = tuple([rtt for rtt in self.rtts if rtt is not None])
        if rtts:
            status, detail = ProbeStatus.OK, ""
        elif self.local_error is not None:
            status, detail = self.local_error
        elif self.errors:
            status, detail = ProbeStatus.UNREACHABLE, self.errors[0]
        else:
            status, detail = ProbeStatus.TIMEOUT, ""
        hops = None if self.reply_ttl is None or not rtts else hops_from_ttl(self.reply_ttl)
        sent = len(self.sequences)
        return ProbeResult(
            status,
            started_at,
            rtts,
            sent,
            len(rtts),
            detail,
            self.size_bytes,
            tuple(self.rtts[:sent]),
            hops=hops,
        )


class ReplyMatcher:
    """One family's echo requests in flight (by sequence) and the rules for answers."""

    __slots__ = ("error_type", "identifier", "ipv6", "next_sequence", "reply_type", "waiters")

    def __init__(self, *, ipv6: bool, identifier: int, first_sequence: int = 0) -> None:
        self.ipv6 = ipv6
        self.identifier = identifier
        self.reply_type = ICMPV6_ECHO_REPLY if ipv6 else ICMP_ECHO_REPLY
        self.error_type = ICMPV6_DEST_UNREACH if ipv6 else ICMP_DEST_UNREACH
        self.waiters: dict[int, tuple[EchoProbe, int]] = {}  # sequence -> (probe, index)
        self.next_sequence = first_sequence & 0xFFFF

    @property
    def in_flight(self) -> int:
        return len(self.waiters)

    def allocate(self, probe: EchoProbe, index: int) -> int | None:
        """A sequence number not in flight, registered for (probe, index); None if full."""
        waiters = self.waiters
        if len(waiters) >= SEQUENCES:
            return None
        sequence = self.next_sequence
        while sequence in waiters:
            sequence = (sequence + 1) & 0xFFFF
        self.next_sequence = (sequence + 1) & 0xFFFF
        waiters[sequence] = (probe, index)
        probe.sequences.append(sequence)
        return sequence

    def release(self, probe: EchoProbe) -> None:
        """Forget every request of `probe` still in flight (it has ended)."""
        waiters = self.waiters
        for sequence in probe.sequences:
            entry = waiters.get(sequence)
            if entry is not None and entry[0] is probe:
                del waiters[sequence]

    def match(
        self, data: bytes, source: str, now: float, hop_limit: int | None = None
    ) -> EchoProbe | None:
        """Apply one received datagram (from `source`, at `now`): the probe it answers,
        with that request retired and its RTT or error recorded; None if it counts for
        nothing (see the module docstring). A reply's TTL is read from its IPv4 header,
        or is `hop_limit` (IPv6: from the socket's ancillary data, when given)."""
        message = icmp_message(data, ipv6=self.ipv6)
        if message is None:
            return None
        if message[0] == self.reply_type:  # the hot path: no message object
            identifier, sequence = ECHO_ID_SEQ.unpack_from(message, 4)
            if identifier != self.identifier:
                return None
            entry = self.waiters.get(sequence)
            if entry is None:
                return None  # stray, duplicate, or late after the probe ended
            probe, index = entry
            if (
                now > probe.deadlines[index]  # late (or not sent yet)
                or message[ECHO_HEADER_LEN:] != probe.cookie
                or (source != probe.target and source.partition("%")[0] != probe.target)
            ):
                return None
            probe.rtts[index] = now - probe.send_times[index]
            probe.reply_ttl = hop_limit if self.ipv6 else data[8]
        elif message[0] == self.error_type:  # (our own requests on loopback: neither type)
            error = parse_icmp(message, ipv6=self.ipv6)
            if error is None or isinstance(error, Echo) or error.identifier != self.identifier:
                return None
            sequence = error.sequence
            entry = self.waiters.get(sequence)
            if entry is None:
                return None
            probe, index = entry
            if (
                now > probe.deadlines[index]
                or error.destination != probe.target
                or not probe.cookie.startswith(error.quoted_payload)
            ):
                return None
            probe.errors.append(f"{error.text} from {source.partition('%')[0]}")
        else:
            return None
        del self.waiters[sequence]
        probe.outstanding -= 1
        return probe

    def match_ipv4(self, buffer: bytearray, nbytes: int, now: float) -> EchoProbe | None:
        """`match` for an IPv4 datagram in the first `nbytes` of `buffer` (as
        `recvmsg_into` leaves it), its source read from its IP header, which is where
        recvfrom() takes it from: the same rules, without a bytes object, an address
        tuple and its text per datagram. Anything but an echo reply goes to `match`."""
        if nbytes < 28 or buffer[0] >> 4 != 4 or buffer[9] != IPPROTO_ICMP:
            return None
        start = (buffer[0] & 0x0F) * 4
        if start < 20 or nbytes < start + ECHO_HEADER_LEN:
            return None
        if buffer[start] != ICMP_ECHO_REPLY:
            if buffer[start] != ICMP_DEST_UNREACH:
                return None
            source = socket.inet_ntop(socket.AF_INET, bytes(buffer[12:16]))
            return self.match(bytes(buffer[:nbytes]), source, now)
        identifier, sequence = ECHO_ID_SEQ.unpack_from(buffer, start + 4)
        if identifier != self.identifier:
            return None
        entry = self.waiters.get(sequence)
        if entry is None:
            return None  # stray, duplicate, or late after the probe ended
        probe, index = entry
        if (
            now > probe.deadlines[index]  # late (or not sent yet)
            or buffer[start + ECHO_HEADER_LEN : nbytes] != probe.cookie
            or buffer[12:16] != probe.address
            or checksum(buffer[start:nbytes]) != 0
        ):
            return None
        probe.rtts[index] = now - probe.send_times[index]
        probe.reply_ttl = buffer[8]
        del self.waiters[sequence]
        probe.outstanding -= 1
        return probe


@functools.lru_cache(maxsize=ADDRESS_CACHE_SIZE)
def packed_ip(ip: str) -> bytes:
    """A canonical address (`canonical_ip`'s text) as 4 or 16 bytes."""
    return socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)


@functools.lru_cache(maxsize=ADDRESS_CACHE_SIZE)
def canonical_ip(ip: str) -> tuple[int, str]:
    """(family, the address as recvfrom() spells it); ValueError if not an IP address."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return family, socket.inet_ntop(family, socket.inet_pton(family, ip))
        except (OSError, ValueError):
            continue
    raise ValueError(f"not an IP address: {ip!r}")
