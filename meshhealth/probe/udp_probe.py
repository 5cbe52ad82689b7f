"""UDP prober: one echo datagram from each of a few source ports, one probe per call.

Each datagram goes out of its own connected socket (a fresh ephemeral source port: a
different 5-tuple, so the datagrams of one probe can take different ECMP paths) and
carries its own cookie; a reply counts only if it echoes that cookie
(meshhealth.probe.udp_echo). Nothing is retried: a datagram without its reply by
`timeout_s` is lost, and the probe's loss says how many were. A connected UDP socket
receives the ICMP port unreachable of its datagram as ECONNREFUSED: counted as refused.

`source_ip` (the agent's NodeIP of the target's family) is bound before connecting, so
the responder sees a registered NodeIP as the source whatever route the kernel picks.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import time

import trio

from meshhealth import defaults, model
from meshhealth.probe.udp_echo import COOKIE_BYTES, echo_request, is_reply_to, udp_result

_RECEIVE_BYTES = 512  # more than any reply: a bigger datagram is not ours anyway


async def udp_probe(
    ip: str,
    port: int = defaults.UDP_ECHO_PORT,
    *,
    source_ports: int = defaults.UDP_PROBE_SOURCE_PORTS,
    timeout_s: float = defaults.PROBE_TIMEOUT_S,
    source_ip: str | None = None,
) -> model.ProbeResult:
    """`source_ports` echo requests to ip:port, each from its own source port; never
    raises for network conditions. ValueError for an `ip` that is not an IP literal."""
    if source_ports < 1:
        raise ValueError(f"source_ports must be >= 1, got {source_ports}")
    address = ipaddress.ip_address(ip)
    family = trio.socket.AF_INET6 if address.version == 6 else trio.socket.AF_INET
    started_at = time.time()
    rtts_s: list[float] = []
    refused = 0
    socks: list[trio.socket.SocketType] = []
    try:
        try:
            for _ in range(source_ports):
                sock = trio.socket.socket(family, trio.socket.SOCK_DGRAM)
                socks.append(sock)
                if source_ip is not None:
                    await sock.bind((source_ip, 0))
                await sock.connect((ip, port))
        except OSError as exc:
            return udp_result(started_at, sent=0, rtts_s=(), error=_text(exc))
        cookies = os.urandom(COOKIE_BYTES * source_ports)

        async def exchange(seq: int, sock: trio.socket.SocketType) -> None:
            nonlocal refused
            request = echo_request(cookies[seq * COOKIE_BYTES : (seq + 1) * COOKIE_BYTES], seq)
            sent_at = trio.current_time()
            try:
                await sock.send(request)
                while True:
                    datagram = await sock.recv(_RECEIVE_BYTES)
                    if is_reply_to(datagram, request):
                        rtts_s.append(trio.current_time() - sent_at)
                        return
            except OSError as exc:
                if exc.errno == errno.ECONNREFUSED:
                    refused += 1
                # anything else: this datagram is lost (its reply never counted)

        with trio.move_on_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for seq, sock in enumerate(socks):
                    nursery.start_soon(exchange, seq, sock)
    finally:
        for sock in socks:
            sock.close()
    return udp_result(started_at, sent=source_ports, rtts_s=rtts_s, refused=refused)


def _text(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
