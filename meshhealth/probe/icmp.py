"""The ICMP prober: one raw socket per address family, shared by every probe.

    async with open_pinger(netns=None) as pinger:
        result = await pinger.ping("10.0.0.2")                    # model.ProbeResult
        results = await pinger.ping_batch(["10.0.0.2", "::1"])    # one per address

Each family's socket has one receiver task that feeds every datagram to that family's
`ReplyMatcher` (meshhealth.probe.icmp_match: which datagrams count, tested without
root). A probe sends `count` requests `interval_s` apart, each with its own deadline, so
a dead target costs one timeout and stalls nobody. `ping_batch` runs many probes in the
calling task (one park per send step; `ping` is a batch of one); don't-fragment probes
(`df_sizes`) go out through a send-only DF socket and are answered on the ordinary one.
RTTs end at the kernel's receive time stamp (SO_TIMESTAMPNS). Why the per-packet path is
shaped as it is: docs/performance.md, "Probe engine".
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio

from meshhealth import defaults
from meshhealth.model import ProbeResult, ProbeStatus
from meshhealth.probe.icmp_match import EchoProbe, LocalError, ReplyMatcher, canonical_ip
from meshhealth.probe.icmp_packet import build_echo_request, echo_request_v4
from meshhealth.probe.icmp_parking import Batch, BatchParking
from meshhealth.probe.icmp_payload import (
    COOKIE_BYTES,
    CookiePool,
    RouteMtus,
    dont_fragment_payload,
)
from meshhealth.probe.icmp_socket import (
    HOP_LIMIT_SPACE,
    TIMESTAMP_CMSG_SPACE,
    enable_kernel_timestamps,
    hop_limit,
    open_dont_fragment_socket,
    open_raw_socket,
    receive_delay_s,
    route_mtu,
)

log = logging.getLogger(__name__)

RECV_BATCH = 256  # datagrams handled per wake-up before letting other tasks run
MAX_DATAGRAM = 65_536  # an IPv4 datagram or an ICMPv6 message: up to 65,535 bytes
# Let the kernel drop ICMP types we never use, and replies and errors without our
# identifier (icmp_bpf). The matcher checks both anyway (tests turn this off to prove it).
KERNEL_ICMP_FILTER = True
TOO_MANY_IN_FLIGHT = "too many ICMP requests in flight"

# EMSGSIZE: a don't-fragment request above the MTU the kernel knows for the route.
_UNREACHABLE_ERRNOS = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EMSGSIZE})


class _FamilySocket:
    """A raw socket of one family and its matcher."""

    __slots__ = ("df_sock", "ipv6", "matcher", "sock", "stamped")

    def __init__(self, sock: socket.socket, *, ipv6: bool, identifier: int) -> None:
        self.sock = sock
        # The kernel stamps each reply with its arrival (SO_TIMESTAMPNS): RTTs without
        # the wait for the receiver task, as fping measures them.
        self.stamped = enable_kernel_timestamps(sock)
        # Sends the don't-fragment probes (opened on first use); their replies come in
        # through `sock`, matched by the one matcher.
        self.df_sock: socket.socket | None = None
        self.ipv6 = ipv6
        first = int.from_bytes(os.urandom(2), "big")
        self.matcher = ReplyMatcher(ipv6=ipv6, identifier=identifier, first_sequence=first)


class Pinger:
    """Shared ICMP prober; get one from `open_pinger()`."""

    def __init__(self, nursery: trio.Nursery, *, netns: str | None = None) -> None:
        self._nursery = nursery
        self._netns = netns
        self.identifier = int.from_bytes(os.urandom(2), "big")
        self._sockets: dict[int, _FamilySocket] = {}
        self._now = trio.lowlevel.current_clock().current_time  # trio.current_time, direct
        # Where batches wait for replies and deadlines (its timer task: open_pinger).
        self.parking = BatchParking(self._now)
        self._park = self.parking.park
        self._cookies = CookiePool()
        self._route_mtus = RouteMtus(
            lambda ip, ipv6: route_mtu(ip, ipv6=ipv6, netns=netns), self._now
        )

    @property
    def in_flight(self) -> int:
        """Echo requests currently waiting for a reply (all families)."""
        return sum(fs.matcher.in_flight for fs in self._sockets.values())

    def open_socket_for(self, ip: str) -> None:
        """Open the raw socket for `ip`'s family now (it is otherwise opened on first ping).

        Raises PingerPermissionError without root / CAP_NET_RAW, ValueError for a bad IP.
        """
        self._socket_for(canonical_ip(ip)[0])

    async def ping(
        self,
        ip: str,
        *,
        count: int = defaults.ICMP_COUNT,
        interval_s: float = defaults.ICMP_INTERVAL_S,
        timeout_s: float = defaults.PROBE_TIMEOUT_S,
    ) -> ProbeResult:
        """Send `count` echo requests to `ip`, `interval_s` apart; each reply must come
        within `timeout_s` of its request. Returns OK with one RTT per reply, or
        TIMEOUT / UNREACHABLE (ICMP error, no route) / ERROR (local failure, in detail).

        Raises ValueError for an invalid IP or count, PingerPermissionError without
        privileges, trio.ClosedResourceError after the pinger was closed.
        """
        canonical_ip(ip)  # a bad address raises here (a batch reports it as ERROR)
        (result,) = await self.ping_batch(
            (ip,), count=count, interval_s=interval_s, timeout_s=timeout_s
        )
        return result

    async def ping_batch(
        self,
        ips: Sequence[str],
        *,
        count: int = defaults.ICMP_COUNT,
        interval_s: float = defaults.ICMP_INTERVAL_S,
        timeout_s: float | Sequence[float] = defaults.PROBE_TIMEOUT_S,
        on_result: Callable[[int, ProbeResult], None] | None = None,
        df_sizes: Sequence[int] | None = None,
    ) -> list[ProbeResult]:
        """`ping` every address of `ips` in this one task; results in the same order.

        `df_sizes` (one per address) makes probes don't-fragment probes: 0 for an
        ordinary probe, N for IP packets of N bytes (the cookie padded with zeros) sent
        with DF set (IPv6: IPV6_DONTFRAG), MTU_PROBE_AUTO for the MTU of the route to the
        address. A reply must echo the whole payload; a request the kernel refuses as
        too big (EMSGSIZE) or a "fragmentation needed" error makes it UNREACHABLE. Its
        result carries the size (`size_bytes`).

        `timeout_s` is one timeout for all or one per address. Every probe keeps the
        contract of `ping`: its own deadlines, its own result, which is final as soon as
        all its requests are answered or its last deadline has passed; `on_result(i,
        result)` (if given) is called then, from this task. An address that is not an IP
        address gets an ERROR result at once. Raises ValueError for a bad count or
        timeouts, PingerPermissionError without privileges, trio.ClosedResourceError
        after the pinger was closed.
        """
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        timeouts = (
            [float(timeout_s)] * len(ips)
            if isinstance(timeout_s, int | float)
            else [float(t) for t in timeout_s]
        )
        if len(timeouts) != len(ips):
            raise ValueError(f"{len(timeouts)} timeouts for {len(ips)} addresses")
        if df_sizes is not None and len(df_sizes) != len(ips):
            raise ValueError(f"{len(df_sizes)} don't-fragment sizes for {len(ips)} addresses")
        started_at = time.time()
        batch = Batch()
        results: list[ProbeResult | None] = [None] * len(ips)
        probes: list[tuple[int, EchoProbe, _FamilySocket, float]] = []
        sockets: dict[int, _FamilySocket] = {}
        cookies = self._cookies.take(len(ips))
        bad = False
        for i, ip in enumerate(ips):
            try:
                family, target = canonical_ip(ip)
            except ValueError as exc:
                results[i] = ProbeResult(ProbeStatus.ERROR, started_at, sent=0, detail=str(exc))
                bad = True
                continue
            fs = sockets.get(family) or sockets.setdefault(family, self._socket_for(family))
            cookie = cookies[i * COOKIE_BYTES : (i + 1) * COOKIE_BYTES]
            size = 0 if df_sizes is None else df_sizes[i]
            if size:
                try:
                    cookie, size = self._dont_fragment_payload(fs, target, cookie, size)
                except (OSError, ValueError) as exc:
                    detail = str(exc) or type(exc).__name__
                    results[i] = ProbeResult(ProbeStatus.ERROR, started_at, sent=0, detail=detail)
                    bad = True
                    continue
            probe = EchoProbe(target, count, cookie, batch)
            probe.size_bytes = size
            probes.append((i, probe, fs, timeouts[i]))
        if on_result is not None and bad:
            for i, result in enumerate(results):
                if result is not None:
                    on_result(i, result)
        try:
            await self._send_all(batch, probes, count, interval_s)
            batch.sending = False
            # Each probe ends when all its requests are answered or at its last
            # deadline; the receiver wakes the batch when one is answered in full.
            pending = sorted(probes, key=lambda entry: entry[1].last_deadline)
            now = self._now
            parked = count > 1
            while pending:
                now_s = now()
                waiting = []
                for entry in pending:
                    i, probe, fs, _ = entry
                    if probe.outstanding:
                        if probe.last_deadline > now_s:
                            waiting.append(entry)
                            continue
                        fs.matcher.release(probe)  # (answered requests are retired)
                    result = results[i] = probe.result(started_at)
                    if on_result is not None:
                        on_result(i, result)
                pending = waiting
                if pending:
                    await self._park(batch, pending[0][1].last_deadline)
                    parked = True
            if not parked:  # (a batch that sent nothing) still a checkpoint
                await trio.lowlevel.checkpoint()
        finally:
            for i, probe, fs, _ in probes:
                if results[i] is None:  # cancelled, or the pinger closed
                    fs.matcher.release(probe)
        return [r for r in results if r is not None]

    async def _send_all(
        self,
        batch: Batch,
        probes: list[tuple[int, EchoProbe, _FamilySocket, float]],
        count: int,
        interval_s: float,
    ) -> None:
        """Request k of every probe, in one go, every `interval_s` from the start."""
        now = self._now
        start = now()
        identifier = self.identifier
        for index in range(count):
            if index:
                await self._park(batch, start + index * interval_s)
            # The hot loop: no await unless the socket buffer is full, the IPv4
            # checksum from the cookie's precomputed share (icmp_packet.echo_request_v4).
            for _, probe, fs, probe_timeout_s in probes:
                if probe.local_error is not None:
                    continue
                sequence = fs.matcher.allocate(probe, index)
                if sequence is None:
                    probe.local_error = (ProbeStatus.ERROR, TOO_MANY_IN_FLIGHT)
                    continue
                if fs.ipv6:
                    packet = build_echo_request(
                        ipv6=True, identifier=identifier, sequence=sequence, payload=probe.cookie
                    )
                else:
                    packet = echo_request_v4(identifier, sequence, probe.cookie, probe.cookie_sum)
                address = (probe.target, 0)
                sock = fs.df_sock if probe.size_bytes else fs.sock
                assert sock is not None  # (opened with the probe's payload)
                # The send time is taken before the send, as fping does: the reply's
                # kernel time stamp (on loopback, stamped inside sendto) is after it.
                sent_at = now()
                try:
                    sock.sendto(packet, address)
                except OSError as exc:
                    probe.local_error = await self._send_slowly(sock, packet, address, exc)
                    if probe.local_error is not None:
                        continue
                    sent_at = now()  # (sent after waiting for buffer space)
                probe.send_times[index] = sent_at
                probe.deadlines[index] = probe.last_deadline = sent_at + probe_timeout_s
                probe.outstanding += 1  # (EchoProbe.mark_sent, inlined)

    # --- sending -----------------------------------------------------------------------
    def _dont_fragment_payload(
        self, fs: _FamilySocket, target: str, cookie: bytes, size: int
    ) -> tuple[bytes, int]:
        """The payload of a don't-fragment probe of `size` bytes (MTU_PROBE_AUTO: the
        route's MTU) to `target`: its cookie padded with zeros; and the size. Opens the
        family's don't-fragment socket on first use."""
        if size == defaults.MTU_PROBE_AUTO:
            mtu = self._route_mtus.get(target, ipv6=fs.ipv6)
            size = min(mtu, defaults.MTU_PROBE_AUTO_MAX_BYTES)
        payload, size = dont_fragment_payload(cookie, size, ipv6=fs.ipv6)
        if fs.df_sock is None:
            fs.df_sock = open_dont_fragment_socket(ipv6=fs.ipv6, netns=self._netns)
        return payload, size

    async def _send_slowly(
        self, sock: socket.socket, packet: bytes, address: tuple[str, int], exc: OSError
    ) -> LocalError | None:
        """After sendto failed: wait while the buffer is full; report real errors."""
        while isinstance(exc, BlockingIOError | InterruptedError):
            await trio.lowlevel.wait_writable(sock)
            try:
                sock.sendto(packet, address)
            except OSError as again:
                exc = again
            else:
                return None
        detail = f"send to {address[0]}: {os.strerror(exc.errno) if exc.errno else exc}"
        if exc.errno in _UNREACHABLE_ERRNOS:
            return ProbeStatus.UNREACHABLE, detail
        return ProbeStatus.ERROR, detail

    # --- receiving ---------------------------------------------------------------------
    def _socket_for(self, family: int) -> _FamilySocket:
        if self.parking.closed:
            raise trio.ClosedResourceError("the pinger is closed")
        fs = self._sockets.get(family)
        if fs is None:
            ipv6 = family == socket.AF_INET6
            sock = open_raw_socket(
                ipv6=ipv6,
                netns=self._netns,
                kernel_filter=KERNEL_ICMP_FILTER,
                identifier=self.identifier,
            )
            fs = self._sockets[family] = _FamilySocket(sock, ipv6=ipv6, identifier=self.identifier)
            name = f"icmp-receiver-v{6 if ipv6 else 4}"
            self._nursery.start_soon(self._receive_loop, fs, name=name)
        return fs

    async def _receive_loop(self, fs: _FamilySocket) -> None:
        """Read every datagram (until EAGAIN, at most RECV_BATCH per wake-up) into one
        preallocated buffer with `recvmsg_into` and match it (IPv4: the source from the
        IP header; IPv6, no header on a raw socket: from the address, and the reply's hop
        limit from the ancillary data). A datagram's
        arrival is the kernel's time stamp (`fs.stamped`), moved onto the pinger's
        clock: the pinger's clock now, less how long ago (wall clock) the kernel
        received it; without a stamp, the pinger's clock now."""
        sock = fs.sock
        recvmsg_into = sock.recvmsg_into
        buffer = bytearray(MAX_DATAGRAM)
        buffers = [buffer]
        ancillary = (TIMESTAMP_CMSG_SPACE if fs.stamped else 0) + (
            HOP_LIMIT_SPACE if fs.ipv6 else 0
        )
        ipv6 = fs.ipv6
        match = fs.matcher.match
        match_ipv4 = fs.matcher.match_ipv4
        now = self._now
        wall = time.time
        wake = self.parking.wake
        probe: EchoProbe | None = None
        batch: Batch | None = None
        while True:
            probe = batch = None  # hold no probe while asleep
            await trio.lowlevel.wait_readable(sock)
            for _ in range(RECV_BATCH):
                try:
                    nbytes, ancdata, _, address = recvmsg_into(buffers, ancillary)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # e.g. ENOBUFS: nothing to do but carry on
                    log.warning("icmp: receive failed: %s", exc)
                    break
                if ancdata:  # the wall clock first: a pause between the two readings
                    # can only make the arrival later, never earlier than the send
                    wall_now = wall()
                    arrived = now() - receive_delay_s(ancdata, wall_now)
                else:
                    arrived = now()
                if ipv6:
                    limit = hop_limit(ancdata)
                    probe = match(bytes(buffer[:nbytes]), address[0], arrived, limit)
                else:
                    probe = match_ipv4(buffer, nbytes, arrived)
                if probe is not None and not probe.outstanding:
                    batch = probe.batch
                    if not batch.sending:
                        wake(batch)  # a probe of it is answered in full

    def _close(self) -> None:
        for fs in self._sockets.values():
            for sock in (fs.sock, fs.df_sock):
                if sock is not None:
                    trio.lowlevel.notify_closing(sock)  # a sender waiting for buffer space
                    sock.close()
        self._sockets.clear()
        self.parking.close()  # batches of other tasks: let them go


@asynccontextmanager
async def open_pinger(*, netns: str | None = None) -> AsyncIterator[Pinger]:
    """A Pinger whose sockets live in network namespace `netns` (None: ours).

    Owns a nursery for its receiver and timer tasks; on exit they are cancelled and the
    sockets closed. Pings still running in other tasks then fail with ClosedResourceError.
    """
    pinger: Pinger | None = None
    try:
        async with trio.open_nursery() as nursery:
            pinger = Pinger(nursery, netns=netns)
            nursery.start_soon(pinger.parking.run_timers, name="icmp-timer")
            try:
                yield pinger
            finally:
                nursery.cancel_scope.cancel()
    finally:
        if pinger is not None:
            pinger._close()
