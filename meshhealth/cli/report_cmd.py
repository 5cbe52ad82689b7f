"""`meshhealth report`: per-pair and per-node availability (SLAs) over a span of time,
from every node's roll-ups in etcd (meshhealth/state/rollup/v1/; docs/report.md).

Exit codes: 0 when the roll-ups were read (even with failures in them), 2 for a usage
error or when etcd could not be read (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

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
    from meshhealth.wire.rollup import NodeRollups

DESCRIPTION = """\
Read every node's roll-ups (meshhealth/state/rollup/v1/: per path it probes, 10-minute
windows for a day and hourly windows for a week) and show the least available pairs
(observer -> target, per path kind) and the least available nodes as targets, over the
span: availability (1 - failures / probes), probes, the highest p95 RTT of any window
and the window that failed most. Times are ISO 8601 UTC.

examples:
  meshhealth report --etcd http://127.0.0.1:2379
  meshhealth report --since 7d --top 20 -o json
  meshhealth report --since 2026-11-27T03:00:00Z --until 2026-11-27T03:30:00Z
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "report",
        help="least available pairs and nodes over hours or days (SLAs), read from etcd",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_etcd_source_options(parser, "roll-ups", mesh=False)
    parser.add_argument(
        "--since",
        default="24h",
        metavar="WHEN",
        help="start of the span: a duration before --until (90m, 24h, 7d) or an ISO 8601 "
        "time (default 24h)",
    )
    parser.add_argument(
        "--until",
        default=None,
        metavar="TIME",
        help="end of the span, an ISO 8601 time (default: now)",
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows of each table (default 10)"
    )
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.set_defaults(func=run)


def parse_span(since: str, until: str | None, now: float) -> tuple[float, float]:
    """(since, until) in unix seconds; ValueError naming the flag. `--since` is a
    duration back from `--until` or a time, as `events --since` reads it."""
    from meshhealth.timefmt import parse_iso_time, parse_when

    try:
        end = now if until is None else parse_iso_time(until)
    except ValueError:
        raise ValueError(f"--until: expected an ISO 8601 time, got {until!r}") from None
    try:
        start = parse_when(since.strip(), end)
    except ValueError as error:
        raise ValueError(f"--since: {error}") from None
    if not start < end:
        raise ValueError(f"--since must be before --until, got {since!r}")
    return start, end


def run(args: argparse.Namespace) -> int:
    from meshhealth.cli.format_report import format_report_json, format_report_text
    from meshhealth.documents.report import build_report

    try:
        since, until = parse_span(args.since, args.until, time.time())
        [(cluster, access)] = etcd_sources_from_args(args)  # no --mesh: one source
        timeout_s = etcd_timeout_from_args(args)
    except ValueError as error:
        return usage_error("report", str(error))
    if args.top < 1:
        return usage_error("report", f"--top must be >= 1, got {args.top}")
    read = read_rollups(access, cluster, timeout_s)
    if isinstance(read, str):
        print_error("report", read)
        return EXIT_UNAVAILABLE
    values, skipped = read
    for line in skipped:
        print_error("report", f"skipped {line}")
    doc = build_report(values, since=since, now=until, top=args.top)
    text = format_report_json(doc) if args.output == "json" else format_report_text(doc)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def read_rollups(
    access: EtcdAccess, cluster: str | None, timeout_s: float
) -> tuple[list[NodeRollups], list[str]] | str:
    """Every roll-up value under the prefix (read in pages, one snapshot), and one line
    per value that does not decode; or the error that kept etcd from answering."""
    import trio

    from meshhealth.kvstore import EtcdError, open_etcd
    from meshhealth.wire.keys import rollup_prefix
    from meshhealth.wire.rollup import NodeRollups
    from meshhealth.wire.values import decode_entries

    async def fetch() -> tuple[list[NodeRollups], list[str]] | str:
        try:
            async with open_etcd(access, request_timeout_s=timeout_s, liveness=False) as etcd:
                kvs, _ = await etcd.get_prefix(rollup_prefix(cluster))
        except EtcdError as error:
            return str(error)
        return decode_entries(((kv.key, kv.value) for kv in kvs), NodeRollups)

    return trio.run(fetch)
