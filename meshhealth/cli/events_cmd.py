"""`meshhealth events`: the findings timeline from etcd (no agent needed): what was
broken, when, and for how long.

Exit codes: 0 when the timeline was read (whatever it holds), 2 for a usage error or
when no etcd could be read (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from meshhealth import defaults
from meshhealth.cli.common import (
    EXIT_UNAVAILABLE,
    add_etcd_source_options,
    etcd_sources_from_args,
    etcd_timeout_from_args,
    print_error,
    usage_error,
)

if TYPE_CHECKING:
    from meshhealth.kvstore.etcd_config import EtcdAccess
    from meshhealth.wire.event import FindingEvent

DESCRIPTION = f"""\
List the cluster's findings timeline (meshhealth/state/events/v1/): one line per
finding from its opening to its closing, as the cluster's aggregator recorded it,
oldest first: when it opened and closed (RFC 3339, UTC), how long it lasted (an open
one: so far), its kind, culprit nodes, strongest confidence and evidence then.
Closed events are kept {defaults.EVENTS_MAX_AGE_S / 86400:g} days, at most
{defaults.EVENTS_MAX_COUNT:,} per cluster (docs/events.md).

examples:
  meshhealth events --etcd http://127.0.0.1:2379 --since 2h
  meshhealth events --node node3 -o json
  meshhealth diagnose --at 2026-11-27T03:12Z     what was known at that time
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "events",
        help="list what was broken, when and for how long (the findings timeline in etcd)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_etcd_source_options(parser, "events")
    parser.add_argument(
        "--since",
        default=None,
        metavar="DURATION|TIME",
        help="only events that held at some time in the last DURATION (2h, 30m, 7d) or "
        "since TIME (2026-11-27T03:00Z) (default: every kept event)",
    )
    parser.add_argument(
        "--node",
        default=None,
        metavar="NAME",
        help="only events that name this node (NAME or CLUSTER/NAME)",
    )
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.set_defaults(func=run)


def names_node(event: FindingEvent, node: str) -> bool:
    """Whether `event` names `node` (`cluster/node`, or the node name alone)."""
    return any(n == node or n.partition("/")[2] == node for n in event.nodes)


def read_events_from_args(args: argparse.Namespace, command: str) -> list[FindingEvent] | int:
    """Every event of the clusters the options point at (`add_etcd_source_options`),
    or the exit code after a one-line error."""
    import trio

    from meshhealth.kvstore import EtcdError, open_etcd
    from meshhealth.wire import keys
    from meshhealth.wire.fields import DecodeError
    from meshhealth.wire.values import decode_event_value

    try:
        wanted = etcd_sources_from_args(args)
        timeout_s = etcd_timeout_from_args(args)
    except ValueError as error:
        return usage_error(command, str(error))
    events: list[FindingEvent] = []
    failed: list[str] = []
    skipped: list[str] = []

    async def read_one(cluster: str | None, access: EtcdAccess) -> None:
        try:
            with trio.fail_after(timeout_s):
                async with open_etcd(access, request_timeout_s=timeout_s, liveness=False) as etcd:
                    kvs, _ = await etcd.get_prefix(keys.events_prefix(cluster))
        except EtcdError as error:
            failed.append(str(error))
            return
        except trio.TooSlowError:
            failed.append(f"etcd of {cluster or 'every cluster'}: no answer within {timeout_s:g}s")
            return
        for kv in kvs:
            try:
                events.append(decode_event_value(kv.key, kv.value))
            except DecodeError as error:
                skipped.append(f"{kv.key}: {error}")

    async def fetch() -> None:
        async with trio.open_nursery() as nursery:
            for cluster, access in wanted:
                nursery.start_soon(read_one, cluster, access)

    trio.run(fetch)
    for line in skipped:
        print_error(command, f"skipping an event that does not decode: {line}")
    if len(failed) == len(wanted):
        print_error(command, "; ".join(failed))
        return EXIT_UNAVAILABLE
    for line in failed:
        print_error(command, line)
    return events


def run(args: argparse.Namespace) -> int:
    import time

    from meshhealth.cli.format_events import format_events_json, format_events_text
    from meshhealth.diagnosis.timeline import since
    from meshhealth.documents.events import events_document
    from meshhealth.timefmt import parse_when

    now = time.time()
    start: float | None = None
    if args.since is not None:
        try:
            start = parse_when(args.since, now)
        except ValueError as error:
            return usage_error("events", f"--since: {error}")
    events = read_events_from_args(args, "events")
    if isinstance(events, int):
        return events
    if args.node is not None:
        events = [e for e in events if names_node(e, args.node)]
    shown = since(events, start if start is not None else 0.0)
    doc = events_document(shown, now=now, since=start)
    text = format_events_json(doc) if args.output == "json" else format_events_text(doc)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
