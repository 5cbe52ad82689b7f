"""The `/hello` responder: answers peers' HTTP probes, with h11 over trio streams.

`GET /hello` and `HEAD /hello` -> 200 with a tiny JSON body; other methods on /hello
-> 405; any other path -> 404; a request h11 rejects -> 400 (431 for an oversized head)
and the connection is closed.

Protection against slow or hostile clients:
- At most `max_connections` connections are served at once. When full, a new connection
  is accepted and closed at once (not left waiting): the kernel backlog never fills with
  connections we will not serve in time, file descriptors stay bounded, and a prober on
  the other side sees a fast `Connection reset` instead of waiting for its timeout.
  Slots come back quickly because of the next point.
- Each request cycle (waiting for the request, reading it, writing the answer) has one
  deadline of `read_timeout_s`, counted from the start of the cycle: a slowloris client
  that trickles bytes, or an idle keep-alive connection, is dropped when it runs out.
- Request heads are capped by h11 (`max_incomplete_event_size`), bodies by a counter.

Every connection handler runs in the server's nursery: cancelling `serve_responder`
closes the listener and every connection.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from http import HTTPStatus

import h11
import trio

from meshhealth import __version__, defaults

log = logging.getLogger(__name__)

# Largest request line + headers; a probe sends ~100 bytes.
MAX_REQUEST_HEAD_BYTES = 8 * 1024
# Nothing we serve takes a body; a small one is read and ignored, more gets 413.
MAX_REQUEST_BODY_BYTES = 4 * 1024
RECEIVE_CHUNK_BYTES = 4 * 1024
# After an error reply: how long and how much we read and discard before closing.
LINGER_S = 0.5
LINGER_MAX_BYTES = 256 * 1024
SERVER_HEADER = f"meshhealth/{__version__}"
# accept() errors that mean "out of resources": wait a little instead of spinning.
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
_ACCEPT_BACKOFF_S = 0.1


@dataclass(slots=True)
class ResponderStats:
    """Counters the agent's metrics read. Mutated only by the responder's tasks."""

    responses_by_status: Counter[int] = field(default_factory=Counter)
    connections_accepted: int = 0  # served (not counting rejected ones)
    connections_rejected: int = 0  # closed at once because max_connections were busy
    active_connections: int = 0  # gauge
    read_timeouts: int = 0  # dropped because a request cycle ran out of time
    protocol_errors: int = 0  # requests h11 rejected (answered 400/431)
    accept_errors: int = 0  # accept() failed for lack of resources (EMFILE, ...)


@dataclass(frozen=True, slots=True)
class Reply:
    status_code: int
    headers: tuple[tuple[str, str], ...]
    body: bytes  # its length is the Content-Length, even for HEAD
    head_only: bool = False  # a HEAD answer: headers only


def hello_body(node_name: str) -> bytes:
    """The /hello body: small JSON that says who answered. Pure."""
    doc = {"status": "ok", "node": node_name, "version": __version__}
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def route(method: bytes, target: bytes, node_name: str) -> Reply:
    """What to answer to `method target`. Pure."""
    path = target.split(b"?", 1)[0]
    head_only = method == b"HEAD"
    if path != defaults.HTTP_PATH.encode():
        return _text_reply(404, b"not found\n", head_only=head_only)
    if method not in (b"GET", b"HEAD"):
        return _text_reply(405, b"method not allowed\n", extra=(("Allow", "GET, HEAD"),))
    body = hello_body(node_name)
    return Reply(200, _headers("application/json", len(body)), body, head_only)


def error_reply(status_code: int) -> Reply:
    """The answer to a request we could not parse (400, 431) or take (413). Pure."""
    return _text_reply(status_code, f"error {status_code}\n".encode())


def _text_reply(
    status_code: int,
    body: bytes,
    extra: tuple[tuple[str, str], ...] = (),
    *,
    head_only: bool = False,
) -> Reply:
    headers = _headers("text/plain; charset=utf-8", len(body)) + extra
    return Reply(status_code, headers, body, head_only)


def _headers(content_type: str, length: int) -> tuple[tuple[str, str], ...]:
    return (
        ("Content-Type", content_type),
        ("Content-Length", str(length)),
        ("Server", SERVER_HEADER),
    )


class _ClientGoneError(Exception):
    """The client closed the connection between requests."""


class _BodyTooLargeError(Exception):
    pass


async def serve_responder(
    host: str,
    port: int = defaults.HTTP_PORT,
    *,
    max_connections: int = defaults.RESPONDER_MAX_CONNECTIONS,
    read_timeout_s: float = defaults.RESPONDER_READ_TIMEOUT_S,
    node_name: str = "",
    stats: ResponderStats | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on host:port (port 0: any free one) and serve until cancelled.

    `task_status.started(port)` reports the port actually bound. Bind errors (address in
    use, not assignable) are raised as OSError before `started`; a `host` that is not an
    IP address literal raises ValueError.
    """
    if max_connections < 1:
        raise ValueError(f"max_connections must be >= 1, got {max_connections}")
    ipaddress.ip_address(host)
    counters = stats if stats is not None else ResponderStats()
    listeners = await trio.open_tcp_listeners(port, host=host)
    if len(listeners) != 1:  # pragma: no cover - an IP literal resolves to one address
        for extra in listeners:
            await trio.aclose_forcefully(extra)
        raise OSError(f"{host} resolved to {len(listeners)} addresses, expected one")
    listener = listeners[0]
    try:
        bound_port: int = listener.socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(bound_port)
            await _accept_loop(
                listener,
                nursery,
                counters,
                max_connections=max_connections,
                read_timeout_s=read_timeout_s,
                node_name=node_name,
            )
    finally:
        await trio.aclose_forcefully(listener)


async def _accept_loop(
    listener: trio.SocketListener,
    nursery: trio.Nursery,
    stats: ResponderStats,
    *,
    max_connections: int,
    read_timeout_s: float,
    node_name: str,
) -> None:
    slots = trio.CapacityLimiter(max_connections)
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                raise
            stats.accept_errors += 1
            log.warning("responder: accept failed (%s); pausing %.1fs", exc, _ACCEPT_BACKOFF_S)
            await trio.sleep(_ACCEPT_BACKOFF_S)
            continue
        try:
            slots.acquire_on_behalf_of_nowait(stream)
        except trio.WouldBlock:
            stats.connections_rejected += 1
            await trio.aclose_forcefully(stream)
            continue
        stats.connections_accepted += 1
        stats.active_connections += 1
        nursery.start_soon(_serve_connection, stream, slots, stats, read_timeout_s, node_name)


class _After(enum.Enum):
    """What a connection does after one request cycle."""

    NEXT_REQUEST = enum.auto()  # keep-alive: serve another request
    CLOSE = enum.auto()
    LINGER_CLOSE = enum.auto()  # an error reply went out with unread input: linger first


async def _serve_connection(
    stream: trio.SocketStream,
    slots: trio.CapacityLimiter,
    stats: ResponderStats,
    read_timeout_s: float,
    node_name: str,
) -> None:
    conn = h11.Connection(our_role=h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES)
    try:
        while True:
            with trio.move_on_after(read_timeout_s) as cycle:
                after = await _serve_one_request(stream, conn, stats, node_name)
            if cycle.cancelled_caught:
                stats.read_timeouts += 1
                return
            if after is _After.LINGER_CLOSE:
                await _lingering_close(stream)
            if after is not _After.NEXT_REQUEST:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, _ClientGoneError):
        return
    finally:
        stats.active_connections -= 1
        slots.release_on_behalf_of(stream)
        await trio.aclose_forcefully(stream)


async def _serve_one_request(
    stream: trio.SocketStream, conn: h11.Connection, stats: ResponderStats, node_name: str
) -> _After:
    """Read one request and answer it."""
    try:
        request = await _next_event(stream, conn)
        if isinstance(request, h11.ConnectionClosed):
            raise _ClientGoneError
        assert isinstance(request, h11.Request), request  # h11 yields nothing else here
        reply = route(request.method, request.target, node_name)
        await _drain_body(stream, conn)
    except h11.RemoteProtocolError as exc:
        stats.protocol_errors += 1
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):  # pragma: no cover
            return _After.CLOSE
        await _send_reply(stream, conn, error_reply(exc.error_status_hint), stats, close=True)
        return _After.LINGER_CLOSE
    except _BodyTooLargeError:
        await _send_reply(stream, conn, error_reply(413), stats, close=True)
        return _After.LINGER_CLOSE
    await _send_reply(stream, conn, reply, stats)
    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
        return _After.NEXT_REQUEST
    return _After.CLOSE


async def _lingering_close(stream: trio.SocketStream) -> None:
    """Half-close, then discard what the client still sends, briefly (LINGER_S).

    Closing a socket with unread input makes the kernel send RST, which can destroy our
    error response before the client reads it. As HTTP servers do (Apache's lingering
    close), we shut down our side and drain a bounded amount for a bounded time.
    """
    await stream.send_eof()
    drained = 0
    with trio.move_on_after(LINGER_S):
        while drained < LINGER_MAX_BYTES:
            chunk = await stream.receive_some(RECEIVE_CHUNK_BYTES)
            if not chunk:
                return
            drained += len(chunk)


async def _next_event(stream: trio.SocketStream, conn: h11.Connection) -> h11.Event:
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Event):
            return event
        if event is h11.PAUSED:  # pragma: no cover - we never read past a request's end
            raise RuntimeError("h11 paused: read past the end of a request")
        conn.receive_data(await stream.receive_some(RECEIVE_CHUNK_BYTES))


async def _drain_body(stream: trio.SocketStream, conn: h11.Connection) -> None:
    body_bytes = 0
    while True:
        event = await _next_event(stream, conn)
        if isinstance(event, h11.EndOfMessage):
            return
        if isinstance(event, h11.Data):
            body_bytes += len(event.data)
            if body_bytes > MAX_REQUEST_BODY_BYTES:
                raise _BodyTooLargeError
        elif isinstance(event, h11.ConnectionClosed):
            raise _ClientGoneError


async def _send_reply(
    stream: trio.SocketStream,
    conn: h11.Connection,
    reply: Reply,
    stats: ResponderStats,
    *,
    close: bool = False,
) -> None:
    headers = list(reply.headers)
    if close:
        headers.append(("Connection", "close"))
    reason = HTTPStatus(reply.status_code).phrase.encode()
    response = h11.Response(status_code=reply.status_code, headers=headers, reason=reason)
    data = conn.send(response) or b""
    if not reply.head_only:
        data += conn.send(h11.Data(data=reply.body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    # Counted before the write, so a client that has the answer can see the count.
    stats.responses_by_status[reply.status_code] += 1
    await stream.send_all(data)
