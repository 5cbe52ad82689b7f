"""A small HTTP/1.1 server (h11 over any trio listener) for the admin API and /metrics.

The caller supplies an async `handle(request) -> response` and `error_response`; this
module does the protocol, keep-alive and the protections: bounded connections (per
source too, with slots `reserved` for `trusted` addresses; `admission` is the rule,
pure), a read and write deadline per request, capped heads and bodies, and a handler
that raises answered 500 without stopping the server. The pieces every HTTP server of
the agent shares (the /hello responder too) are public: `open_tcp_listener`,
`accept_connections`, `serve_connection`, `read_request` and `send_response`.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11
import trio

from meshhealth import __version__, defaults

log = logging.getLogger(__name__)

SERVER_HEADER = f"meshhealth/{__version__}"
# accept() errors that mean "out of resources": wait a little instead of spinning.
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str  # "GET"
    path: str  # "/v1/status", without the query
    query: str  # what follows "?", "" when none
    headers: tuple[tuple[str, str], ...]  # names lower-case
    body: bytes


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status_code: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


RequestHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]
ErrorRenderer = Callable[[int, str], HttpResponse]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_connections: int
    read_timeout_s: float
    max_body_bytes: int = 64 * 1024
    per_source: int | None = None  # connections from one address (None: no cap)


@dataclass(slots=True)
class ConnectionStats:
    """Counters of `accept_connections`. Mutated only by the server's tasks."""

    connections_accepted: int = 0  # served (not counting rejected ones)
    connections_rejected: int = 0  # closed at once: full, or the limits below
    refused_per_source: int = 0  # ... because its address held `per_source` already
    refused_reserved: int = 0  # ... because only the reserved slots were left
    active_connections: int = 0  # gauge
    accept_errors: int = 0  # accept() failed for lack of resources (EMFILE, ...)


class RequestRejectedError(Exception):
    """A request we do not serve: answer `status_code` and close the connection."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


class MalformedRequestError(RequestRejectedError):
    """A request h11 rejects (400, 431 for an oversized head)."""


class ClientGoneError(Exception):
    """The client closed the connection before a whole request arrived."""


async def open_tcp_listener(host: str, port: int) -> trio.SocketListener:
    """Bind one listener on host:port (port 0: any free one). `host` must be an IP
    address literal (ValueError otherwise: we bind one address, not many); bind errors
    (address in use, not assignable) are raised as OSError."""
    ipaddress.ip_address(host)
    listeners = await trio.open_tcp_listeners(port, host=host)
    if len(listeners) != 1:  # pragma: no cover - an IP literal resolves to one address
        for extra in listeners:
            await trio.aclose_forcefully(extra)
        raise OSError(f"{host} resolved to {len(listeners)} addresses, expected one")
    return listeners[0]


def bound_port(listener: trio.SocketListener) -> int:
    """The port `listener` is bound to (what port 0 became)."""
    port: int = listener.socket.getsockname()[1]
    return port


async def serve_http(
    listener: trio.abc.Listener[Any],
    handle: RequestHandler,
    error_response: ErrorRenderer,
    limits: ServerLimits,
    *,
    name: str,
) -> None:
    """Serve connections from `listener` until cancelled; closes it on the way out."""

    async def serve_one(stream: trio.abc.Stream) -> None:
        await serve_connection(stream, handle, error_response, limits, name)

    async with listener:
        await accept_connections(
            listener,
            serve_one,
            max_connections=limits.max_connections,
            name=name,
            per_source=limits.per_source,
        )


FULL, PER_SOURCE, RESERVED = "full", "per-source", "reserved"


def admission(
    active: int,
    from_source: int,
    *,
    trusted: bool,
    max_connections: int,
    per_source: int | None = None,
    reserved: int = 0,
) -> str | None:
    """Whether one more connection is served (None) or why not (FULL, PER_SOURCE,
    RESERVED): `active` connections now, `from_source` of them from its address."""
    if active >= max_connections:
        return FULL
    if per_source is not None and from_source >= per_source:
        return PER_SOURCE
    if not trusted and active >= max_connections - reserved:
        return RESERVED
    return None


def _source(stream: Any) -> str | None:
    """The peer's IP address of a TCP stream (or of the TCP stream under TLS); None for
    other streams (unix sockets)."""
    sock = getattr(getattr(stream, "transport_stream", stream), "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return None
    return str(peer[0]) if isinstance(peer, tuple) else None


async def accept_connections(
    listener: trio.abc.Listener[Any],
    serve_connection: Callable[[Any], Awaitable[None]],
    *,
    max_connections: int,
    name: str,
    stats: ConnectionStats | None = None,
    per_source: int | None = None,
    reserved: int = 0,
    trusted: Callable[[str], bool] = lambda address: False,
) -> None:
    """Accept until cancelled; run `serve_connection(stream)` for each connection as a
    task of this function's nursery, and close the stream after it. At most
    `max_connections` at once, `per_source` from one address, the last `reserved` only
    for `trusted` addresses (`admission`): a connection over them is accepted and closed
    at once. Counts into `stats`. Does not close `listener`."""
    if max_connections < 1:
        raise ValueError(f"max_connections must be >= 1, got {max_connections}")
    if not 0 <= reserved < max_connections:
        raise ValueError(f"reserved must be 0..{max_connections - 1}, got {reserved}")
    counters = stats if stats is not None else ConnectionStats()
    by_source: dict[str, int] = {}

    async def serve_one(stream: Any, source: str | None) -> None:
        try:
            await serve_connection(stream)
        finally:
            counters.active_connections -= 1
            if source is not None:
                by_source[source] -= 1
                if not by_source[source]:
                    del by_source[source]
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                counters.accept_errors += 1
                log.warning(
                    "%s: accept failed (%s); pausing %.1fs",
                    name,
                    exc,
                    defaults.HTTP_SERVER_ACCEPT_BACKOFF_S,
                )
                await trio.sleep(defaults.HTTP_SERVER_ACCEPT_BACKOFF_S)
                continue
            source = _source(stream)
            # `trusted` matters only once the reserved slots are all that is left: it is
            # not asked (a look-up in the registered nodes) for every connection.
            in_reserve = counters.active_connections >= max_connections - reserved
            refused = admission(
                counters.active_connections,
                by_source.get(source, 0) if source is not None else 0,
                trusted=source is not None and in_reserve and trusted(source),
                max_connections=max_connections,
                per_source=per_source if source is not None else None,
                reserved=reserved if source is not None else 0,
            )
            if refused is not None:
                counters.connections_rejected += 1
                counters.refused_per_source += refused == PER_SOURCE
                counters.refused_reserved += refused == RESERVED
                await trio.aclose_forcefully(stream)
                continue
            counters.connections_accepted += 1
            counters.active_connections += 1
            if source is not None:
                by_source[source] = by_source.get(source, 0) + 1
            nursery.start_soon(serve_one, stream, source)


async def serve_connection(
    stream: trio.abc.Stream,
    handle: RequestHandler,
    error_response: ErrorRenderer,
    limits: ServerLimits,
    name: str,
) -> None:
    """Answer the requests of one connection (keep-alive) until the client closes, a
    request does not arrive within the read timeout or a response cannot be written in
    it. A HEAD request gets its GET answer's head without the body."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=defaults.HTTP_SERVER_MAX_HEAD_BYTES)
    try:
        while True:
            try:
                with trio.fail_after(limits.read_timeout_s):
                    request = await read_request(stream, conn, limits.max_body_bytes)
            except trio.TooSlowError:
                return  # a whole request did not arrive in time (slow or idle client)
            except RequestRejectedError as exc:
                with trio.move_on_after(limits.read_timeout_s):
                    response = error_response(exc.status_code, str(exc))
                    await _send_response(stream, conn, response, close=True)
                return
            # The handler has no deadline here: a waiting handler sets its own.
            response = await _answer(request, handle, error_response, name)
            head_only = request.method == "HEAD"
            with trio.move_on_after(limits.read_timeout_s) as write:
                await _send_response(stream, conn, response, close=False, head_only=head_only)
            if write.cancelled_caught:
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, ClientGoneError):
        return


async def _answer(
    request: HttpRequest, handle: RequestHandler, error_response: ErrorRenderer, name: str
) -> HttpResponse:
    try:
        return await handle(request)
    except Exception:  # one failing request must not stop the server: log it, answer 500
        log.exception("%s: %s %s failed", name, request.method, request.path)
        return error_response(500, f"internal error answering {request.method} {request.path}")


async def _next_event(stream: trio.abc.Stream, conn: h11.Connection) -> Any:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(
                bytes(await stream.receive_some(defaults.HTTP_SERVER_RECEIVE_CHUNK_BYTES))
            )
            continue
        if event is h11.PAUSED:  # pragma: no cover - we never read past a request's end
            raise RuntimeError("h11 paused: read past the end of a request")
        return event


async def read_request(
    stream: trio.abc.Stream, conn: h11.Connection, max_body_bytes: int
) -> HttpRequest:
    """Read one whole request from `conn` (in state IDLE). MalformedRequestError for
    what h11 rejects, RequestRejectedError(413) for a body over `max_body_bytes`,
    ClientGoneError when the client closes first. The caller sets the deadline."""
    try:
        event = await _next_event(stream, conn)
        if isinstance(event, h11.ConnectionClosed):
            raise ClientGoneError
        assert isinstance(event, h11.Request), event
        body = bytearray()
        while True:
            part = await _next_event(stream, conn)
            if isinstance(part, h11.EndOfMessage):
                break
            if isinstance(part, h11.ConnectionClosed):
                raise ClientGoneError
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > max_body_bytes:
                    raise RequestRejectedError(413, f"request body over {max_body_bytes} bytes")
    except h11.RemoteProtocolError as exc:
        raise MalformedRequestError(exc.error_status_hint, f"malformed request: {exc}") from exc
    target = event.target.decode("ascii", "replace")
    path, _, query = target.partition("?")
    headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers)
    return HttpRequest(event.method.decode("ascii", "replace"), path, query, headers, bytes(body))


def can_respond(conn: h11.Connection) -> bool:
    """Whether h11 can still send a response on `conn` (else: just close)."""
    return conn.our_state in (h11.IDLE, h11.SEND_RESPONSE)


async def _send_response(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    response: HttpResponse,
    *,
    close: bool,
    head_only: bool = False,
) -> None:
    headers = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        ("Server", SERVER_HEADER),
        *response.headers,
    ]
    await send_response(
        stream, conn, response.status_code, headers, response.body, close=close, head_only=head_only
    )


async def send_response(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    status_code: int,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    *,
    close: bool,
    head_only: bool = False,
) -> None:
    """Send one whole response (`headers` as given, plus `Connection: close` when
    `close`); `head_only` leaves the body out (a HEAD answer). Nothing when h11 cannot
    answer in its state."""
    if not can_respond(conn):
        return
    all_headers = [*headers, ("Connection", "close")] if close else list(headers)
    try:
        reason = HTTPStatus(status_code).phrase.encode()
    except ValueError:
        reason = b""
    data = conn.send(h11.Response(status_code=status_code, headers=all_headers, reason=reason))
    data = data or b""
    if not head_only:
        data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)
