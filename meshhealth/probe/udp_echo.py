"""The UDP echo protocol: the datagrams of the node/udp probe and their rules. Pure.

    request = echo_request(cookie, seq)            # the prober, one per source port
    reply = echo_reply(datagram)                   # the responder: bytes or None (drop)
    if is_reply_to(datagram, request): ...         # the prober: this reply echoes that
    result = udp_result(started_at, sent=4, rtts_s=(...), refused=0)

A datagram is `MAGIC` (4 bytes, the version in its last byte), one kind byte (request,
reply), the sequence (2 bytes, big-endian: the datagram's place among the probe's source
ports) and a cookie of COOKIE_BYTES unpredictable bytes; a request may carry padding up
to MAX_DATAGRAM_BYTES. A reply is the request with the kind byte changed: never larger
than what was asked (no amplification), and it echoes the cookie, so a reply counts
only for the one datagram that carried it (no stray or forged answer, no retry).

A probe is OK when every datagram it sent came back (each from its own source port,
so they can take different ECMP paths): a lost datagram is a failure of the path with
its loss counted, because UDP has no retransmission to hide it. An ICMP port unreachable
for a datagram (the target has no UDP responder, or a firewall rejects) is `refused`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from meshhealth.model import ProbeResult, ProbeStatus

MAGIC: Final = b"MHU\x01"
KIND_REQUEST: Final = 0x01
KIND_REPLY: Final = 0x02
COOKIE_BYTES: Final = 16
_HEAD = struct.Struct("!4sBH")  # magic, kind, sequence
HEADER_BYTES: Final = _HEAD.size
MIN_DATAGRAM_BYTES: Final = HEADER_BYTES + COOKIE_BYTES  # 23: what a prober sends
# The largest request answered: a prober sends MIN_DATAGRAM_BYTES; anything bigger than
# this is dropped, so the responder never sends much whatever it is asked.
MAX_DATAGRAM_BYTES: Final = 64
MAX_SEQUENCE: Final = 0xFFFF
_KIND_AT: Final = len(MAGIC)


def echo_request(cookie: bytes, seq: int) -> bytes:
    """The request datagram carrying `cookie` (COOKIE_BYTES) as datagram `seq`."""
    if len(cookie) != COOKIE_BYTES:
        raise ValueError(f"a cookie is {COOKIE_BYTES} bytes, got {len(cookie)}")
    if not 0 <= seq <= MAX_SEQUENCE:
        raise ValueError(f"sequence {seq} is outside 0..{MAX_SEQUENCE}")
    return _HEAD.pack(MAGIC, KIND_REQUEST, seq) + cookie


def echo_reply(datagram: bytes) -> bytes | None:
    """What the responder sends back for `datagram`: the same bytes with the kind byte
    set to reply; None (send nothing) for anything that is not a request of a size it
    answers."""
    if not MIN_DATAGRAM_BYTES <= len(datagram) <= MAX_DATAGRAM_BYTES:
        return None
    if datagram[:_KIND_AT] != MAGIC or datagram[_KIND_AT] != KIND_REQUEST:
        return None
    return datagram[:_KIND_AT] + bytes((KIND_REPLY,)) + datagram[_KIND_AT + 1 :]


def is_reply_to(datagram: bytes, request: bytes) -> bool:
    """Whether `datagram` is the reply to `request`: same length, reply kind, and the
    same sequence, cookie and padding."""
    return (
        len(datagram) == len(request)
        and datagram[:_KIND_AT] == MAGIC
        and datagram[_KIND_AT] == KIND_REPLY
        and datagram[_KIND_AT + 1 :] == request[_KIND_AT + 1 :]
    )


def udp_result(
    started_at: float,
    *,
    sent: int,
    rtts_s: Sequence[float],
    refused: int = 0,
    error: str = "",
) -> ProbeResult:
    """One probe's result from its datagrams: `sent` went out, `rtts_s` has one RTT per
    matched reply, `refused` were answered with ICMP port unreachable; `error` is a
    local failure (no socket) that stopped the probe. See the module docstring."""
    received = len(rtts_s)
    if error:
        status, detail = ProbeStatus.ERROR, error
    elif sent > 0 and received >= sent:
        status, detail = ProbeStatus.OK, ""
    elif refused > 0 and received == 0:
        status, detail = ProbeStatus.REFUSED, "ICMP port unreachable"
    else:
        status = ProbeStatus.TIMEOUT
        detail = f"{sent - received} of {sent} datagrams lost" if received else ""
    return ProbeResult(
        status=status,
        started_at=started_at,
        rtts_s=tuple(rtts_s),
        sent=sent,
        received=received,
        detail=detail,
    )
