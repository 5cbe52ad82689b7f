"""TCP connect prober: open a connection to ip:port, close it, time it. One probe per call.

The result says what the port did, the way users read it (model.STATUS_TEXT): accepted
-> `OK` with the connect time as RTT; a RST -> `Connection refused` (nothing listens,
or a firewall rejects); no answer within `timeout_s` -> `Connection timed out` (a
firewall drops); ICMP unreachable -> `No route to host`. The same socket-error rule as
the HTTP prober's (meshhealth.probe.http.classify_os_error). Nothing is sent: the
connection is closed as soon as it is established, so a probed service sees a connect
and a close.
"""

from __future__ import annotations

import ipaddress
import time

import trio

from meshhealth import defaults, model
from meshhealth.probe.http import classify_os_error


async def tcp_connect_probe(
    ip: str, port: int, *, timeout_s: float = defaults.PROBE_TIMEOUT_S
) -> model.ProbeResult:
    """Connect to ip:port within `timeout_s`; never raises for network conditions.
    ValueError for an `ip` that is not an IP address literal."""
    address = ipaddress.ip_address(ip)
    family = trio.socket.AF_INET6 if address.version == 6 else trio.socket.AF_INET
    started_at = time.time()
    t0 = trio.current_time()
    status, detail = model.ProbeStatus.TIMEOUT, ""
    try:
        sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    except OSError as exc:
        outcome = classify_os_error(exc)
        return model.ProbeResult(outcome.status, started_at, sent=1, detail=outcome.detail)
    try:
        with trio.move_on_after(timeout_s):
            try:
                await sock.connect((ip, port))
            except OSError as exc:
                outcome = classify_os_error(exc)
                status, detail = outcome.status, outcome.detail
            else:
                status = model.ProbeStatus.OK
    finally:
        sock.close()  # synchronous: it happens even when we are cancelled
    elapsed_s = trio.current_time() - t0
    ok = status is model.ProbeStatus.OK
    return model.ProbeResult(
        status=status,
        started_at=started_at,
        rtts_s=(elapsed_s,) if ok else (),
        sent=1,
        received=1 if ok else 0,
        detail=detail,
    )
