"""`meshhealth responder`: serve `GET /hello` for peers' HTTP probes, nothing else."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from typing import TYPE_CHECKING

from meshhealth import defaults
from meshhealth.addresses import format_address, parse_listen
from meshhealth.cli.common import print_error, usage_error

if TYPE_CHECKING:
    import trio
    from trio import TaskStatus


DESCRIPTION = f"""\
Serve GET {defaults.HTTP_PATH} (200, small JSON body) so that peers' HTTP probes find this
address. Runs until SIGTERM or SIGINT.

examples:
  meshhealth responder --listen 10.77.0.1                 port {defaults.HTTP_PORT}
  meshhealth responder --listen [fd00::1]:4240 --passive  health endpoint mode
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
        metavar="IP[:PORT]",
        help=f"address to listen on; IPv6 as [::1]:PORT (default port {defaults.HTTP_PORT})",
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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    try:
        ip, port = parse_listen(args.listen)
    except ValueError as exc:
        return usage_error("responder", f"bad --listen: {exc}")
    parent_pid = os.getppid() if args.exit_with_parent else None
    code: int = trio.run(_serve_until_signal, ip, port, args.passive, args.node_name, parent_pid)
    return code


async def _serve_until_signal(
    ip: str, port: int, passive: bool, node_name: str, parent_pid: int | None = None
) -> int:
    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            try:
                bound_port: int = await nursery.start(_serve, ip, port, node_name)
            except OSError as exc:
                where = format_address(ip, port)
                print_error("responder", f"cannot listen on {where}: {_reason(exc)}")
                return 2
            mode = " (passive)" if passive else ""
            print(f"responder listening on {format_address(ip, bound_port)}{mode}", flush=True)
            if parent_pid is not None:
                nursery.start_soon(_exit_when_orphaned, parent_pid, nursery.cancel_scope)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()
    return 0


async def _exit_when_orphaned(parent_pid: int, scope: trio.CancelScope) -> None:
    """Cancel `scope` once our parent is gone (we were re-parented: getppid() changed)."""
    import trio

    while True:  # no event to wait on: the kernel only changes what getppid() says
        await trio.sleep(defaults.RESPONDER_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            break
    with contextlib.suppress(OSError):  # stderr was a pipe to the dead parent
        print_error("responder", f"parent {parent_pid} is gone; exiting")
    scope.cancel()


def _reason(exc: OSError) -> str:
    """`address already in use`: strerror in lower case, as the rest of the line."""
    return (exc.strerror or str(exc)).lower()


async def _serve(ip: str, port: int, node_name: str, *, task_status: TaskStatus[int]) -> None:
    from meshhealth.probe.responder import serve_responder

    await serve_responder(ip, port, node_name=node_name, task_status=task_status)
