"""Output of `meshhealth probe` (pure): one line per target and path, or JSON.

    10.0.0.2  icmp  OK  rtt=412.5µs loss=0%
    10.0.0.9  http  Connection refused

A failure shows the text cilium-health users know, with the detail after a colon when
there is one. `-o json` is a list, one object per line above; docs/probe.md lists its
fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from meshhealth import model
from meshhealth.model import status_text
from meshhealth.timefmt import format_duration, iso_time


def format_loss(loss: float) -> str:
    """`0%`, `33%`, `100%` (a partial loss never rounds to 0% or 100%)."""
    percent = loss * 100.0
    if 0.0 < percent < 1.0:
        return "<1%"
    if 99.0 < percent < 100.0:
        return ">99%"
    return f"{percent:.0f}%"


def probe_line(
    ip: str, protocol: model.Protocol, result: model.ProbeResult, ip_width: int = 0
) -> str:
    line = f"{ip:<{ip_width}}  {protocol.value:<4}  {status_text(result)}"
    extras = []
    rtt = result.rtt_s
    if rtt is not None:
        extras.append(f"rtt={format_duration(rtt)}")
    if protocol is model.Protocol.ICMP and result.ok:
        extras.append(f"loss={format_loss(result.loss)}")
    if extras:
        line += "  " + " ".join(extras)
    return line


def loop_prefix(round_number: int, started_at: float) -> str:
    """What starts each line of a `--loop` round: `[3 2026-11-27T05:40:01Z] ` (the round,
    from 1, and when it started, UTC)."""
    return f"[{round_number} {iso_time(started_at)}] "


def format_probe_text(
    paths: Sequence[model.PathReport], labels: Mapping[str, str] | None = None, prefix: str = ""
) -> str:
    """All lines, in the order given, ending with a newline (empty string for none).

    `labels` maps an address to what the user called it (`localhost (127.0.0.1)`);
    addresses not in it are shown as they are. `prefix` starts every line (`loop_prefix`)."""
    if not paths:
        return ""
    names = [(labels or {}).get(p.ip, p.ip) for p in paths]
    width = max(len(name) for name in names)
    lines = [
        prefix + probe_line(name, p.path.protocol, p.result, width)
        for name, p in zip(names, paths, strict=True)
    ]
    return "\n".join(lines) + "\n"


def probe_record(path: model.PathReport) -> dict[str, Any]:
    """One JSON object (see the module docstring for the fields)."""
    r = path.result
    return {
        "ip": path.ip,
        "protocol": path.path.protocol.value,
        "status": r.status.value,
        "text": r.text,
        "detail": r.detail,
        "rtt_s": r.rtt_s,
        "rtts_s": list(r.rtts_s),
        "sent": r.sent,
        "received": r.received,
        "loss": r.loss,
        "started_at": iso_time(r.started_at),
        "started_at_unix": r.started_at,
    }


def format_probe_json(paths: Sequence[model.PathReport]) -> str:
    return json.dumps([probe_record(p) for p in paths], indent=2, ensure_ascii=False) + "\n"


# --- fping-style summaries (`--count`, `--loop`, `-q`) --------------------------------


@dataclass(slots=True)
class PathTally:
    """What one (target, protocol) path got over a run: requests, replies, RTTs."""

    keep_requests: bool = False  # list every request's RTT (`-C`; not in a --loop)
    sent: int = 0
    received: int = 0
    min_s: float = math.inf
    max_s: float = 0.0
    total_s: float = 0.0
    # one per request, in order, None for no reply (`-C`)
    requests: list[float | None] = field(default_factory=list)

    def add(self, result: model.ProbeResult) -> None:
        self.sent += result.sent
        self.received += len(result.rtts_s)
        for rtt in result.rtts_s:
            self.total_s += rtt
            self.min_s = min(self.min_s, rtt)
            self.max_s = max(self.max_s, rtt)
        if not self.keep_requests:
            return
        if len(result.request_rtts_s) == result.sent:
            self.requests.extend(result.request_rtts_s)
        else:  # (which requests went unanswered is not known: the replies first)
            lost = max(result.sent - len(result.rtts_s), 0)
            self.requests.extend([*result.rtts_s, *([None] * lost)])


class SummaryBook:
    """Tallies per (ip, protocol) in the order paths were first seen. Pure."""

    def __init__(self, *, per_request: bool = False) -> None:
        self.per_request = per_request  # tallies keep every request's RTT (`-C`)
        self.tallies: dict[tuple[str, model.Protocol], PathTally] = {}
        self.not_ok = 0  # probes whose status was not OK (the exit status)

    def add(self, paths: Sequence[model.PathReport]) -> None:
        for p in paths:
            if not p.result.ok:
                self.not_ok += 1
            key = (p.ip, p.path.protocol)
            tally = self.tallies.get(key)
            if tally is None:
                tally = self.tallies[key] = PathTally(keep_requests=self.per_request)
            tally.add(p.result)


def fping_ms(seconds: float) -> str:
    """An RTT in milliseconds as fping prints it: 0.412, 12.35, 123.5, 1234."""
    ms = seconds * 1000.0
    if ms < 1.0:
        return f"{ms:.3f}"
    if ms < 100.0:
        return f"{ms:.2f}"
    if ms < 1000.0:
        return f"{ms:.1f}"
    return f"{ms:.0f}"


def summary_line(
    label: str, protocol: model.Protocol, tally: PathTally, label_width: int = 0
) -> str:
    """`10.0.0.2  icmp : xmt/rcv/%loss = 3/3/0%, min/avg/max = 0.032/0.040/0.054` (ms),
    as `fping -c` prints it, with the protocol after the target."""
    loss = 100 * (tally.sent - tally.received) // tally.sent if tally.sent else 100
    line = (
        f"{label:<{label_width}}  {protocol.value:<4} : "
        f"xmt/rcv/%loss = {tally.sent}/{tally.received}/{loss}%"
    )
    if tally.received:
        avg_s = tally.total_s / tally.received
        line += f", min/avg/max = {fping_ms(tally.min_s)}/{fping_ms(avg_s)}/{fping_ms(tally.max_s)}"
    return line


def format_summary(
    book: SummaryBook, labels: Mapping[str, str] | None = None, *, per_request: bool = False
) -> str:
    """One summary line per path, ending with a newline ("" for none). `labels` maps an
    address to what the user called it (default: the address). `per_request`: in
    `fping -C`'s form (`vcount_line`), else `fping -c`'s (`summary_line`)."""
    if not book.tallies:
        return ""
    names = {ip: (labels or {}).get(ip, ip) for ip, _ in book.tallies}
    width = max(len(name) for name in names.values())
    line = vcount_line if per_request else summary_line
    lines = [
        line(names[ip], protocol, tally, width) for (ip, protocol), tally in book.tallies.items()
    ]
    return "\n".join(lines) + "\n"


def vcount_line(
    label: str, protocol: model.Protocol, tally: PathTally, label_width: int = 0
) -> str:
    """`10.0.0.2  icmp : 0.041 0.052 - 0.047`: every request's RTT in milliseconds, `-`
    for no reply, as `fping -C` prints it, with the protocol after the target."""
    rtts = " ".join("-" if rtt is None else fping_ms(rtt) for rtt in tally.requests)
    return f"{label:<{label_width}}  {protocol.value:<4} : {rtts}"
