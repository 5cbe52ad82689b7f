"""Text output of `meshhealth probe --trace` (pure), as traceroute prints it::

    trace to 10.77.16.3, 30 hops max, 3 probes per hop
     1  10.77.0.254  0.081 ms  0.044 ms  0.040 ms
     2  10.77.16.3  0.120 ms  0.091 ms  0.088 ms

A hop whose requests got no answer shows `*` per request; one that several routers
answered names each before its times. When the target never answered, the silent hops
after the last answering one are one line, and the last line says where the trace
stops::

     1  10.77.0.254  0.081 ms  0.044 ms  0.040 ms
     2-30  * * *
    stops after 10.77.0.254 (hop 1): no answer from hop 2 on
"""

from __future__ import annotations

from meshhealth.documents.trace import TRACE_VERSION, TraceDocument, TraceHopDocument
from meshhealth.probe.trace import TraceResult
from meshhealth.probe.trace_match import AnswerKind, Hop
from meshhealth.terminal_text import escape

_UNREACHABLE_MARK = "!"


def _hop_text(hop: Hop) -> str:
    words: list[str] = []
    shown: str | None = None
    for probe in hop.probes:
        if probe.address is None or probe.rtt_s is None:
            words.append("*")
            continue
        if probe.address != shown:
            words.append(escape(probe.address))
            shown = probe.address
        time = f"{probe.rtt_s * 1000:.3f} ms"
        if probe.kind is AnswerKind.UNREACHABLE:
            time += f" {_UNREACHABLE_MARK}{escape(probe.note or 'unreachable')}"
        words.append(time)
    return f"{hop.ttl:>2}  " + "  ".join(words)


def format_trace_text(result: TraceResult) -> str:
    lines = [
        f"trace to {escape(result.target)}, {result.max_hops} hops max, "
        f"{result.count} probes per hop"
    ]
    last = result.last_answering
    hops = list(result.hops)
    silent_from = None if last is None else last.ttl + 1
    if result.reached or not hops:
        silent_from = None
    elif last is None:
        silent_from = 1
    for hop in hops:
        if silent_from is not None and hop.ttl >= silent_from:
            break
        lines.append(_hop_text(hop))
    if silent_from is not None and silent_from <= hops[-1].ttl:
        stars = " ".join(["*"] * result.count)
        span = f"{silent_from}" if silent_from == hops[-1].ttl else f"{silent_from}-{hops[-1].ttl}"
        lines.append(f"{span:>2}  {stars}")
    if not result.reached:
        if last is None:
            lines.append("no answer from any hop")
        elif last.reaches(frozenset({AnswerKind.UNREACHABLE})):
            lines.append(f"stops at {escape(last.addresses[0])} (hop {last.ttl}): unreachable")
        elif last.ttl == hops[-1].ttl:
            lines.append(f"{escape(result.target)} not reached in {result.max_hops} hops")
        else:
            lines.append(
                f"stops after {escape(last.addresses[0])} (hop {last.ttl}): "
                f"no answer from hop {last.ttl + 1} on"
            )
    return "\n".join(lines)


def _hop_document(hop: Hop) -> TraceHopDocument:
    return {
        "ttl": hop.ttl,
        "addresses": list(hop.addresses),
        "probes": [
            {
                "address": p.address,
                "rtt_s": p.rtt_s,
                "kind": None if p.kind is None else p.kind.value,
                "note": p.note,
            }
            for p in hop.probes
        ],
    }


def trace_document(result: TraceResult) -> TraceDocument:
    last = result.last_answering
    return {
        "version": TRACE_VERSION,
        "target": result.target,
        "max_hops": result.max_hops,
        "count": result.count,
        "started_at": result.started_at,
        "reached": result.reached,
        "last_answering_ttl": None if last is None else last.ttl,
        "last_answering_address": None if last is None else last.addresses[0],
        "hops": [_hop_document(h) for h in result.hops],
    }
