"""`meshhealth probe --trace TARGET -o json`: the trace document. Pure.

One object: the target, the bounds, whether the target answered, the farthest hop that
answered, and every hop probed (hop 1 first, up to the target or `max_hops`), each with
one entry per echo request: who answered and after how long (null: no answer, `*`).
Built by the CLI (meshhealth/cli/format_trace.py `trace_document`) from the trace's
result (meshhealth/probe/trace.py).
"""

from __future__ import annotations

from typing import TypedDict

TRACE_VERSION = 1


class TraceProbeDocument(TypedDict):
    """One echo request of a hop."""

    address: str | None  # who answered; null: no answer
    rtt_s: float | None  # null: no answer
    kind: str | None  # "time-exceeded" (a router), "reply" (the target), "unreachable"
    note: str  # for "unreachable": why ("host unreachable"), else ""


class TraceHopDocument(TypedDict):
    ttl: int  # the hop: 1 = the first router (or the target on the same link)
    addresses: list[str]  # who answered at this hop, first answer first
    probes: list[TraceProbeDocument]


class TraceDocument(TypedDict):
    version: int
    target: str
    max_hops: int
    count: int  # echo requests per hop
    started_at: float  # unix seconds
    reached: bool  # the target answered
    last_answering_ttl: int | None  # the farthest hop that answered; null: none did
    last_answering_address: str | None
    hops: list[TraceHopDocument]
