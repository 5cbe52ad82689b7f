"""Opening the pinger's raw ICMP sockets: privileges, buffers, kernel-side filters,
and the kernel's receive time stamps (SO_TIMESTAMPNS)."""

from __future__ import annotations

import socket
import struct
import sys

from meshhealth import defaults
from meshhealth.netns import socket_in_netns
from meshhealth.probe import icmp_bpf
from meshhealth.probe.icmp_packet import (
    ICMP_DEST_UNREACH,
    ICMP_ECHO_REPLY,
    ICMPV6_DEST_UNREACH,
    ICMPV6_ECHO_REPLY,
)

PERMISSION_MESSAGE = "ICMP probes need root or CAP_NET_RAW (raw socket: Operation not permitted)"
SOCKET_BUFFER_BYTES = 8 * 1024 * 1024  # bursts of replies from thousands of probes

SOL_RAW = 255
ICMP_FILTER = 1  # linux/icmp.h: a set bit blocks that ICMP type
ICMP6_FILTER = 1  # linux/icmpv6.h: a set bit blocks that ICMPv6 type
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
# asm-generic/socket.h (x86, arm, ...); Python 3.11 does not name it. The control
# message carrying the time stamp has the option's number (SCM_TIMESTAMPNS).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("=qq")  # struct timespec on a 64-bit kernel: tv_sec, tv_nsec
TIMESTAMP_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)  # ancillary buffer: one stamp


class PingerPermissionError(PermissionError):
    """No raw socket: the process lacks root / CAP_NET_RAW."""


def open_raw_socket(
    *, ipv6: bool, netns: str | None, kernel_filter: bool, identifier: int | None = None
) -> socket.socket:
    """A non-blocking raw ICMP (or ICMPv6) socket in `netns` (None: ours).

    With `kernel_filter` the kernel drops every ICMP type but echo reply and
    destination unreachable before they reach us (our own requests on loopback, other
    tools' traffic), and with `identifier` also those that do not carry it (a BPF
    program: meshhealth.probe.icmp_bpf). Raises PingerPermissionError without root /
    CAP_NET_RAW.
    """
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    proto = socket.IPPROTO_ICMPV6 if ipv6 else socket.IPPROTO_ICMP
    try:
        sock = socket_in_netns(netns, family, socket.SOCK_RAW, proto)
    except PermissionError as exc:
        raise PingerPermissionError(PERMISSION_MESSAGE) from exc
    try:
        sock.setblocking(False)
        _set_buffer(sock, socket.SO_RCVBUF, SO_RCVBUFFORCE)
        _set_buffer(sock, socket.SO_SNDBUF, SO_SNDBUFFORCE)
        if kernel_filter:
            _install_filter(sock, ipv6=ipv6)
            if identifier is not None:
                icmp_bpf.attach(sock, icmp_bpf.program(identifier, ipv6=ipv6))
        if ipv6:  # each reply's hop limit as ancillary data: its hop count (hop_count.py)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
    except OSError:
        sock.close()
        raise
    return sock


def _set_buffer(sock: socket.socket, option: int, force_option: int) -> None:
    try:  # root may go beyond net.core.[rw]mem_max
        sock.setsockopt(socket.SOL_SOCKET, force_option, SOCKET_BUFFER_BYTES)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)


def _install_filter(sock: socket.socket, *, ipv6: bool) -> None:
    if ipv6:
        blocked = [0xFFFFFFFF] * 8  # 256 types, one bit each; set = blocked
        for icmp_type in (ICMPV6_ECHO_REPLY, ICMPV6_DEST_UNREACH):
            blocked[icmp_type >> 5] &= ~(1 << (icmp_type & 31))
        sock.setsockopt(socket.IPPROTO_ICMPV6, ICMP6_FILTER, struct.pack("=8I", *blocked))
    else:
        allowed = (1 << ICMP_ECHO_REPLY) | (1 << ICMP_DEST_UNREACH)
        sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("=I", ~allowed & 0xFFFFFFFF))


HOP_LIMIT_SPACE = socket.CMSG_SPACE(4)  # ancillary data room for one IPV6_HOPLIMIT


def hop_limit(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The IPV6_HOPLIMIT in a datagram's ancillary data, None when there is none."""
    for level, kind, data in ancillary:
        if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_HOPLIMIT and len(data) >= 4:
            return int.from_bytes(data[:4], sys.byteorder)
    return None


# linux/in.h and linux/in6.h (not all of them in Python's socket module)
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2  # never fragment; a packet above the path MTU fails with EMSGSIZE
IP_MTU = 14
IPV6_MTU = 24
IPV6_DONTFRAG = getattr(socket, "IPV6_DONTFRAG", 62)


def open_dont_fragment_socket(*, ipv6: bool, netns: str | None) -> socket.socket:
    """A non-blocking raw ICMP (ICMPv6) socket that sends without fragmenting (IPv4:
    IP_MTU_DISCOVER = IP_PMTUDISC_DO, which also sets DF; IPv6: IPV6_DONTFRAG).

    It only sends: its filter blocks every ICMP type, so the replies are read (once) by
    the family's ordinary socket, whose matcher knows every request in flight.
    Raises PingerPermissionError without root / CAP_NET_RAW.
    """
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    proto = socket.IPPROTO_ICMPV6 if ipv6 else socket.IPPROTO_ICMP
    try:
        sock = socket_in_netns(netns, family, socket.SOCK_RAW, proto)
    except PermissionError as exc:
        raise PingerPermissionError(PERMISSION_MESSAGE) from exc
    try:
        sock.setblocking(False)
        _set_buffer(sock, socket.SO_SNDBUF, SO_SNDBUFFORCE)
        if ipv6:
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_DONTFRAG, 1)
            blocked_all = struct.pack("=8I", *([0xFFFFFFFF] * 8))
            sock.setsockopt(socket.IPPROTO_ICMPV6, ICMP6_FILTER, blocked_all)
        else:
            sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
            sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("=I", 0xFFFFFFFF))
    except OSError:
        sock.close()
        raise
    return sock


def route_mtu(ip: str, *, ipv6: bool, netns: str | None) -> int:
    """The MTU the kernel uses toward `ip` (in `netns`): the route's MTU, else its
    interface's (or a path MTU learned from "fragmentation needed"). A UDP socket's
    connect() sends nothing; it only looks the route up. Raises OSError without one."""
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    with socket_in_netns(netns, family, socket.SOCK_DGRAM) as sock:
        sock.connect((ip, 9))
        if ipv6:
            return int(sock.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU))
        return int(sock.getsockopt(socket.IPPROTO_IP, IP_MTU))


def enable_kernel_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp each datagram `sock` receives with its arrival time
    (SO_TIMESTAMPNS, wall clock, nanoseconds); whether it agreed."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def receive_delay_s(ancdata: list[tuple[int, int, bytes]], wall_now: float) -> float:
    """How long ago (seconds, by the wall clock `wall_now`) the kernel received the
    datagram whose control messages are `ancdata`: what to take off the time the reader
    saw it, so an RTT does not count the wait for the receiving task. 0.0 without a
    stamp, or when the wall clock stepped (a negative delay, or one past
    defaults.ICMP_MAX_RECEIVE_DELAY_S). Pure."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            delay = wall_now - (seconds + nanoseconds * 1e-9)
            return delay if 0.0 <= delay <= defaults.ICMP_MAX_RECEIVE_DELAY_S else 0.0
    return 0.0
