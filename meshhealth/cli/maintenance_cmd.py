"""`meshhealth maintenance start|end|list`: planned maintenance windows in etcd.

    meshhealth maintenance start node2 --reason "kernel upgrade" --for 2h
    meshhealth maintenance list
    meshhealth maintenance end node2

A window (meshhealth.wire.maintenance) is a key of its own next to the node's entries,
under a lease that etcd lets expire a little after the window's end; readers treat it
as over at its end. While it lasts the node's findings are marked expected and the
cluster's verdict and alerts leave it out (docs/operations.md "Planned maintenance").
The checks and the text are pure (`new_window`, `format_windows_text`); `run` only
talks to etcd.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from meshhealth import defaults
from meshhealth.cli.common import (
    ENV_ETCD,
    EXIT_UNAVAILABLE,
    add_etcd_option,
    add_etcd_timeout_option,
    etcd_access_from_args,
    etcd_timeout_from_args,
    print_error,
    usage_error,
)
from meshhealth.documents.maintenance import maintenance_document, note_text
from meshhealth.terminal_text import escape
from meshhealth.timefmt import format_interval, parse_duration
from meshhealth.wire import keys
from meshhealth.wire.maintenance import MaintenanceWindow, encode_maintenance

if TYPE_CHECKING:  # imported when a command runs: `meshhealth --help` stays light
    from meshhealth.kvstore import Etcd

COMMAND = "maintenance"
ENV_CLUSTER = "MESHHEALTH_CLUSTER"
EXIT_NOT_FOUND = 1  # done, but the node is not one of the cluster's

DESCRIPTION = f"""\
Record, end or list planned maintenance windows (a drain, a reboot). While a node's
window lasts, its findings are marked expected, the cluster's verdict leaves it out
("3/3 reachable, 1 in maintenance") and so do the alerts; it ends by itself at its end.

examples:
  meshhealth maintenance start node2 --reason "kernel upgrade" --for 2h
  meshhealth maintenance list -o json
  meshhealth maintenance end node2
  {ENV_ETCD}=http://10.0.0.1:2379 meshhealth maintenance start node2 --cluster lab1

exit codes: 0 done; 1 start: no such node in the cluster (--force plans it anyway);
2 a usage error, or etcd cannot be reached.
"""


def default_setter() -> str:
    """Who sets a window when --by is not given: `user@host` (the sudo user if any)."""
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    return f"{user}@{socket.gethostname()}"


def new_window(
    cluster: str, node: str, *, now: float, duration: str, reason: str, by: str
) -> MaintenanceWindow:
    """The window `start` records, its inputs checked: ValueError with a one-line
    message naming the bad one. Pure."""
    keys.validate_cluster_name(cluster)
    keys.validate_node_name(node)
    seconds = parse_duration(duration)
    if not 0 < seconds <= defaults.MAINTENANCE_MAX_S:
        raise ValueError(
            f"--for {duration}: must be more than 0 and at most "
            f"{format_interval(defaults.MAINTENANCE_MAX_S)}"
        )
    if len(reason) > defaults.MAINTENANCE_REASON_MAX_CHARS:
        raise ValueError(
            f"--reason: {len(reason)} characters, at most {defaults.MAINTENANCE_REASON_MAX_CHARS}"
        )
    if len(by) > 256:
        raise ValueError(f"--by: {len(by)} characters, at most 256")
    window = MaintenanceWindow(cluster, node, now, now + seconds, reason, by)
    encode_maintenance(window)  # the wire's own checks: no control characters in the text
    return window


def lease_ttl_s(window: MaintenanceWindow, now: float) -> int:
    """The lease that deletes the key: until a little after the window's end."""
    return math.ceil(window.end - now) + defaults.MAINTENANCE_LEASE_SLACK_S


def format_windows_text(windows: Sequence[MaintenanceWindow], now: float) -> str:
    """One line per window on at `now`, everything read from etcd escaped. Pure."""
    on = sorted((w for w in windows if w.active_at(now)), key=lambda w: (w.cluster, w.node))
    if not on:
        return "No node is in maintenance.\n"
    return "".join(escape(note_text(maintenance_document(w, now))) + "\n" for w in on)


def format_windows_json(windows: Sequence[MaintenanceWindow], now: float) -> str:
    on = sorted((w for w in windows if w.active_at(now)), key=lambda w: (w.cluster, w.node))
    return json.dumps([maintenance_document(w, now) for w in on], indent=2) + "\n"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        COMMAND,
        help="record, end or list planned maintenance windows of nodes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser(
        "start", help="put a node in maintenance", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    start.add_argument("node", metavar="NODE", help="the node's name in its cluster")
    start.add_argument(
        "--for",
        dest="duration",
        default=f"{defaults.MAINTENANCE_DEFAULT_S:g}s",
        metavar="DURATION",
        help="how long (90s, 30m, 2h, 1d; default "
        f"{format_interval(defaults.MAINTENANCE_DEFAULT_S)}, at most "
        f"{format_interval(defaults.MAINTENANCE_MAX_S)}); it ends by itself then",
    )
    start.add_argument("--reason", default="", help="why (shown in every view)")
    start.add_argument("--by", default=None, help="who sets it (default: user@host)")
    start.add_argument(
        "--force",
        action="store_true",
        help="record it even when the cluster has no such node (yet)",
    )
    end = actions.add_parser("end", help="end a node's maintenance now")
    end.add_argument("node", metavar="NODE", help="the node's name in its cluster")
    listing = actions.add_parser("list", help="the windows on now")
    listing.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    for action in (start, end, listing):
        action.add_argument(
            "--cluster",
            default=None,
            metavar="NAME",
            help=f"the node's cluster (default: ${ENV_CLUSTER}, else "
            f"{defaults.DEFAULT_CLUSTER}; list: every cluster)",
        )
        add_etcd_option(action, metavar="URL[,URL...]")
        add_etcd_timeout_option(action)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    import trio

    from meshhealth.kvstore import EtcdError, EtcdUnavailable, open_etcd

    command = f"{COMMAND} {args.action}"
    try:
        access = etcd_access_from_args(args)
        cluster: str | None = args.cluster or os.environ.get(ENV_CLUSTER) or None
        if cluster is not None:
            keys.validate_cluster_name(cluster)
        elif args.action != "list":
            cluster = defaults.DEFAULT_CLUSTER
        if args.action != "list":
            keys.validate_node_name(args.node)
        timeout_s = etcd_timeout_from_args(args)
    except ValueError as error:
        return usage_error(command, str(error))
    window = None
    if args.action == "start":
        assert cluster is not None
        by = args.by if args.by is not None else default_setter()
        try:
            window = new_window(
                cluster, args.node, now=time.time(), duration=args.duration,
                reason=args.reason, by=by,
            )  # fmt: skip
        except ValueError as error:
            return usage_error(command, str(error))

    async def act() -> int:
        async with open_etcd(access, request_timeout_s=timeout_s, liveness=False) as etcd:
            if args.action == "list":
                return await _list(etcd, cluster, args.output)
            assert cluster is not None
            if args.action == "end":
                return await _end(etcd, cluster, args.node)
            assert window is not None
            return await _start(etcd, window, force=args.force)

    try:
        return trio.run(act)
    except EtcdUnavailable as error:
        print_error(command, str(error))
        return EXIT_UNAVAILABLE
    except EtcdError as error:
        print_error(command, str(error))
        return 1


async def _start(etcd: Etcd, window: MaintenanceWindow, *, force: bool) -> int:
    import time

    where = f"{window.cluster}/{window.node}"
    if not force:
        node, _ = await etcd.get(keys.node_key(window.cluster, window.node))
        retained, _ = await etcd.get(keys.retained_key(window.cluster, window.node))
        if node is None and retained is None:
            print_error(
                f"{COMMAND} start",
                f"no node {where}: cluster {window.cluster} has no entry of it in etcd "
                "(check the name and --cluster; --force records it anyway)",
            )
            return EXIT_NOT_FOUND
    now = time.time()
    lease_id = await etcd.lease_grant(lease_ttl_s(window, now))
    await etcd.put(
        keys.maintenance_key(window.cluster, window.node),
        encode_maintenance(window),
        lease_id=lease_id,
    )
    print(escape(note_text(maintenance_document(window, now))))
    return 0


async def _end(etcd: Etcd, cluster: str, node: str) -> int:
    from meshhealth.wire.fields import DecodeError
    from meshhealth.wire.maintenance import decode_maintenance

    key = keys.maintenance_key(cluster, node)
    kv, _ = await etcd.get(key)
    if kv is None or not await etcd.delete(key):
        print(escape(f"{cluster}/{node} was not in maintenance"))
        return 0
    try:
        ended = decode_maintenance(kv.value)
    except DecodeError:
        ended = None
    if kv.lease_id:
        await etcd.lease_revoke(kv.lease_id)  # nothing else is under it
    reason = f" ({ended.reason})" if ended is not None and ended.reason else ""
    print(escape(f"{cluster}/{node}: maintenance ended{reason}"))
    return 0


async def _list(etcd: Etcd, cluster: str | None, output: str) -> int:
    import time

    from meshhealth.wire.maintenance import MaintenanceWindow as Window
    from meshhealth.wire.values import decode_entries

    kvs, _ = await etcd.get_prefix(keys.maintenance_prefix(cluster))
    windows, errors = decode_entries([(kv.key, kv.value) for kv in kvs], Window)
    for line in errors:
        print_error(f"{COMMAND} list", f"skipping a value that does not decode: {line}")
    now = time.time()
    text = (
        format_windows_json(windows, now) if output == "json" else format_windows_text(windows, now)
    )
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
