"""Which received ICMP datagrams answer a traceroute's echo requests. Pure: no sockets.

A trace (meshhealth.probe.trace) sends `count` ICMP (ICMPv6) echo requests per hop,
each with the TTL (hop limit) of its hop, and reads every ICMP message its raw socket
receives. `classify` says what one received message is for the trace; `TraceBook`
keeps the requests in flight (by sequence number) and what came back for each.

A message answers request *s* of the trace only if:

- it is an **echo reply** from the **target** carrying the trace's identifier, sequence
  *s* and its cookie exactly (the target was reached); or
- it is a **time exceeded** (a router on the way: the request's TTL ran out there) or a
  **destination unreachable** error, from any address, quoting our echo request
  (identifier, sequence *s*) **to the target** (routers may quote only 8 bytes of our
  message, so no cookie check);
- it arrives **before the request's deadline** (its send time + timeout), and *s* is
  still in flight: the first answer retires it, duplicates count for nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from meshhealth.probe.icmp_packet import (
    ECHO_HEADER_LEN,
    ECHO_ID_SEQ,
    ICMP_DEST_UNREACH,
    ICMP_ECHO_REPLY,
    ICMP_TIME_EXCEEDED,
    ICMPV6_DEST_UNREACH,
    ICMPV6_ECHO_REPLY,
    ICMPV6_TIME_EXCEEDED,
    EchoError,
    icmp_message,
    parse_icmp,
    parse_quoted_request,
)


class AnswerKind(enum.StrEnum):
    REPLY = "reply"  # echo reply from the target: the trace arrived
    TIME_EXCEEDED = "time-exceeded"  # a router on the way
    UNREACHABLE = "unreachable"  # destination unreachable: the way ends there


@dataclass(frozen=True, slots=True)
class TraceAnswer:
    """What one received message says about one request of the trace."""

    kind: AnswerKind
    sequence: int
    source: str  # who answered (no IPv6 scope)
    note: str = ""  # for UNREACHABLE: why ("host unreachable")


def classify(
    data: bytes, source: str, *, ipv6: bool, identifier: int, target: str, cookie: bytes
) -> TraceAnswer | None:
    """`data` as a raw socket received it (IPv4: with its IP header) from `source`: the
    answer it is to one of the trace's requests, or None if it is none (see the module
    docstring; the sequence is checked by `TraceBook.record`)."""
    message = icmp_message(data, ipv6=ipv6)
    if message is None:
        return None
    source = source.partition("%")[0]
    icmp_type = message[0]
    if icmp_type == (ICMPV6_ECHO_REPLY if ipv6 else ICMP_ECHO_REPLY):
        got_identifier, sequence = ECHO_ID_SEQ.unpack_from(message, 4)
        if (
            got_identifier != identifier
            or source != target
            or message[ECHO_HEADER_LEN:] != cookie
            or message[1] != 0
        ):
            return None
        return TraceAnswer(AnswerKind.REPLY, sequence, source)
    time_exceeded = ICMPV6_TIME_EXCEEDED if ipv6 else ICMP_TIME_EXCEEDED
    unreachable = ICMPV6_DEST_UNREACH if ipv6 else ICMP_DEST_UNREACH
    if icmp_type == time_exceeded:
        if message[1] != 0:  # code 1: fragment reassembly time exceeded, not a hop
            return None
        quoted = parse_quoted_request(icmp_type, 0, message[ECHO_HEADER_LEN:], ipv6=ipv6)
        kind = AnswerKind.TIME_EXCEEDED
    elif icmp_type == unreachable:
        error = parse_icmp(message, ipv6=ipv6)
        quoted = error if isinstance(error, EchoError) else None
        kind = AnswerKind.UNREACHABLE
    else:
        return None
    if quoted is None or quoted.identifier != identifier or quoted.destination != target:
        return None
    if not cookie.startswith(quoted.quoted_payload):
        return None
    note = quoted.text if kind is AnswerKind.UNREACHABLE else ""
    return TraceAnswer(kind, quoted.sequence, source, note)


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """One request of one hop: who answered, after how long (None: no answer)."""

    address: str | None
    rtt_s: float | None
    kind: AnswerKind | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class Hop:
    ttl: int
    probes: tuple[ProbeOutcome, ...]

    @property
    def answered(self) -> bool:
        return any(p.address is not None for p in self.probes)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Who answered at this hop, in the order of the first answer of each."""
        seen: dict[str, None] = {}
        for p in self.probes:
            if p.address is not None:
                seen.setdefault(p.address)
        return tuple(seen)

    def reaches(self, kinds: frozenset[AnswerKind]) -> bool:
        return any(p.kind in kinds for p in self.probes)


_ENDS = frozenset({AnswerKind.REPLY, AnswerKind.UNREACHABLE})


class TraceBook:
    """The requests of one trace: sent (by sequence), answered, and the hops they make."""

    __slots__ = ("_answers", "_count", "_deadlines", "_sent", "_slots")

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self._count = count
        self._slots: dict[int, tuple[int, int]] = {}  # sequence -> (ttl, index)
        self._sent: dict[tuple[int, int], float] = {}
        self._deadlines: dict[tuple[int, int], float] = {}
        self._answers: dict[tuple[int, int], ProbeOutcome] = {}

    @staticmethod
    def sequence(ttl: int, index: int, count: int) -> int:
        """The sequence number of request `index` of hop `ttl` (unique in a trace)."""
        return ((ttl - 1) * count + index) & 0xFFFF

    def mark_sent(self, ttl: int, index: int, now: float, timeout_s: float) -> int:
        """Request `index` of hop `ttl` left at `now`; returns its sequence number."""
        sequence = self.sequence(ttl, index, self._count)
        self._slots[sequence] = (ttl, index)
        self._sent[(ttl, index)] = now
        self._deadlines[(ttl, index)] = now + timeout_s
        return sequence

    def record(self, answer: TraceAnswer, now: float) -> bool:
        """Apply an answer received at `now`; False if it counts for nothing (unknown
        or retired sequence, late)."""
        slot = self._slots.get(answer.sequence)
        if slot is None or slot in self._answers or now > self._deadlines[slot]:
            return False
        rtt = max(0.0, now - self._sent[slot])
        self._answers[slot] = ProbeOutcome(answer.source, rtt, answer.kind, answer.note)
        return True

    def end_ttl(self) -> int | None:
        """The lowest hop where the way ends (the target answered, or a router said
        unreachable), None while none has."""
        ends = [ttl for (ttl, _), outcome in self._answers.items() if outcome.kind in _ENDS]
        return min(ends) if ends else None

    def settled(self, ttls: range) -> bool:
        """Nothing more to wait for among `ttls`: every request up to the end (or of
        every hop sent, without an end) is answered."""
        end = self.end_ttl()
        last = ttls.stop - 1 if end is None else min(end, ttls.stop - 1)
        return all(
            (ttl, i) in self._answers
            for ttl in range(ttls.start, last + 1)
            for i in range(self._count)
            if (ttl, i) in self._sent
        )

    def hops(self, ttls: range) -> list[Hop]:
        """The hops of `ttls` up to the end (if reached), each request's outcome."""
        end = self.end_ttl()
        out = []
        for ttl in ttls:
            if end is not None and ttl > end:
                break
            probes = tuple(
                self._answers.get((ttl, i), ProbeOutcome(None, None, None))
                for i in range(self._count)
                if (ttl, i) in self._sent
            )
            out.append(Hop(ttl, probes))
        return out
