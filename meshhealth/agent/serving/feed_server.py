"""The live feed: a WebSocket (trio-websocket) that streams what the prober finds.

    hub = FeedHub(results, status.document)
    hub.publish_path(path_report, previous)  # each result, once `results` has it; sync
    hub.publish_round(round_report)          # once the round is in `results` and status
    await nursery.start(serve_feed_unix, "/run/meshhealth/health.feed.sock", hub)
    await nursery.start(serve_feed_tcp, "127.0.0.1", 4241, hub)

The hub keeps no results of its own: it reads the agent's one record of them and builds
no message while nobody watches. Each client has its own task and `CoalescingQueue`
(meshhealth.documents.feed), so a slow client only delays itself and is disconnected
when too far behind. On TCP a browser's upgrade is refused unless its `Origin` is
allowed (web_access.py); the unix socket relies on its mode. Both listeners hand their
streams to `trio_websocket.wrap_server_stream`, one code path; trio-websocket is
imported when the first viewer connects, so an agent nobody watches does not carry it
(docs/performance.md, "Process size").
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from meshhealth import defaults
from meshhealth.agent.serving.unix_socket import unix_listener
from meshhealth.agent.serving.web_access import WebAccess
from meshhealth.documents.feed import (
    FEED_PATH,
    ROUND_KEY,
    SNAPSHOT_KEY,
    CoalescingQueue,
    encode,
    path_changes,
    path_message,
    round_message,
    snapshot_message,
)
from meshhealth.documents.status import PathVerdictLike
from meshhealth.documents.status_schema import StatusDocument
from meshhealth.http_server import accept_connections
from meshhealth.model import PathKey, PathReport, PathSummary, ProbeResult, RoundReport

if TYPE_CHECKING:
    from trio_websocket import WebSocketConnection

log = logging.getLogger(__name__)

# Close code sent with the `lagging` message: 1013 "try again later".
CLOSE_LAGGING = 1013


@dataclass(frozen=True, slots=True)
class FeedLimits:
    max_clients: int = defaults.FEED_MAX_CLIENTS
    max_pending: int = defaults.FEED_MAX_PENDING
    max_rounds_behind: int = defaults.FEED_MAX_ROUNDS_BEHIND
    lagging_grace_s: float = defaults.FEED_LAGGING_GRACE_S
    handshake_timeout_s: float = defaults.FEED_HANDSHAKE_TIMEOUT_S


@dataclass(eq=False, slots=True)
class FeedClient:
    name: str
    queue: CoalescingQueue
    wake: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    sent: int = 0


@dataclass(slots=True)
class FeedStats:
    connected_total: int = 0
    lagging_total: int = 0
    rejected_total: int = 0
    origin_refused_total: int = 0  # upgrades from a page whose Origin is not allowed
    messages_built: int = 0  # snapshot, path and round messages (none while nobody watches)


class PathResults(Protocol):
    """What the hub reads of the agent's results (meshhealth.agent.probe_results)."""

    @property
    def running_round(self) -> Mapping[PathKey, PathReport]:
        """Paths with a result in the running round, and that result."""
        ...

    def summary(self, key: PathKey) -> PathSummary | None:
        """One path's summary now, the running round's result included."""
        ...

    @property
    def verdicts(self) -> PathVerdictSource:
        """Each path's suspicion verdict."""
        ...


class PathVerdictSource(Protocol):
    def get(self, key: PathKey) -> PathVerdictLike | None: ...


class FeedHub:
    """Fans the prober's results out to every connected client (see the module doc)."""

    def __init__(
        self,
        results: PathResults,
        status: Callable[[], StatusDocument],
        *,
        limits: FeedLimits | None = None,
    ) -> None:
        self.results = results
        self.status = status  # the status document: the snapshot and the round messages
        self.limits = limits or FeedLimits()
        self.clients: set[FeedClient] = set()
        self.stats = FeedStats()
        self.seq = 0  # the newest message's number

    def _next_seq(self) -> int:
        self.seq += 1
        self.stats.messages_built += 1
        return self.seq

    def attach(self, name: str) -> FeedClient:
        """A new client, its queue holding the snapshot and the running round's paths."""
        client = FeedClient(
            name,
            CoalescingQueue(
                max_pending=self.limits.max_pending,
                max_rounds_behind=self.limits.max_rounds_behind,
            ),
        )
        self.stats.messages_built += 1
        client.queue.put(SNAPSHOT_KEY, encode(snapshot_message(self.status(), self.seq)))
        for key, report in self.results.running_round.items():
            summary = self.results.summary(key)
            if summary is not None and summary.last is not None:
                self.stats.messages_built += 1
                message = path_message(
                    key, report.ip, summary, [], self.seq, verdict=self.results.verdicts.get(key)
                )
                client.queue.put(key, encode(message))
        self.clients.add(client)
        self.stats.connected_total += 1
        client.wake.set()
        return client

    def detach(self, client: FeedClient) -> None:
        self.clients.discard(client)

    def _fan_out(self, key: object, message: str, *, is_round: bool = False) -> None:
        for client in self.clients:
            was_lagging = client.queue.lagging
            if not client.queue.put(key, message, is_round=is_round) and not was_lagging:
                # Told (the `lagging` message is all its queue holds now), then cut off
                # after the grace period whether it reads it or not.
                self.stats.lagging_total += 1
                log.info("feed client %s is lagging: disconnecting it", client.name)
                client.scope.deadline = trio.current_time() + self.limits.lagging_grace_s
            client.wake.set()

    def publish_path(self, report: PathReport, previous: ProbeResult | None) -> None:
        """One path result, already in `results`; `previous` is the path's result before
        it (for `changed`). Nothing is built when nobody watches."""
        if not self.clients:
            return
        summary = self.results.summary(report.path)
        if summary is None:  # not in the record: nothing to say about it
            return
        changed = path_changes(previous, report.result)
        message = path_message(
            report.path,
            report.ip,
            summary,
            changed,
            self._next_seq(),
            verdict=self.results.verdicts.get(report.path),
        )
        self._fan_out(report.path, encode(message))

    def publish_round(self, report: RoundReport) -> None:
        """A finished round, already in `results` and the status document."""
        if not self.clients:
            return
        message = round_message(self.status(), report.duration_s, self._next_seq())
        self._fan_out(ROUND_KEY, encode(message), is_round=True)


async def _pump(ws: WebSocketConnection, client: FeedClient) -> None:
    """Send the client's queue until it is finished (lagging) or the connection ends."""
    while True:
        message = client.queue.pop()
        if message is None:
            if client.queue.finished:
                return
            await client.wake.wait()
            client.wake = trio.Event()
            continue
        await ws.send_message(message)
        client.sent += 1


async def _ignore_incoming(ws: WebSocketConnection, done: trio.CancelScope) -> None:
    """Read (and drop) what the client sends, so pings and the close frame get through."""
    from trio_websocket import ConnectionClosed

    try:
        while True:
            await ws.get_message()
    except ConnectionClosed:
        done.cancel()


async def _load_websocket_library() -> None:
    """Import trio_websocket for the first viewer's connection, in a worker thread (it
    takes a few hundred ms; the loop keeps running meanwhile). Then it is a dict lookup."""
    if "trio_websocket" not in sys.modules:
        await trio.to_thread.run_sync(
            importlib.import_module, "trio_websocket", limiter=trio.CapacityLimiter(1)
        )


OriginCheck = Callable[[str | None], bool]


def _origin(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"origin":
            return value.decode("latin-1")
    return None


async def handle_feed_stream(
    stream: trio.abc.Stream, hub: FeedHub, name: str, *, origin_allowed: OriginCheck | None = None
) -> None:
    """One connection: the opening handshake, then the client's queue until it ends.
    With `origin_allowed`, an upgrade whose `Origin` it refuses gets 403."""
    await _load_websocket_library()
    from trio_websocket import ConnectionClosed, HandshakeError, wrap_server_stream

    async with trio.open_nursery() as nursery:  # trio-websocket's reader task
        try:
            with trio.fail_after(hub.limits.handshake_timeout_s):
                request = await wrap_server_stream(nursery, stream)
                origin = _origin(request.headers)
                if origin_allowed is not None and not origin_allowed(origin):
                    hub.stats.origin_refused_total += 1
                    log.warning("%s: refused a feed upgrade from a page of %r", name, origin)
                    body = f"the feed is not served to pages of {origin!r}\n".encode()
                    await request.reject(403, body=body)
                    ws = None
                elif request.path.split("?", 1)[0] != FEED_PATH:
                    await request.reject(404, body=f"the feed is at {FEED_PATH}\n".encode())
                    ws = None
                elif len(hub.clients) >= hub.limits.max_clients:
                    hub.stats.rejected_total += 1
                    await request.reject(503, body=b"too many feed clients\n")
                    ws = None
                else:
                    ws = await request.accept()
        except (trio.TooSlowError, HandshakeError, ConnectionClosed, trio.BrokenResourceError):
            ws = None
        if ws is None:
            nursery.cancel_scope.cancel()
            await stream.aclose()
            return
        client = hub.attach(name)
        try:
            with client.scope:
                async with trio.open_nursery() as inner:
                    inner.start_soon(_ignore_incoming, ws, inner.cancel_scope)
                    await _pump(ws, client)
                    inner.cancel_scope.cancel()
        except* ConnectionClosed:  # the viewer went away, also while a send was running
            pass
        finally:
            hub.detach(client)
            with trio.move_on_after(hub.limits.lagging_grace_s) as closing:
                closing.shield = True
                code = CLOSE_LAGGING if client.queue.lagging else 1000
                await ws.aclose(code, "lagging" if client.queue.lagging else None)
            with trio.CancelScope(shield=True):
                await stream.aclose()  # ws.aclose leaves it open when the viewer cut first
            nursery.cancel_scope.cancel()


async def serve_feed(
    listener: trio.abc.Listener[Any],
    hub: FeedHub,
    where: str,
    *,
    origin_allowed: OriginCheck | None = None,
) -> None:
    """Accept connections on `listener` until cancelled; each in its own task. At most
    FEED_MAX_CONNECTIONS at once, handshakes included, and FEED_MAX_PER_SOURCE from one
    address (TCP): a flood of half-open connections cannot hold the agent's tasks."""
    counter = 0

    async def serve_one(stream: trio.abc.Stream) -> None:
        nonlocal counter
        counter += 1
        await handle_feed_stream(stream, hub, f"{where}#{counter}", origin_allowed=origin_allowed)

    await accept_connections(
        listener,
        serve_one,
        max_connections=defaults.FEED_MAX_CONNECTIONS,
        name=f"feed {where}",
        per_source=defaults.FEED_MAX_PER_SOURCE,
    )


async def serve_feed_unix(
    socket_path: str,
    hub: FeedHub,
    *,
    mode: int = defaults.ADMIN_SOCKET_MODE,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The feed on a unix socket (created like the admin socket: a stale file is
    replaced, a live one refused with AdminSocketError; removed on exit)."""
    async with unix_listener(socket_path, mode) as listener:
        task_status.started(socket_path)
        await serve_feed(listener, hub, f"unix:{socket_path}")


async def serve_feed_tcp(
    host: str,
    port: int,
    hub: FeedHub,
    *,
    node_ips: Sequence[str | None] = (),
    peer_ips: Callable[[], Sequence[str | None]] = lambda: (),
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The feed on TCP `host:port` (port 0: any free port; `started` gives the port).
    A browser page may open it only from an origin the web page's rule allows
    (`node_ips`: this node's addresses; `peer_ips()`: other agents')."""
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=defaults.FEED_LISTEN_BACKLOG)
    listener = listeners[0]
    bound_port: int = listener.socket.getsockname()[1]
    access = WebAccess.for_listen(host, bound_port, node_ips=node_ips)
    try:
        task_status.started(bound_port)
        await serve_feed(
            listener,
            hub,
            f"{host}:{bound_port}",
            origin_allowed=lambda origin: access.origin_allowed(origin, peer_ips()),
        )
    finally:
        for each in listeners:
            each.socket.close()
