"""`meshhealth responder`: serve `GET /hello` for peers' HTTP probes, nothing else.

This is the health endpoint's process, one per node: it imports no trio, etcd3, grpc,
rich nor msgpack (tests/repo/test_process_size.py) and sleeps in one `select()`
while idle (docs/performance.md, "Process size")."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import time

from meshhealth import defaults
from meshhealth.addresses import format_address, parse_listen
from meshhealth.cli.common import print_error, usage_error

DESCRIPTION = f"""\
Serve GET {defaults.HTTP_PATH} (200, small JSON body) so that peers' HTTP probes find this
address. Runs until SIGTERM or SIGINT.

examples:
  meshhealth responder --listen 10.77.0.1                 port {defaults.HTTP_PORT}
  meshhealth responder --listen [fd00::1]:4240 --passive  health endpoint mode
  meshhealth responder --listen 10.78.1.2 --listen [fd00:78:1::2]   both families
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "responder",
        help=f"serve GET {defaults.HTTP_PATH} for peers' HTTP probes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        required=True,
        action="append",
        metavar="IP[:PORT]",
        help=f"address to listen on; IPv6 as [::1]:PORT (default port {defaults.HTTP_PORT}); "
        "repeat it for more addresses (a dual-stack endpoint)",
    )
    parser.add_argument(
        "--passive",
        action="store_true",
        help="health endpoint mode: only answer probes, never probe (this command never "
        "probes; the flag marks the mode in the output)",
    )
    parser.add_argument("--node-name", default="", help="name reported in the /hello body")
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when the parent process dies (the agent starts its health endpoint's "
        "responder so: a SIGKILLed agent leaves no responder holding the port)",
    )
    parser.add_argument(
        "--user",
        metavar="NAME",
        help="once the sockets are open, run as this user (its primary group, no "
        "supplementary groups), without capabilities and with no_new_privs; a user "
        "with uid 0 stays root without capabilities (docs/security.md)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    addresses: list[tuple[str, int]] = []
    for listen in args.listen:
        try:
            addresses.append(parse_listen(listen))
        except ValueError as exc:
            return usage_error("responder", f"bad --listen: {exc}")
    parent_pid = os.getppid() if args.exit_with_parent else None
    return serve_until_signal(addresses, args.passive, args.node_name, parent_pid, args.user)


def serve_until_signal(
    addresses: list[tuple[str, int]],
    passive: bool,
    node_name: str,
    parent_pid: int | None = None,
    user: str | None = None,
) -> int:
    """Serve /hello on every (ip, port) until SIGTERM or SIGINT (or, with `parent_pid`,
    until that parent exits). One thread, no trio: meshhealth.probe.hello_server.
    With `user`, the process drops to it once the listeners are open and before
    anything else (one thread: capset acts on the calling thread only)."""
    from meshhealth.probe.hello_server import HelloServer, open_listener

    with contextlib.ExitStack() as stack:
        listeners = []
        for ip, port in addresses:
            try:
                listeners.append(stack.enter_context(open_listener(ip, port)))
            except OSError as exc:
                where = format_address(ip, port)
                print_error("responder", f"cannot listen on {where}: {_reason(exc)}")
                return 2
        as_user = ""
        if user is not None:
            from meshhealth.privileges import PrivilegeError, drop_to_user

            try:
                dropped = drop_to_user(user)
            except PrivilegeError as exc:
                print_error("responder", str(exc))
                return 2
            as_user = f" as {user} (uid {dropped.uids[1]}, gid {dropped.gids[1]})"
        wake = _StopSignals(stack)
        stop_fds = [wake.fileno()]
        parent_fd = _watch_parent(parent_pid, stack) if parent_pid is not None else None
        if parent_fd is not None:
            stop_fds.append(parent_fd)
        mode = " (passive)" if passive else ""
        bound = ", ".join(
            format_address(ip, listener.getsockname()[1])
            for (ip, _), listener in zip(addresses, listeners, strict=True)
        )
        print(f"responder listening on {bound}{mode}{as_user}", flush=True)
        server = HelloServer(
            listeners[0],
            node_name=node_name,
            stop_fds=tuple(stop_fds),
            more_listeners=tuple(listeners[1:]),
        )
        if server.serve_forever() == parent_fd:
            with contextlib.suppress(OSError):  # stderr was a pipe to the dead parent
                print_error("responder", f"parent {parent_pid} is gone; exiting")
    return 0


class _StopSignals:
    """SIGTERM and SIGINT make `fileno()` readable (signal.set_wakeup_fd); the previous
    handlers come back when `stack` closes."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._read, write = socket.socketpair()
        stack.enter_context(self._read)
        stack.enter_context(write)
        write.setblocking(False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            stack.callback(signal.signal, signum, signal.signal(signum, _note_signal))
        stack.callback(signal.set_wakeup_fd, signal.set_wakeup_fd(write.fileno()))

    def fileno(self) -> int:
        return self._read.fileno()


def _note_signal(signum: int, frame: object) -> None:
    """The wake-up descriptor carries the signal; the handler only replaces the default
    (exit for SIGTERM, KeyboardInterrupt for SIGINT)."""


def _watch_parent(parent_pid: int, stack: contextlib.ExitStack) -> int:
    """A descriptor that becomes readable when `parent_pid` exits: its pidfd (Linux
    5.3+); else (no pidfd, or the parent was reaped already) a socket that a thread
    writes to once getppid() changes, polled every RESPONDER_PARENT_POLL_S."""
    try:
        pidfd = os.pidfd_open(parent_pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        stack.callback(os.close, pidfd)  # readable at once if the parent is already gone
        return pidfd
    import threading

    read, write = socket.socketpair()
    stack.enter_context(read)
    stack.enter_context(write)

    def poll_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(defaults.RESPONDER_PARENT_POLL_S)
        with contextlib.suppress(OSError):
            write.send(b"x")

    threading.Thread(target=poll_parent, name="parent-poll", daemon=True).start()
    return read.fileno()


def _reason(exc: OSError) -> str:
    """`address already in use`: strerror in lower case, as the rest of the line."""
    return (exc.strerror or str(exc)).lower()
