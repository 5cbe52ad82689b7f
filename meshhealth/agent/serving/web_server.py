"""`--web-listen IP:PORT`: the live web page of the mesh, its JSON and its WebSocket feed.

    data = WebData(local=("lab1", "node1"), interval_s=10, status=agent.status_document,
                   read_matrix=read, history=path_history, feed=feed_hub,
                   nodes=probe_targets.nodes)
    port = await nursery.start(serve_web, "10.77.0.1", 9963, data)

One TCP port serves the page (its files from the package, no CDN), its JSON routes
(`/v1/web/...`, one route table: route_table.py) and the live feed's WebSocket upgrade.
The matrix and the timeline are read from etcd through a cache (`ReadCache`, single
flight), so viewers do not multiply reads. Who may ask is web_access.py's (Host and
Origin checks), the token bearer_token.py's, TLS server_tls.py's. A connection's first
request head is read here: a feed upgrade goes with the bytes already read to the feed's
handler, anything else to meshhealth.http_server's connection loop. docs/ui.md lists
the routes.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs

import h11
import trio

from meshhealth import defaults
from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.serving.bearer_token import BearerToken
from meshhealth.agent.serving.feed_server import FeedHub, handle_feed_stream
from meshhealth.agent.serving.route_table import Route, RouteTable
from meshhealth.agent.serving.server_tls import tls_listener
from meshhealth.agent.serving.web_access import WebAccess, is_wildcard
from meshhealth.agent.serving.web_views import (
    cell_document,
    compact_matrix_document,
    parse_node_ref,
)
from meshhealth.diagnosis.timeline import since
from meshhealth.documents.events import events_document
from meshhealth.documents.feed import FEED_PATH
from meshhealth.documents.matrix import Matrix, NodeRef
from meshhealth.http_server import (
    ClientGoneError,
    HttpRequest,
    HttpResponse,
    ServerLimits,
    accept_connections,
    bound_port,
    open_tcp_listener,
    read_request,
    send_response,
    serve_connection,
)
from meshhealth.kvstore import EtcdError
from meshhealth.model import REACHABILITY_PROTOCOLS, PathKey, Target, TargetType, path_name
from meshhealth.wire.event import FindingEvent

log = logging.getLogger(__name__)
T = TypeVar("T")

ASSETS: Mapping[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
# The page loads only its own files; it may talk to other agents' /v1/web/cell.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; connect-src 'self' ws: wss: http: https:; img-src 'self' data:; "
    "frame-ancestors 'none'"
)


@dataclass(frozen=True, slots=True)
class WebData:
    """What the page shows, as the agent has it."""

    local: NodeRef
    interval_s: float
    status: Callable[[], Mapping[str, Any]]  # the status document
    read_matrix: Callable[[], Awaitable[Matrix]]  # from etcd (every admitted cluster)
    # this cluster's findings timeline, from etcd (EtcdError when it cannot be read)
    read_events: Callable[[], Awaitable[Sequence[FindingEvent]]]
    history: PathHistory
    feed: FeedHub
    # Every node the agent follows (discovery, meshed clusters, retained), not only
    # those it probes: the NodeIPs of the page's node list.
    nodes: Callable[[], Sequence[Target]]
    # This node's own NodeIPs and the extra names of `--web-allowed-hosts`: with the
    # listen address and its port, who may read the page (web_access.WebAccess).
    node_ips: tuple[str | None, ...]
    allowed_hosts: tuple[str, ...] = ()

    def peer_ips(self) -> list[str | None]:
        """The NodeIPs of the nodes this agent follows: other agents' pages."""
        return [ip for t in self.nodes() for ip in (t.node_ip, t.node_ip_secondary)]


def load_assets() -> dict[str, bytes]:
    """The page's files from the package (meshhealth/web/), by file name."""
    folder = resources.files("meshhealth.web")
    return {name: folder.joinpath(name).read_bytes() for name, _ in set(ASSETS.values())}


class ReadCache(Generic[T]):
    """The newest value read, read again when older than `max_age_s`; one read at a
    time (the matrix, the timeline)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[T]],
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = trio.Lock()
        self._value: T | None = None
        self._read_at = float("-inf")
        self.reads = 0

    async def get(self) -> T:
        async with self._lock:
            if self._value is None or self._clock() - self._read_at >= self.max_age_s:
                self._value = await self._read()
                self._read_at = self._clock()
                self.reads += 1
            return self._value


def header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    """The value of header `name` (lower-case names), None when absent."""
    return next((value for key, value in headers if key == name), None)


def head_headers(head: bytes) -> list[tuple[str, str]]:
    """A raw request head's headers, names lower-case (pure; latin-1 as HTTP is)."""
    out = []
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out.append((name.strip().lower().decode("latin-1"), value.strip().decode("latin-1")))
    return out


def _json_response(document: Any, *, headers: tuple[tuple[str, str], ...] = ()) -> HttpResponse:
    body = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    return HttpResponse(200, body, JSON, headers=(("Cache-Control", "no-store"), *headers))


def text_error(status_code: int, message: str) -> HttpResponse:
    return HttpResponse(status_code, f"{message}\n".encode(), TEXT)


class WebApp:
    """Answers the page's requests (everything but the WebSocket)."""

    def __init__(
        self,
        data: WebData,
        access: WebAccess,
        assets: Mapping[str, bytes],
        max_age_s: float,
        token: BearerToken | None = None,
    ) -> None:
        self.data = data
        self.access = access
        self.token = token
        self.assets = assets
        self.matrix = ReadCache(data.read_matrix, max_age_s)
        self.events = ReadCache(data.read_events, defaults.WEB_EVENTS_MAX_AGE_S)
        # The compact document of the cached matrix, encoded once for every viewer.
        self._compact: tuple[Matrix, bytes] | None = None
        self.routes = RouteTable(
            "web",
            [
                *(Route(path, "GET", self._asset, public=True) for path in ASSETS),
                Route("/v1/web/status", "GET", self._status),
                Route("/v1/web/matrix", "GET", self._compact_matrix),
                Route("/v1/web/events", "GET", self._events),
                Route("/v1/web/cell", "GET", self._cell),
                Route(FEED_PATH, "GET", self._feed_without_upgrade),
            ],
            error=text_error,
            hint="the page is at /",
            guard=(lambda request: token.refusal(request.headers)) if token else None,
        )

    async def handle(self, request: HttpRequest) -> HttpResponse:
        host = header(request.headers, "host")
        if not self.access.host_allowed(host):
            return text_error(421, f"web: Host {host!r} is not this page's address")
        return await self.routes.answer(request)

    async def _asset(self, request: HttpRequest) -> HttpResponse:
        if self.token is not None and request.path == "/":
            login = self.token.login(request.query, secure=self.access.https)
            if login is not None:
                return login
        name, content_type = ASSETS[request.path.rstrip("/") or "/"]
        return HttpResponse(
            200,
            self.assets[name],
            content_type,
            headers=(
                ("Cache-Control", "no-cache"),
                ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
                ("X-Content-Type-Options", "nosniff"),
            ),
        )

    async def _status(self, _: HttpRequest) -> HttpResponse:
        return _json_response(self.data.status())

    async def _feed_without_upgrade(self, _: HttpRequest) -> HttpResponse:
        return text_error(400, f"{FEED_PATH} is a WebSocket: connect with Upgrade: websocket")

    async def _compact_matrix(self, _: HttpRequest) -> HttpResponse:
        matrix = await self.matrix.get()
        if self._compact is None or self._compact[0] is not matrix:
            document = compact_matrix_document(matrix, self.data.nodes())
            body = json.dumps(document, separators=(",", ":")).encode()
            self._compact = (matrix, body)
        return HttpResponse(200, self._compact[1], JSON, headers=(("Cache-Control", "no-store"),))

    async def _events(self, _: HttpRequest) -> HttpResponse:
        try:
            events = await self.events.get()
        except EtcdError as error:
            return text_error(503, f"the findings timeline cannot be read: {error}")
        now = time.time()
        start = now - defaults.WEB_EVENTS_WINDOW_S
        return _json_response(events_document(since(events, start), now=now, since=start))

    async def _cell(self, request: HttpRequest) -> HttpResponse:
        origin = header(request.headers, "origin")
        params = parse_qs(request.query)
        try:
            source = parse_node_ref(params.get("source", [""])[0])
            target = parse_node_ref(params.get("target", [""])[0])
        except ValueError as error:
            return text_error(400, f"/v1/web/cell?source=C/N&target=C/N: {error}")
        history = {}
        if source == self.data.local:
            now = time.time()
            for target_type in TargetType:
                for protocol in REACHABILITY_PROTOCOLS:  # the cell's drawn paths
                    key = PathKey(target[0], target[1], target_type, protocol)
                    history[path_name(target_type, protocol)] = self.data.history.minutes(
                        key, now=now
                    )
        document = cell_document(
            await self.matrix.get(),
            source,
            target,
            local=self.data.local,
            status=self.data.status() if source == self.data.local else {},
            history=history,
            history_minutes=self.data.history.minutes_kept,
        )
        if document is None:
            return text_error(404, f"no cell {source[0]}/{source[1]} -> {target[0]}/{target[1]}")
        allowed = self.access.cors_origin(origin, self.data.peer_ips())
        cors = (("Access-Control-Allow-Origin", allowed),) if allowed else ()
        return _json_response(document, headers=(*cors, ("Vary", "Origin")))


class ReplayStream(trio.abc.Stream):
    """A stream whose first reads return `prefix` (bytes already read from `inner`)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self._prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            chunk, self._prefix = self._prefix[:size], self._prefix[size:]
            return chunk
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def read_head(
    stream: trio.abc.Stream, limit: int = defaults.HTTP_SERVER_MAX_HEAD_BYTES
) -> bytes:
    """Bytes up to and including the end of the first request head (or all there were
    when the client stopped early or passed `limit`). The caller sets the deadline."""
    data = b""
    while b"\r\n\r\n" not in data and len(data) <= limit:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data


def is_feed_upgrade(head: bytes) -> bool:
    """Whether a request head asks for the feed's WebSocket (pure)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"GET":
        return False
    if parts[1].split(b"?", 1)[0].decode("latin-1") != FEED_PATH:
        return False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"upgrade":
            return value.strip().lower() == b"websocket"
    return False


async def _send(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    response: HttpResponse,
    *,
    head_only: bool,
    close: bool,
) -> None:
    headers = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        *response.headers,
    ]
    await send_response(
        stream, conn, response.status_code, headers, response.body, close=close, head_only=head_only
    )


def feed_refusal(
    access: WebAccess,
    peer_ips: Sequence[str | None],
    headers: Sequence[tuple[str, str]],
    token: BearerToken | None = None,
) -> HttpResponse | None:
    """Why a WebSocket upgrade to the feed is refused (a foreign Host or page, no
    token when one is required), or None."""
    host = header(headers, "host")
    if not access.host_allowed(host):
        return text_error(421, f"web: Host {host!r} is not this page's address")
    origin = header(headers, "origin")
    if not access.origin_allowed(origin, peer_ips):
        return text_error(403, f"web: the feed is not served to pages of {origin!r}")
    return token.refusal(headers) if token is not None else None


async def _refuse(stream: trio.abc.Stream, response: HttpResponse, timeout_s: float) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=defaults.HTTP_SERVER_MAX_HEAD_BYTES)
    with trio.move_on_after(timeout_s):
        await read_request(stream, conn, max_body_bytes=0)
        await _send(stream, conn, response, head_only=False, close=True)


async def serve_web(
    host: str,
    port: int,
    data: WebData,
    *,
    max_connections: int = defaults.WEB_MAX_CONNECTIONS,
    read_timeout_s: float = defaults.WEB_READ_TIMEOUT_S,
    tls: ssl.SSLContext | None = None,
    token: BearerToken | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; `started(port)` gives the bound port (0: any free one).
    Bind errors are raised as OSError before `started`. `tls`: HTTPS only; `token`:
    the JSON routes and the feed need it."""
    listener = await open_tcp_listener(host, port)
    port_bound = bound_port(listener)
    where = f"web {host}:{port_bound}"
    access = WebAccess.for_listen(
        host, port_bound, node_ips=data.node_ips, extra=data.allowed_hosts, https=tls is not None
    )
    app = WebApp(
        data,
        access,
        load_assets(),
        max_age_s=data.interval_s * defaults.WEB_MATRIX_MAX_AGE_FRACTION,
        token=token,
    )
    if is_wildcard(host):
        log.warning(
            "%s listens on every address of this host: the page answers only to %s",
            where,
            ", ".join(sorted(access.hosts)),
        )
    limits = ServerLimits(
        max_connections, read_timeout_s, max_body_bytes=0, per_source=defaults.WEB_MAX_PER_SOURCE
    )
    counter = 0

    async def serve_one(stream: trio.abc.Stream) -> None:
        nonlocal counter
        counter += 1
        try:
            with trio.fail_after(read_timeout_s):
                head = await read_head(stream)
            replay = ReplayStream(stream, head)
            if is_feed_upgrade(head):
                refusal = feed_refusal(access, data.peer_ips(), head_headers(head), token)
                if refusal is not None:
                    log.warning("%s: refused a feed upgrade: %s", where, refusal.body.decode())
                    await _refuse(replay, refusal, read_timeout_s)
                    return
                await handle_feed_stream(replay, data.feed, f"{where}#{counter}")
            else:
                await serve_connection(replay, app.handle, text_error, limits, where)
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except ClientGoneError:
            return

    task_status.started(port_bound)
    async with tls_listener(listener, tls) as served:
        await accept_connections(
            served,
            serve_one,
            max_connections=max_connections,
            name=where,
            per_source=limits.per_source,
        )
