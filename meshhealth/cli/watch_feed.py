"""`meshhealth watch` from an agent: its live feed (WebSocket) and its matrix (admin API).

    target = feed_target(host, url, os.environ)          # where the feed is
    await run_feed(state, target, notify, event, once=False, on_round=matrix.request)
    matrix = AgentMatrix(state, admin_socket_path)      # GET /v1/matrix when shown

The feed follows the agent through restarts (reconnecting with back-off). The matrix is
read from the agent's admin socket (the agent knows its etcd and every meshed cluster's)
while the matrix view is shown: when it is opened, and after every round.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    wrap_client_stream,
)

from meshhealth import defaults
from meshhealth.admin_client import AdminUnavailable, admin_request, socket_path_from_host
from meshhealth.cli.watch_cmd import Event, Notify, WatchError, first_leaf
from meshhealth.cli.watch_state import WatchState, apply_feed_message
from meshhealth.documents.feed import FEED_PATH, feed_socket_path
from meshhealth.documents.matrix_json import MatrixDocument

MATRIX_TIMEOUT_S = defaults.ADMIN_REQUEST_TIMEOUT_S + defaults.MATRIX_READ_TIMEOUT_S


class FeedLost(Exception):
    """The feed connection failed or ended; str() says why (one line)."""


@dataclass(frozen=True, slots=True)
class FeedTarget:
    label: str  # shown in the header
    unix_path: str | None = None
    host: str | None = None
    port: int | None = None
    resource: str = FEED_PATH
    admin_socket: str | None = None  # the agent's admin API (its matrix), when known


def feed_target(host: str | None, url: str | None, env: Mapping[str, str]) -> FeedTarget:
    """-H / --url / the environment -> where the feed is; ValueError for bad input."""
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "ws" or not parts.hostname or parts.port is None:
            raise ValueError(f"expected ws://HOST:PORT, got {url!r}")
        resource = parts.path or FEED_PATH
        return FeedTarget(url, host=parts.hostname, port=parts.port, resource=resource)
    admin = socket_path_from_host(
        host or env.get(defaults.ADMIN_SOCKET_ENV) or defaults.ADMIN_SOCKET
    )
    path = feed_socket_path(admin)
    return FeedTarget(f"unix://{path}", unix_path=path, admin_socket=admin)


def _why(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file (is the agent running?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the agent running?)"
    if isinstance(exc, ConnectionRejected):
        return f"the agent refused the feed: HTTP {exc.status_code}"
    if isinstance(exc, ConnectionClosed):
        reason = exc.reason
        if reason is not None and reason.code == 1013:
            return "the agent dropped this viewer: it was lagging"
        return "the agent closed the feed"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return type(exc).__name__.replace("Error", " error").strip() or "error"


EXPECTED = (OSError, trio.BrokenResourceError, trio.TooSlowError, HandshakeError, ConnectionClosed)


async def consume_feed(
    target: FeedTarget, on_open: Callable[[], None], on_text: Callable[[str], None]
) -> None:
    """One connection: handshake, then every message to `on_text`. Raises FeedLost."""
    try:
        with trio.fail_after(defaults.FEED_HANDSHAKE_TIMEOUT_S):
            if target.unix_path is not None:
                stream = await trio.open_unix_socket(target.unix_path)
            else:
                assert target.host is not None and target.port is not None
                stream = await trio.open_tcp_stream(target.host, target.port)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(defaults.FEED_HANDSHAKE_TIMEOUT_S):
                ws = await wrap_client_stream(
                    nursery, stream, target.host or "localhost", target.resource
                )
            on_open()
            try:
                while True:
                    on_text(str(await ws.get_message()))
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        matched, rest = group.split((*EXPECTED, FeedLost))
        if rest is not None or matched is None:
            raise
        leaf = first_leaf(matched)
        if isinstance(leaf, FeedLost):
            raise leaf from None
        raise FeedLost(_why(leaf)) from None
    except EXPECTED as exc:
        raise FeedLost(_why(exc)) from None


async def run_feed(
    state: WatchState,
    target: FeedTarget,
    notify: Notify,
    event: Event,
    *,
    once: bool,
    on_round: Callable[[], None] = lambda: None,
) -> None:
    """Follow the feed, reconnecting with back-off, until cancelled (or one snapshot).
    `on_round` runs after the snapshot and after every `round` message."""
    delay_s = defaults.WATCH_RETRY_MIN_S
    done = False

    def on_open() -> None:
        nonlocal delay_s
        delay_s = defaults.WATCH_RETRY_MIN_S
        state.connection, state.connection_detail = "connected", ""
        event(f"connected to {target.label}")

    def on_text(text: str) -> None:
        nonlocal done
        try:
            message = json.loads(text)
            changes = apply_feed_message(state, message, now=time.time())
        except ValueError as exc:  # includes JSONDecodeError
            raise WatchError(f"{target.label}: {exc}") from None
        notify(changes)
        if message.get("type") in ("snapshot", "round"):
            on_round()
        if once and message.get("type") == "snapshot":
            done = True
            raise FeedLost("done")

    while True:
        try:
            await consume_feed(target, on_open, on_text)
            detail = "the agent closed the feed"
        except FeedLost as exc:
            detail = str(exc)
        if done:
            return
        if once:
            raise WatchError(f"cannot read the feed at {target.label}: {detail}")
        if state.connection != "disconnected":
            event(f"disconnected from {target.label}: {detail}; retrying")
        state.connection, state.connection_detail = "disconnected", detail
        notify([])
        await trio.sleep(delay_s)
        delay_s = min(delay_s * 2, defaults.WATCH_RETRY_MAX_S)


class AgentMatrix:
    """The cluster-wide matrix from the agent's admin API, read while it is shown."""

    def __init__(self, state: WatchState, socket_path: str) -> None:
        self.state = state
        self.socket_path = socket_path
        self._wanted = trio.Event()

    def request(self) -> None:
        """Read the matrix again soon, if the matrix view is shown."""
        self._wanted.set()

    async def run(self, notify: Notify) -> None:
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            if self.state.mode == "matrix":
                await self.fetch()
                notify([])

    async def fetch(self) -> bool:
        """GET /v1/matrix into the state (or why not into `matrix_note`); True on success."""
        where = f"matrix: cannot read it from the agent at {self.socket_path}"
        try:
            code, doc = await admin_request(
                self.socket_path, "GET", "/v1/matrix", timeout_s=MATRIX_TIMEOUT_S
            )
        except AdminUnavailable as exc:
            self.state.matrix_note = f"matrix: {exc}"
            return False
        if code != 200:
            self.state.matrix_note = f"{where}: HTTP {code}: {doc.get('error', doc)}"
            return False
        if not isinstance(doc.get("nodes"), list) or not isinstance(doc.get("rows"), list):
            self.state.matrix_note = f"{where}: the answer is not a matrix document"
            return False
        self.state.matrix = cast(MatrixDocument, doc)
        self.state.matrix_note = ""
        return True
