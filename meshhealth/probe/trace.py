"""A traceroute on our own raw ICMP socket (no subprocess): which hop answers on the way.

    result = await trace("10.77.16.3", max_hops=30, count=3, timeout_s=1.0)
    for hop in result.hops: ...            # probe.trace_match.Hop: ttl, per-request outcome

ICMP (ICMPv6) echo requests, `count` per hop, each sent with its hop's TTL (IP_TTL;
IPv6: IPV6_UNICAST_HOPS, set per request) on a raw socket of the trace's own (never
the pinger's: it filters what it reads). Routers whose hop the TTL ends at answer "time
exceeded", the target answers the echo; `trace_match` (pure) says which received
message answers which request.

Hops go out in windows of WINDOW_HOPS (like traceroute's 16 simultaneous probes): every
request of the window at once, then the answers are read until every request up to the
end of the way is answered or `timeout_s` after the last send. The trace ends at the
first hop where the target answered (or a router said "unreachable"), else after
`max_hops`.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass

import trio

from meshhealth.probe.icmp_match import canonical_ip
from meshhealth.probe.icmp_packet import (
    ICMP_DEST_UNREACH,
    ICMP_ECHO_REPLY,
    ICMP_TIME_EXCEEDED,
    ICMPV6_DEST_UNREACH,
    ICMPV6_ECHO_REPLY,
    ICMPV6_TIME_EXCEEDED,
    build_echo_request,
)
from meshhealth.probe.icmp_socket import (
    ICMP6_FILTER,
    ICMP_FILTER,
    SOL_RAW,
    TIMESTAMP_CMSG_SPACE,
    enable_kernel_timestamps,
    open_raw_socket,
    receive_delay_s,
)
from meshhealth.probe.trace_match import Hop, TraceBook, classify

WINDOW_HOPS = 16  # hops whose requests are in flight at once
MAX_HOPS_LIMIT = 64  # the most `max_hops` may be
MAX_COUNT = 10  # the most requests per hop
COOKIE_BYTES = 16
MAX_DATAGRAM = 65_536
IPV6_UNICAST_HOPS = getattr(socket, "IPV6_UNICAST_HOPS", 16)


@dataclass(frozen=True, slots=True)
class TraceResult:
    target: str
    max_hops: int
    count: int
    started_at: float  # unix seconds
    hops: tuple[Hop, ...]  # hop 1 first, up to the end of the way or max_hops

    @property
    def reached(self) -> bool:
        """The target itself answered (at the last hop)."""
        return bool(self.hops) and any(
            p.address == self.target for p in self.hops[-1].probes if p.kind is not None
        )

    @property
    def last_answering(self) -> Hop | None:
        """The farthest hop that answered at all."""
        return next((h for h in reversed(self.hops) if h.answered), None)


def check_bounds(max_hops: int, count: int) -> None:
    """ValueError (for users) when `max_hops` or `count` is out of bounds."""
    if not 1 <= max_hops <= MAX_HOPS_LIMIT:
        raise ValueError(f"max hops must be 1..{MAX_HOPS_LIMIT}, got {max_hops}")
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"requests per hop must be 1..{MAX_COUNT}, got {count}")


def _install_filter(sock: socket.socket, *, ipv6: bool) -> None:
    """Let the kernel pass only echo replies, time exceeded and destination unreachable."""
    if ipv6:
        blocked = [0xFFFFFFFF] * 8
        for icmp_type in (ICMPV6_ECHO_REPLY, ICMPV6_TIME_EXCEEDED, ICMPV6_DEST_UNREACH):
            blocked[icmp_type >> 5] &= ~(1 << (icmp_type & 31))
        sock.setsockopt(socket.IPPROTO_ICMPV6, ICMP6_FILTER, struct.pack("=8I", *blocked))
    else:
        allowed = (1 << ICMP_ECHO_REPLY) | (1 << ICMP_TIME_EXCEEDED) | (1 << ICMP_DEST_UNREACH)
        sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("=I", ~allowed & 0xFFFFFFFF))


async def trace(
    ip: str,
    *,
    max_hops: int = 30,
    count: int = 3,
    timeout_s: float = 1.0,
    netns: str | None = None,
) -> TraceResult:
    """Trace the way to `ip` (an IP address). Raises ValueError for a bad address or
    bounds, icmp_socket.PingerPermissionError without root / CAP_NET_RAW, OSError when
    a request cannot be sent (no route)."""
    family, target = canonical_ip(ip)
    check_bounds(max_hops, count)
    ipv6 = family == socket.AF_INET6
    sock = open_raw_socket(ipv6=ipv6, netns=netns, kernel_filter=False)
    started_at = time.time()
    with sock:
        _install_filter(sock, ipv6=ipv6)
        enable_kernel_timestamps(sock)
        book = TraceBook(count)
        identifier = int.from_bytes(os.urandom(2), "big")
        cookie = os.urandom(COOKIE_BYTES)

        def read_answers() -> None:
            """Every datagram waiting, each timed by the kernel at its arrival (so a
            window's RTTs do not count sending its other requests or reading other
            answers)."""
            while True:
                try:
                    data, ancillary, _flags, address = sock.recvmsg(
                        MAX_DATAGRAM, TIMESTAMP_CMSG_SPACE
                    )
                except (BlockingIOError, InterruptedError):
                    return
                wall_now = time.time()
                arrived = wall_now - receive_delay_s(ancillary, wall_now)
                answer = classify(
                    data,
                    str(address[0]),
                    ipv6=ipv6,
                    identifier=identifier,
                    target=target,
                    cookie=cookie,
                )
                if answer is not None:
                    book.record(answer, arrived)

        for first in range(1, max_hops + 1, WINDOW_HOPS):
            window = range(first, min(first + WINDOW_HOPS, max_hops + 1))
            deadline = 0.0
            for ttl in window:
                if ipv6:
                    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_UNICAST_HOPS, ttl)
                else:
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
                for index in range(count):
                    sequence = book.mark_sent(ttl, index, time.time(), timeout_s)
                    packet = build_echo_request(
                        ipv6=ipv6, identifier=identifier, sequence=sequence, payload=cookie
                    )
                    await _send(sock, packet, target)
                    deadline = trio.current_time() + timeout_s
            with trio.move_on_at(deadline):
                while not book.settled(window):
                    await trio.lowlevel.wait_readable(sock)
                    read_answers()
            if book.end_ttl() is not None:
                break
    hops = book.hops(range(1, max_hops + 1))
    return TraceResult(target, max_hops, count, started_at, tuple(hops))


async def _send(sock: socket.socket, packet: bytes, target: str) -> None:
    while True:
        try:
            sock.sendto(packet, (target, 0))
            return
        except (BlockingIOError, InterruptedError):
            await trio.lowlevel.wait_writable(sock)
