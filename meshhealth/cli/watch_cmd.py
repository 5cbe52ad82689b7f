"""`meshhealth watch`: a live view of the mesh, from an agent or from etcd.

The command in parts: this module (options, the sources' contract, exit codes),
cli/watch_feed.py (an agent's feed and matrix), cli/watch_etcd.py (every node's report
in etcd), cli/watch_state.py (what the view knows, pure), cli/watch_view.py (how it is
drawn, pure) and cli/watch_screen.py (the full-screen view and the plain lines).
`--once`: one frame, then exit.

Exit codes: 0 after q / --once / a signal, 2 when the source cannot be used with --once
or the arguments are wrong, 1 when the agent speaks a feed version this viewer does not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from meshhealth import defaults
from meshhealth.cli.common import (
    EXIT_UNAVAILABLE,
    add_etcd_access_options,
    etcd_access_from_args,
    print_error,
    usage_error,
)

if TYPE_CHECKING:
    from meshhealth.cli.watch_state import Change

# A source updates the state, then calls `notify(changes)` (redraw, or print the
# changes) and `event(text)` for what happens to the connection (plain lines).
Notify = Callable[[list["Change"]], None]
Event = Callable[[str], None]

DESCRIPTION = f"""\
A live view of the mesh: one row per node (grouped by cluster), a cell per path (host /
endpoint x ICMP / HTTP) with status, RTT, loss over the window and a latency sparkline,
and a header with `Cluster health: X/Y reachable` and etcd's state. Reconnects by
itself when the agent restarts. Keys: q quits, m toggles list / matrix.

sources (one of):
  -H unix://PATH     the agent's admin socket (its feed is beside it: X.sock -> X.feed.sock;
                     the matrix view is the agent's cluster-wide matrix)
                     default: ${defaults.ADMIN_SOCKET_ENV} or unix://{defaults.ADMIN_SOCKET}
  --url ws://H:P     an agent started with --feed-listen H:P (the list view only)
  --etcd URLS        every node's published results, followed as they change; no agent

examples:
  meshhealth watch
  meshhealth watch -H unix:///tmp/mh-lab/node1.sock
  meshhealth watch --url ws://10.0.0.5:4241 --plain | tee changes.log
  meshhealth watch --view matrix --once
  meshhealth watch --etcd http://127.0.0.1:2379 --view matrix --once
"""


class WatchError(Exception):
    """A one-line error for the user."""


def first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


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
        help="--etcd: seconds between redraws from the reports held (they arrive as etcd "
        "changes; default 1)",
    )
    add_etcd_access_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from meshhealth.cli.watch_screen import Source, run_live, run_plain
    from meshhealth.cli.watch_state import WatchState
    from meshhealth.cli.watch_view import frame_text

    def fail(message: str, code: int = EXIT_UNAVAILABLE) -> int:
        print_error("watch", message)
        return code

    def nothing() -> None:
        pass

    if not args.poll > 0:
        return usage_error("watch", "--poll: must be a positive number of seconds")
    source: Source
    on_mode: Callable[[], None] = nothing
    if args.etcd is not None:
        from meshhealth.cli.watch_etcd import run_etcd

        state = WatchState(source=f"etcd {args.etcd}")
        try:
            access = etcd_access_from_args(args, args.etcd)
        except ValueError as exc:  # a bad endpoint list, TLS option or etcd config file
            return usage_error("watch", f"--etcd: {exc}")

        async def source(notify: Notify, event: Event) -> None:
            await run_etcd(state, access, notify, event, once=args.once, rebuild_s=args.poll)

    else:
        from meshhealth.cli.watch_feed import AgentMatrix, feed_target, run_feed

        try:
            target = feed_target(args.host, args.url, os.environ)
        except ValueError as exc:
            return usage_error("watch", str(exc))
        state = WatchState(source=target.label)
        matrix = None if target.admin_socket is None else AgentMatrix(state, target.admin_socket)
        if matrix is None:
            state.matrix_note = (
                "matrix: a TCP feed carries only what its node sees; use the agent's "
                "admin socket (-H unix://PATH) or --etcd URLS"
            )
        else:
            on_mode = matrix.request

        async def source(notify: Notify, event: Event) -> None:
            async with trio.open_nursery() as nursery:
                if matrix is not None and not args.once:
                    nursery.start_soon(matrix.run, notify)
                await run_feed(state, target, notify, event, once=args.once, on_round=on_mode)
                wants_matrix = args.once and matrix is not None and state.mode == "matrix"
                if wants_matrix and matrix is not None and not await matrix.fetch():
                    raise WatchError(state.matrix_note)
                nursery.cancel_scope.cancel()

    state.mode = args.view
    try:
        if args.once:
            # Only --etcd's warnings (invalid entries) are worth a line on stderr here.
            def warn(text: str) -> None:
                if args.etcd is not None:
                    print_error("watch", text)

            trio.run(source, lambda changes: None, warn)
            # the terminal's own width: a wider frame would be wrapped by the terminal,
            # mid-word (a pipe: 120 columns, or $COLUMNS)
            width = shutil.get_terminal_size((120, 40)).columns
            sys.stdout.write(frame_text(state, now=time.time(), width=width))
            return 0
        if args.plain or not sys.stdout.isatty():
            trio.run(run_plain, state, source)
        else:
            trio.run(run_live, state, source, on_mode)
    except BaseException as error:  # trio wraps errors of tasks in groups
        leaf = first_leaf(error)
        if isinstance(leaf, WatchError):
            return fail(str(leaf), 1 if "version" in str(leaf) else 2)
        if isinstance(leaf, BrokenPipeError | KeyboardInterrupt):
            return 0
        raise
    return 0
