"""The `/hello` responder: answers peers' HTTP probes, with h11 over trio streams.

`GET`/`HEAD /hello` -> 200 with a tiny JSON body (what to answer is
meshhealth.probe.hello_reply's, shared with the trio-free `meshhealth responder`).
Slow or hostile clients are bounded: at most `max_connections` at once (a new one is
closed at once when full, so a prober sees a fast reset, not a timeout), one deadline
per request cycle (`read_timeout_s`), capped heads and bodies. The agent adds routes of
its own (`ExtraRoute`, e.g. indirect probes), whose cycle deadline grows by their
`budget_s` once the request is read. Binding, accepting and HTTP framing are
meshhealth.http_server's; this module routes, keeps the deadlines and the counters.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import h11
import trio

from meshhealth import defaults
from meshhealth.http_server import (
    ClientGoneError,
    ConnectionStats,
    HttpRequest,
    MalformedRequestError,
    RequestRejectedError,
    accept_connections,
    bound_port,
    can_respond,
    open_tcp_listener,
    read_request,
    send_response,
)
from meshhealth.probe.hello_reply import Reply, error_reply, route, text_reply

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """A request to an extra route, as its handler sees it."""

    method: str
    path: str
    query: str  # what follows "?", "" when none
    peer_ip: str  # the client's address (the connection's source)


@dataclass(frozen=True, slots=True)
class ExtraRoute:
    """A route the agent adds to its responder: `handle` answers requests to `path`
    (any method) and may take `budget_s` on top of the read deadline."""

    path: str
    handle: Callable[[RouteRequest], Awaitable[Reply]]
    budget_s: float


@dataclass(slots=True)
class ResponderStats(ConnectionStats):
    """Counters the agent's metrics read. Mutated only by the responder's tasks.

    The connection counters (accepted, rejected, active, accept errors) are
    ConnectionStats'."""

    responses_by_status: Counter[int] = field(default_factory=Counter)
    read_timeouts: int = 0  # dropped because a request cycle ran out of time
    protocol_errors: int = 0  # requests h11 rejected (answered 400/431)


async def serve_responder(
    host: str,
    port: int = defaults.HTTP_PORT,
    *,
    max_connections: int = defaults.RESPONDER_MAX_CONNECTIONS,
    read_timeout_s: float = defaults.RESPONDER_READ_TIMEOUT_S,
    node_name: str = "",
    stats: ResponderStats | None = None,
    extra_routes: Sequence[ExtraRoute] = (),
    per_source: int | None = defaults.RESPONDER_MAX_PER_SOURCE,
    reserved: int = 0,
    trusted: Callable[[str], bool] = lambda address: False,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on host:port (port 0: any free one) and serve until cancelled.

    At most `per_source` connections from one address; the last `reserved` slots only
    for `trusted` addresses (the agent's: registered NodeIPs), so an outsider cannot
    take every slot and make peers' probes fail.
    `task_status.started(port)` reports the port actually bound. Bind errors (address in
    use, not assignable) are raised as OSError before `started`; a `host` that is not an
    IP address literal raises ValueError.
    """
    if max_connections < 1:
        raise ValueError(f"max_connections must be >= 1, got {max_connections}")
    counters = stats if stats is not None else ResponderStats()
    routes = {extra.path: extra for extra in extra_routes}
    listener = await open_tcp_listener(host, port)
    try:

        async def serve_one(stream: trio.SocketStream) -> None:
            await _serve_connection(stream, counters, read_timeout_s, node_name, routes)

        task_status.started(bound_port(listener))
        await accept_connections(
            listener,
            serve_one,
            max_connections=max_connections,
            name="responder",
            stats=counters,
            per_source=per_source,
            reserved=reserved,
            trusted=trusted,
        )
    finally:
        await trio.aclose_forcefully(listener)


class _After(enum.Enum):
    """What a connection does after one request cycle."""

    NEXT_REQUEST = enum.auto()  # keep-alive: serve another request
    CLOSE = enum.auto()
    LINGER_CLOSE = enum.auto()  # an error reply went out with unread input: linger first


async def _serve_connection(
    stream: trio.SocketStream,
    stats: ResponderStats,
    read_timeout_s: float,
    node_name: str,
    routes: dict[str, ExtraRoute],
) -> None:
    """Serve requests until the client closes or a cycle runs out of time. The caller
    (accept_connections) counts the connection and closes the stream."""
    conn = h11.Connection(
        our_role=h11.SERVER, max_incomplete_event_size=defaults.RESPONDER_MAX_HEAD_BYTES
    )
    try:
        while True:
            with trio.move_on_after(read_timeout_s) as cycle:
                after = await _serve_one_request(stream, conn, stats, node_name, routes, cycle)
            if cycle.cancelled_caught:
                stats.read_timeouts += 1
                return
            if after is _After.LINGER_CLOSE:
                await _lingering_close(stream)
            if after is not _After.NEXT_REQUEST:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, ClientGoneError):
        return


async def _serve_one_request(  # noqa: PLR0917 - one call site, private
    stream: trio.SocketStream,
    conn: h11.Connection,
    stats: ResponderStats,
    node_name: str,
    routes: dict[str, ExtraRoute],
    cycle: trio.CancelScope,
) -> _After:
    """Read one request and answer it."""
    try:
        request = await read_request(stream, conn, defaults.RESPONDER_MAX_BODY_BYTES)
    except RequestRejectedError as exc:
        if isinstance(exc, MalformedRequestError):
            stats.protocol_errors += 1
        if not can_respond(conn):  # pragma: no cover
            return _After.CLOSE
        await _send_reply(stream, conn, error_reply(exc.status_code), stats, close=True)
        return _After.LINGER_CLOSE
    extra = routes.get(request.path)
    if extra is not None:
        cycle.deadline += extra.budget_s
        reply = await _extra_reply(extra, request, stream)
    else:
        method = request.method.encode("ascii", "replace")
        reply = route(method, request.path.encode("ascii", "replace"), node_name)
    await _send_reply(stream, conn, reply, stats)
    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
        return _After.NEXT_REQUEST
    return _After.CLOSE


async def _extra_reply(extra: ExtraRoute, request: HttpRequest, stream: trio.SocketStream) -> Reply:
    """The extra route's answer; a handler that fails is logged and answered 500, and
    the responder goes on serving."""
    try:
        peer_ip = str(stream.socket.getpeername()[0])
    except OSError:  # the client is gone already
        raise ClientGoneError from None
    try:
        return await extra.handle(
            RouteRequest(request.method, request.path, request.query, peer_ip)
        )
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return text_reply(500, "internal error")


async def _lingering_close(stream: trio.SocketStream) -> None:
    """Half-close, then discard what the client still sends, briefly (RESPONDER_LINGER_S).

    Closing a socket with unread input makes the kernel send RST, which can destroy our
    error response before the client reads it. As HTTP servers do (Apache's lingering
    close), we shut down our side and drain a bounded amount for a bounded time.
    """
    await stream.send_eof()
    drained = 0
    with trio.move_on_after(defaults.RESPONDER_LINGER_S):
        while drained < defaults.RESPONDER_LINGER_MAX_BYTES:
            chunk = await stream.receive_some(defaults.RESPONDER_RECEIVE_CHUNK_BYTES)
            if not chunk:
                return
            drained += len(chunk)


async def _send_reply(
    stream: trio.SocketStream,
    conn: h11.Connection,
    reply: Reply,
    stats: ResponderStats,
    *,
    close: bool = False,
) -> None:
    # Counted before the write, so a client that has the answer can see the count.
    stats.responses_by_status[reply.status_code] += 1
    await send_response(
        stream,
        conn,
        reply.status_code,
        reply.headers,
        reply.body,
        close=close,
        head_only=reply.head_only,
    )
