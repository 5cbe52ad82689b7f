"""The UDP echo responder: answers peers' node/udp probes on NodeIP:`--udp-port`.

What it answers is meshhealth.probe.udp_echo's (`echo_reply`: the request with its kind
byte changed, never larger than the request). Before answering, `EchoGate` (pure, time
is an argument) decides whether a datagram may be answered at all, so the responder
cannot be used to reflect or amplify traffic toward a third party:

- a datagram that is not an echo request of an answered size is dropped (`malformed`);
- with `trusted` (the agent's: a registered node's NodeIP), a datagram from any other
  address is dropped (`unregistered`): a forged source must then be a node of the
  cluster, which gets back what it was sent, at most;
- each source address has a token bucket (UDP_ECHO_RATE_PER_S, burst UDP_ECHO_BURST),
  and all sources together one more (UDP_ECHO_TOTAL_RATE_PER_S): past them, `rate`.

Nothing is answered twice and nothing is queued: a dropped datagram is a lost probe for
whoever sent it, which is what a lost datagram means. Cancelling `serve_udp_echo`
closes the socket.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import trio

from meshhealth import defaults
from meshhealth.probe.token_bucket import TokenBuckets
from meshhealth.probe.udp_echo import MAX_DATAGRAM_BYTES, echo_reply

log = logging.getLogger(__name__)

# Why a datagram was not answered (the metric's `reason` label).
REFUSAL_REASONS: Final = ("malformed", "unregistered", "rate")
_ALL: Final = ""  # the key of the bucket every source shares
_RECEIVE_BYTES: Final = MAX_DATAGRAM_BYTES + 1  # one more: an oversized one shows as such


@dataclass(slots=True)
class UdpEchoStats:
    """Counters the agent's metrics read. Mutated only by the responder's task."""

    answered: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # by REFUSAL_REASONS


class EchoGate:
    """Which datagrams get an answer (see the module docstring). Pure."""

    def __init__(
        self,
        *,
        trusted: Callable[[str], bool] | None,
        rate_per_s: float = defaults.UDP_ECHO_RATE_PER_S,
        burst: int = defaults.UDP_ECHO_BURST,
        total_rate_per_s: float = defaults.UDP_ECHO_TOTAL_RATE_PER_S,
        max_sources: int = defaults.UDP_ECHO_MAX_SOURCES,
    ) -> None:
        self._trusted = trusted
        self._per_source = TokenBuckets(rate_per_s=rate_per_s, burst=burst, max_keys=max_sources)
        total_burst = max(int(total_rate_per_s), 1)
        self._total = TokenBuckets(rate_per_s=total_rate_per_s, burst=total_burst, max_keys=1)

    def answer(self, datagram: bytes, source: str, now: float) -> tuple[bytes | None, str]:
        """The reply to send (None: none) and, when none, why (a REFUSAL_REASONS)."""
        reply = echo_reply(datagram)
        if reply is None:
            return None, "malformed"
        if self._trusted is not None and not self._trusted(source):
            return None, "unregistered"
        if not self._per_source.take(source, now) or not self._total.take(_ALL, now):
            return None, "rate"
        return reply, ""


async def serve_udp_echo(
    host: str,
    port: int = defaults.UDP_ECHO_PORT,
    *,
    gate: EchoGate,
    stats: UdpEchoStats | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer echo requests on host:port (port 0: any free one) until cancelled.

    `task_status.started(port)` reports the port bound; bind errors are raised as
    OSError before it, a `host` that is not an IP literal as ValueError."""
    address = ipaddress.ip_address(host)
    family = trio.socket.AF_INET6 if address.version == 6 else trio.socket.AF_INET
    counters = stats if stats is not None else UdpEchoStats()
    with trio.socket.socket(family, trio.socket.SOCK_DGRAM) as sock:
        if family == trio.socket.AF_INET6:
            sock.setsockopt(trio.socket.IPPROTO_IPV6, trio.socket.IPV6_V6ONLY, 1)
        await sock.bind((host, port))
        task_status.started(sock.getsockname()[1])
        while True:
            try:
                datagram, peer = await sock.recvfrom(_RECEIVE_BYTES)
            except OSError as exc:  # an ICMP error for an earlier reply: nothing to do
                log.debug("udp echo on %s: %s", host, exc)
                continue
            reply, reason = gate.answer(datagram, str(peer[0]), trio.current_time())
            if reply is None:
                counters.refused[reason] += 1
                continue
            counters.answered += 1  # before the send: whoever has the reply sees the count
            try:
                await sock.sendto(reply, peer)
            except OSError as exc:  # no route back, buffer full: the probe is lost
                log.debug("udp echo reply to %s: %s", peer[0], exc)
