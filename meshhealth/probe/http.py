"""HTTP prober: `GET /hello` with h11 over a trio socket stream, one probe per call.

Connect + the full response (status line, headers, body) must fit inside `timeout_s`.
Failures are classified the way cilium-health users read them (model.STATUS_TEXT):
deadline -> `Connection timed out`, ECONNREFUSED -> `Connection refused`, ECONNRESET /
EPIPE / the peer closing before a full response -> `Connection reset`, a status other
than 200 -> `HTTP <code>`, bytes that are not HTTP -> `Invalid response`.

The socket is made with trio.socket and connected to the exact address (no resolver, no
happy eyeballs), so the errno of `connect` is the one the kernel gave for that address.
"""

from __future__ import annotations

import errno
import ipaddress
import time
from dataclasses import dataclass

import h11
import trio

from meshhealth import __version__, defaults, model

# The body is read only to find the end of the response; past this we stop reading and
# judge by the status line. /hello answers with a few dozen bytes.
MAX_BODY_BYTES = 64 * 1024
# Largest status line + headers we accept; h11's own default is 16 KiB.
MAX_HEAD_BYTES = 16 * 1024
RECEIVE_CHUNK_BYTES = 16 * 1024
USER_AGENT = f"meshhealth/{__version__}"

_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_UNREACHABLE_ERRNOS = frozenset(
    {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}
)


@dataclass(frozen=True, slots=True)
class _Outcome:
    status: model.ProbeStatus
    detail: str = ""
    responded: bool = False  # a response (any status) came back: the RTT is meaningful


class _PeerClosedError(Exception):
    """The peer closed the connection before a full response."""


class _NotHTTPError(Exception):
    """The reply is not HTTP (h11 rejected it, or it does not start like HTTP)."""


def classify_os_error(exc: OSError) -> _Outcome:
    """Map a socket error to what users read. Pure."""
    code = exc.errno
    if code == errno.ECONNREFUSED:
        return _Outcome(model.ProbeStatus.REFUSED)
    if code in _RESET_ERRNOS:
        return _Outcome(model.ProbeStatus.RESET)
    if code in _UNREACHABLE_ERRNOS:
        return _Outcome(model.ProbeStatus.UNREACHABLE)
    if code == errno.ETIMEDOUT:
        return _Outcome(model.ProbeStatus.TIMEOUT)
    return _Outcome(model.ProbeStatus.ERROR, exc.strerror or str(exc))


def host_header(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """`10.0.0.1:4240` or `[fd00::1]:4240` (scope id dropped, port omitted when 80). Pure."""
    text = str(ip).split("%", 1)[0]
    host = f"[{text}]" if ip.version == 6 else text
    return host if port == 80 else f"{host}:{port}"


def looks_like_http(prefix: bytes) -> bool:
    """Whether the first bytes of a reply can be the start of `HTTP/1.x ...`. Pure."""
    head = prefix[:5]
    return b"HTTP/".startswith(head)


async def http_probe(
    ip: str,
    port: int = defaults.HTTP_PORT,
    *,
    timeout_s: float = defaults.PROBE_TIMEOUT_S,
    path: str = defaults.HTTP_PATH,
) -> model.ProbeResult:
    """One `GET path` to ip:port; OK only on 200. Never raises for network conditions.

    Raises ValueError for an `ip` that is not an IP address literal.
    """
    address = ipaddress.ip_address(ip)
    started_at = time.time()
    t0 = trio.current_time()
    outcome = _Outcome(model.ProbeStatus.TIMEOUT)
    with trio.move_on_after(timeout_s):
        outcome = await _exchange(address, ip, port, path)
    elapsed_s = trio.current_time() - t0
    ok = outcome.status is model.ProbeStatus.OK
    return model.ProbeResult(
        status=outcome.status,
        started_at=started_at,
        rtts_s=(elapsed_s,) if outcome.responded else (),
        sent=1,
        received=1 if ok else 0,
        detail=outcome.detail,
    )


async def _exchange(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, ip: str, port: int, path: str
) -> _Outcome:
    family = trio.socket.AF_INET6 if address.version == 6 else trio.socket.AF_INET
    try:
        sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    except OSError as exc:
        return classify_os_error(exc)
    try:
        await sock.connect((ip, port))
        code = await _request(trio.SocketStream(sock), host_header(address, port), path)
    except OSError as exc:
        return classify_os_error(exc)
    except trio.BrokenResourceError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError):
            return classify_os_error(cause)
        return _Outcome(model.ProbeStatus.RESET)
    except _PeerClosedError:
        return _Outcome(model.ProbeStatus.RESET)
    except _NotHTTPError:
        return _Outcome(model.ProbeStatus.INVALID)
    finally:
        # Closing is synchronous underneath; it happens even when we are cancelled.
        sock.close()
    if code == 200:
        return _Outcome(model.ProbeStatus.OK, responded=True)
    return _Outcome(model.ProbeStatus.HTTP_ERROR, f"HTTP {code}", responded=True)


async def _request(stream: trio.SocketStream, host: str, path: str) -> int:
    """Send the request, read the response; return its status code."""
    conn = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
    request = h11.Request(
        method="GET",
        target=path,
        headers=[
            ("Host", host),
            ("User-Agent", USER_AGENT),
            ("Accept", "*/*"),
            ("Connection", "close"),
        ],
    )
    data = conn.send(request) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)

    status_code: int | None = None
    body_bytes = 0
    first_bytes = b""
    eof = False
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            # h11 asks for data only once everything buffered is parsed, so an error that
            # comes after the EOF is a truncated response; one before it is garbage.
            if eof:
                raise _PeerClosedError from exc
            raise _NotHTTPError from exc
        if event is h11.NEED_DATA:
            chunk = await stream.receive_some(RECEIVE_CHUNK_BYTES)
            eof = not chunk
            if len(first_bytes) < 5:
                first_bytes += chunk[: 5 - len(first_bytes)]
                if not looks_like_http(first_bytes):
                    raise _NotHTTPError
            conn.receive_data(chunk)
            continue
        if isinstance(event, h11.InformationalResponse):
            continue  # 100 Continue etc.: the real response follows
        if isinstance(event, h11.Response):
            status_code = event.status_code
        elif isinstance(event, h11.Data):
            body_bytes += len(event.data)
            if body_bytes > MAX_BODY_BYTES and status_code is not None:
                return status_code
        elif isinstance(event, h11.EndOfMessage):
            if status_code is None:  # pragma: no cover - h11 never ends a message unstarted
                raise _NotHTTPError
            return status_code
        elif isinstance(event, h11.ConnectionClosed):
            raise _PeerClosedError
