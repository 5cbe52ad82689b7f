"""`meshhealth watch`: a live view of the mesh, from an agent's feed or from etcd.

On a terminal: a full-screen view (rich Live) redrawn on every update and every second;
`q` quits, `m` toggles list/matrix. Keys are read from stdin in cbreak mode with
`trio.lowlevel.wait_readable` (no thread; stdin keeps its blocking mode, so stdout,
often the same tty, is not affected); the terminal is restored on every way out
(q, Ctrl-C, SIGTERM, SIGHUP, errors). Without a terminal or with `--plain`: one line per
change. `--once`: one frame, then exit.

Exit codes: 0 after q / --once / a signal, 2 when the source cannot be used with --once
or the arguments are wrong, 1 when the agent speaks a feed version this viewer does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from meshhealth import defaults
from meshhealth.cli.common import add_etcd_access_options, etcd_access_from_args, print_error

if TYPE_CHECKING:
    from meshhealth.cli.watch_state import Change, WatchState
    from meshhealth.kvstore.etcd_config import EtcdAccess

DESCRIPTION = f"""\
A live view of the mesh: one row per node (grouped by cluster), a cell per path (host /
endpoint x ICMP / HTTP) with status, RTT, loss over the window and a latency sparkline,
and a header with `Cluster health: X/Y reachable` and etcd's state. Reconnects by
itself when the agent restarts. Keys: q quits, m toggles list / matrix.

sources (one of):
  -H unix://PATH     the agent's admin socket (its feed is beside it: X.sock -> X.feed.sock)
                     default: ${defaults.ADMIN_SOCKET_ENV} or unix://{defaults.ADMIN_SOCKET}
  --url ws://H:P     an agent started with --feed-listen H:P
  --etcd URLS        every node's published results (the whole matrix); no agent needed

examples:
  meshhealth watch
  meshhealth watch -H unix:///tmp/mh-lab/node1.sock
  meshhealth watch --url ws://10.0.0.5:4241 --plain | tee changes.log
  meshhealth watch --etcd http://127.0.0.1:2379 --view matrix --once
"""


class WatchError(Exception):
    """A one-line error for the user."""


def first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


class FeedLost(Exception):
    """The feed connection failed or ended; str() says why (one line)."""


@dataclass(frozen=True, slots=True)
class FeedTarget:
    label: str  # shown in the header
    unix_path: str | None = None
    host: str | None = None
    port: int | None = None
    resource: str = "/v1/feed"


def feed_target(host: str | None, url: str | None, env: dict[str, str]) -> FeedTarget:
    """-H / --url / the environment -> where the feed is; ValueError for bad input."""
    from meshhealth.admin_client import socket_path_from_host
    from meshhealth.documents.feed import FEED_PATH, feed_socket_path

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
    return FeedTarget(f"unix://{path}", unix_path=path, resource=FEED_PATH)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "watch",
        help="live view of the mesh (an agent's feed, or every node's results in etcd)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("-H", "--host", metavar="unix://PATH", help="the agent's admin socket")
    source.add_argument("--url", metavar="ws://HOST:PORT", help="an agent's TCP feed")
    source.add_argument("--etcd", metavar="URLS", help="read every node's results from etcd")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.add_argument(
        "--plain", action="store_true", help="one line per change, also on a terminal"
    )
    parser.add_argument(
        "--view", choices=("list", "matrix"), default="list", help="the view to start with"
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="--etcd: seconds between reads of the results (default 1)",
    )
    add_etcd_access_options(parser)
    parser.set_defaults(func=run)


# --- sources: each updates the state and calls `notify(changes)` ------------------------

Notify = Callable[[list["Change"]], None]
Event = Callable[[str], None]


def _why(exc: BaseException) -> str:
    from trio_websocket import ConnectionClosed, ConnectionRejected

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


async def consume_feed(
    target: FeedTarget, on_open: Callable[[], None], on_text: Callable[[str], None]
) -> None:
    """One connection: handshake, then every message to `on_text`. Raises FeedLost."""
    import trio
    from trio_websocket import ConnectionClosed, HandshakeError, wrap_client_stream

    expected = (
        OSError,
        trio.BrokenResourceError,
        trio.TooSlowError,
        HandshakeError,
        ConnectionClosed,
    )
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
        matched, rest = group.split((*expected, FeedLost))
        if rest is not None or matched is None:
            raise
        leaf = first_leaf(matched)
        if isinstance(leaf, FeedLost):
            raise leaf from None
        raise FeedLost(_why(leaf)) from None
    except expected as exc:
        raise FeedLost(_why(exc)) from None


async def run_feed(
    state: WatchState, target: FeedTarget, notify: Notify, event: Event, *, once: bool
) -> None:
    """Follow the feed, reconnecting with back-off, until cancelled (or one snapshot)."""
    import trio

    from meshhealth.cli.watch_state import apply_feed_message

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


async def run_etcd(
    state: WatchState,
    urls: str | EtcdAccess,
    notify: Notify,
    event: Event,
    *,
    once: bool,
    poll_s: float,
) -> None:
    """Read every node's health report every `poll_s` (and build the matrix from them)."""
    import trio

    from meshhealth import codec, keys
    from meshhealth.cli.watch_state import apply_health_reports
    from meshhealth.kvstore import EtcdUnavailable, open_etcd
    from meshhealth.kvstore.endpoints import parse_endpoints

    build_matrix: Callable[..., Any] | None
    try:
        from meshhealth.documents.matrix import build_matrix
    except ImportError:  # the list works without the matrix module
        build_matrix = None
    try:
        if isinstance(urls, str):
            parse_endpoints(urls)
    except ValueError as exc:
        raise WatchError(f"--etcd: {exc}") from None
    async with open_etcd(urls, liveness=False) as etcd:
        while True:
            try:
                kvs, _ = await etcd.get_prefix(keys.health_prefix())
            except EtcdUnavailable as exc:
                if once:
                    raise WatchError(str(exc)) from None
                if state.connection != "disconnected":
                    event(f"etcd unavailable: {exc}; retrying")
                state.connection, state.connection_detail = "disconnected", str(exc)
                state.etcd_up, state.etcd_error = False, str(exc)
                notify([])
            else:
                reports = []
                for kv in kvs:
                    try:
                        reports.append(codec.decode_health_report(kv.value))
                    except codec.DecodeError:
                        continue  # one bad entry must not hide the others
                if state.connection != "connected":
                    event(f"reading {etcd.description}")
                state.connection, state.connection_detail = "connected", ""
                state.etcd_up, state.etcd_error = True, None
                now = time.time()
                matrix = build_matrix(reports, now=now) if build_matrix else None
                notify(apply_health_reports(state, reports, now=now, matrix=matrix))
            if once:
                return
            await trio.sleep(poll_s)


# --- outputs ------------------------------------------------------------------------


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one by one and are not echoed; the old mode comes back on exit."""
    import termios
    import tty

    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


async def read_keys(fd: int, on_key: Callable[[str], None]) -> None:
    import trio

    while True:
        await trio.lowlevel.wait_readable(fd)
        data = os.read(fd, 64)
        if not data:
            return  # stdin closed: keys are gone, the view goes on
        for key in data.decode(errors="ignore"):
            on_key(key)


async def _stop_on_signal(cancel: Callable[[], None]) -> None:
    import signal

    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            cancel()
            return


async def run_live(state: WatchState, source: Callable[[Notify, Event], Any]) -> None:
    """The full-screen view until q or a signal."""
    import trio
    from rich.console import Console
    from rich.live import Live

    from meshhealth.cli.watch_view import render_frame

    console = Console()
    dirty = trio.Event()

    def notify(changes: list[Change]) -> None:
        dirty.set()

    stdin = sys.stdin.fileno()
    keys_ok = os.isatty(stdin)
    with (
        cbreak(stdin) if keys_ok else _nothing(),
        Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False) as live,
    ):
        async with trio.open_nursery() as nursery:

            def on_key(key: str) -> None:
                if key in ("q", "Q"):
                    nursery.cancel_scope.cancel()
                elif key in ("m", "M"):
                    state.mode = "matrix" if state.mode == "list" else "list"
                    dirty.set()

            nursery.start_soon(source, notify, lambda text: None)
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope.cancel)
            if keys_ok:
                nursery.start_soon(read_keys, stdin, on_key)
            while True:
                live.update(render_frame(state, now=time.time()), refresh=True)
                with trio.move_on_after(1.0):
                    await dirty.wait()
                dirty = trio.Event()
                await trio.sleep(0.05)  # at most ~20 frames a second


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run_plain(state: WatchState, source: Callable[[Notify, Event], Any]) -> None:
    """One line per change (and per connection event) until a signal."""
    import trio

    from meshhealth.cli.watch_view import change_line, event_line

    def notify(changes: list[Change]) -> None:
        for change in changes:
            _print_line(change_line(change))

    def event(text: str) -> None:
        _print_line(event_line(time.time(), text))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal, nursery.cancel_scope.cancel)
        await source(notify, event)
        nursery.cancel_scope.cancel()


def run(args: argparse.Namespace) -> int:
    import trio

    from meshhealth.cli.watch_state import WatchState
    from meshhealth.cli.watch_view import frame_text

    def fail(message: str, code: int = 2) -> int:
        print_error("watch", message)
        return code

    if args.poll <= 0:
        return fail("--poll: must be a positive number of seconds")
    source: Callable[[Notify, Event], Any]
    if args.etcd is not None:
        state = WatchState(source=f"etcd {args.etcd}")
        try:
            urls = etcd_access_from_args(args, args.etcd)
        except ValueError as exc:  # a bad endpoint list, TLS option or etcd config file
            return fail(f"--etcd: {exc}")

        async def source(notify: Notify, event: Event) -> None:
            await run_etcd(state, urls, notify, event, once=args.once, poll_s=args.poll)

    else:
        try:
            target = feed_target(args.host, args.url, dict(os.environ))
        except ValueError as exc:
            return fail(str(exc))
        state = WatchState(source=target.label)

        async def source(notify: Notify, event: Event) -> None:
            await run_feed(state, target, notify, event, once=args.once)

    state.mode = args.view
    try:
        if args.once:
            trio.run(source, lambda changes: None, lambda text: None)
            width = shutil.get_terminal_size((120, 40)).columns
            sys.stdout.write(frame_text(state, now=time.time(), width=max(width, 100)))
            return 0
        if args.plain or not sys.stdout.isatty():
            trio.run(run_plain, state, source)
        else:
            trio.run(run_live, state, source)
    except BaseException as error:  # trio wraps errors of tasks in groups
        leaf = first_leaf(error)
        if isinstance(leaf, WatchError):
            return fail(str(leaf), 1 if "version" in str(leaf) else 2)
        if isinstance(leaf, BrokenPipeError | KeyboardInterrupt):
            return 0
        raise
    return 0
