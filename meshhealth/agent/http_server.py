"""A small HTTP/1.1 server (h11 over any trio listener) for the admin API and /metrics.

The caller supplies an async `handle(request) -> response`; this module does the
protocol, keep-alive and the protections:
- at most `max_connections` connections at once; when full, a new connection is closed
  at once (the client sees a fast reset instead of waiting on a full backlog);
- each request must arrive completely within `read_timeout_s` (slow or idle clients are
  dropped), and each response must be written within it; the handler itself has no
  deadline here: handlers that wait (PUT /v1/status/probe) set their own;
- request heads are capped by h11, bodies by `max_body_bytes` (413);
- a request h11 rejects is answered 4xx and the connection closed; a handler that
  raises is logged once and answered 500: one bad request never stops the server.

Errors are rendered by the caller's `error_response(status_code, message)` (JSON for
the admin API, text for /metrics).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11
import trio

from meshhealth import __version__

log = logging.getLogger(__name__)

MAX_REQUEST_HEAD_BYTES = 16 * 1024
RECEIVE_CHUNK_BYTES = 16 * 1024
SERVER_HEADER = f"meshhealth/{__version__}"
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_BACKOFF_S = 0.1


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


class _RequestRejectedError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


class _ClientGoneError(Exception):
    pass


async def serve_http(
    listener: trio.abc.Listener[Any],
    handle: RequestHandler,
    error_response: ErrorRenderer,
    limits: ServerLimits,
    *,
    name: str,
) -> None:
    """Serve connections from `listener` until cancelled; closes it on the way out."""
    if limits.max_connections < 1:
        raise ValueError(f"max_connections must be >= 1, got {limits.max_connections}")
    active = 0

    async def serve_one(stream: trio.abc.Stream) -> None:
        nonlocal active
        try:
            await _serve_connection(stream, handle, error_response, limits, name)
        finally:
            active -= 1
            await trio.aclose_forcefully(stream)

    async with listener, trio.open_nursery() as nursery:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                log.warning("%s: accept failed (%s); pausing", name, exc)
                await trio.sleep(_ACCEPT_BACKOFF_S)
                continue
            if active >= limits.max_connections:
                await trio.aclose_forcefully(stream)
                continue
            active += 1
            nursery.start_soon(serve_one, stream)


async def _serve_connection(
    stream: trio.abc.Stream,
    handle: RequestHandler,
    error_response: ErrorRenderer,
    limits: ServerLimits,
    name: str,
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES)
    try:
        while True:
            try:
                with trio.fail_after(limits.read_timeout_s):
                    request = await _read_request(stream, conn, limits.max_body_bytes)
            except trio.TooSlowError:
                return  # a whole request did not arrive in time (slow or idle client)
            except _RequestRejectedError as exc:
                with trio.move_on_after(limits.read_timeout_s):
                    response = error_response(exc.status_code, str(exc))
                    await _send_response(stream, conn, response, close=True)
                return
            # The handler has no deadline here: a waiting handler sets its own.
            response = await _answer(request, handle, error_response, name)
            with trio.move_on_after(limits.read_timeout_s) as write:
                await _send_response(stream, conn, response, close=False)
            if write.cancelled_caught:
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, _ClientGoneError):
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
            conn.receive_data(bytes(await stream.receive_some(RECEIVE_CHUNK_BYTES)))
            continue
        if event is h11.PAUSED:  # pragma: no cover - we never read past a request's end
            raise RuntimeError("h11 paused: read past the end of a request")
        return event


async def _read_request(
    stream: trio.abc.Stream, conn: h11.Connection, max_body_bytes: int
) -> HttpRequest:
    try:
        event = await _next_event(stream, conn)
        if isinstance(event, h11.ConnectionClosed):
            raise _ClientGoneError
        assert isinstance(event, h11.Request), event
        body = bytearray()
        while True:
            part = await _next_event(stream, conn)
            if isinstance(part, h11.EndOfMessage):
                break
            if isinstance(part, h11.ConnectionClosed):
                raise _ClientGoneError
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > max_body_bytes:
                    raise _RequestRejectedError(413, f"request body over {max_body_bytes} bytes")
    except h11.RemoteProtocolError as exc:
        raise _RequestRejectedError(exc.error_status_hint, f"malformed request: {exc}") from exc
    target = event.target.decode("ascii", "replace")
    path, _, query = target.partition("?")
    headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers)
    return HttpRequest(event.method.decode("ascii", "replace"), path, query, headers, bytes(body))


async def _send_response(
    stream: trio.abc.Stream, conn: h11.Connection, response: HttpResponse, *, close: bool
) -> None:
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return  # h11 cannot answer in this state: just close
    headers = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        ("Server", SERVER_HEADER),
        *response.headers,
    ]
    if close:
        headers.append(("Connection", "close"))
    try:
        reason = HTTPStatus(response.status_code).phrase.encode()
    except ValueError:
        reason = b""
    data = conn.send(h11.Response(status_code=response.status_code, headers=headers, reason=reason))
    data = (data or b"") + (conn.send(h11.Data(data=response.body)) or b"")
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)
