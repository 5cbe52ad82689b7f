"""Output of `meshhealth probe` (pure): one line per target and path, or JSON.

Text, one line per (ip, protocol), IPs padded to one column::

    10.0.0.2  icmp  OK  rtt=412.5µs loss=0%
    10.0.0.2  http  OK  rtt=1.02ms
    10.0.0.9  icmp  Connection timed out
    10.0.0.9  http  Connection refused

`rtt` is the mean of the replies of the probe (Go-like duration), `loss` the fraction
of the ICMP echo requests that got no valid reply. A failure shows the text
cilium-health users know, with the detail after a colon when there is one
(`Error: ICMP disabled`).

JSON (`-o json`): a list, one object per line above, with these fields:

    ip          the probed address (str)
    protocol    "icmp" | "http"
    status      "ok" | "timeout" | "refused" | "reset" | "unreachable" | "http_error"
                | "invalid" | "error" (meshhealth.model.ProbeStatus)
    text        the words of the text output ("OK", "Connection timed out", "HTTP 503")
    detail      extra detail, "" when none
    rtt_s       mean RTT in seconds, null when no reply
    rtts_s      every RTT in seconds, one per reply
    sent        requests sent (ICMP: echo requests; HTTP: 1)
    received    valid replies received
    loss        1 - received/sent, 0.0 .. 1.0
    started_at  unix seconds when the probe started
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from meshhealth import model
from meshhealth.model import status_text
from meshhealth.timefmt import format_duration

__all__ = [  # status_text lives in meshhealth.model, re-exported for its callers
    "format_loss",
    "format_probe_json",
    "format_probe_text",
    "probe_line",
    "probe_record",
    "status_text",
]


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


def format_probe_text(paths: Sequence[model.PathReport]) -> str:
    """All lines, in the order given, ending with a newline (empty string for none)."""
    if not paths:
        return ""
    width = max(len(p.ip) for p in paths)
    lines = [probe_line(p.ip, p.path.protocol, p.result, width) for p in paths]
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
        "started_at": r.started_at,
    }


def format_probe_json(paths: Sequence[model.PathReport]) -> str:
    return json.dumps([probe_record(p) for p in paths], indent=2, ensure_ascii=False) + "\n"
