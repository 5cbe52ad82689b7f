"""`meshhealth diagnose`: whose fault it is, from etcd (no agent needed): the findings
the clusters' aggregators published in their summaries, or (no summary, one that does
not decode, `--recompute`) diagnosis of the health reports now; the first line of the
text says which and why (docs/diagnosis.md "`meshhealth diagnose`").

Exit codes: 0 when the findings were read and there are none (or only findings expected
because their nodes are in planned maintenance), 1 when there are, 2 for a usage error
or when no etcd could be read (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshhealth.cli.common import add_etcd_source_options

if TYPE_CHECKING:
    from meshhealth.kvstore import Etcd
    from meshhealth.wire.summary import ClusterSummary

EXIT_FINDINGS = 1

DESCRIPTION = """\
Tell whose fault a connectivity failure is: node-down, node-isolated, ingress-blocked,
egress-blocked, agent-down, endpoint-down, mtu-blackhole, udp-blocked, port-blocked,
path, partition, observer-degraded. One line per finding, most confident first: kind,
nodes, confidence (0..1), since when, and the evidence. docs/diagnosis.md explains
every kind and what to check.

The findings are those the cluster's aggregator published in its summary (what
`meshhealth status`, `watch` and the web page show), read from etcd, when every cluster
asked for has one; the first line says whose they are. A summary is current while it is
in etcd (it is under its aggregator's lease). Otherwise (no aggregator has published
one, it does not decode), or with --recompute, diagnose reads every node's published
health entry (as `meshhealth matrix` does), runs diagnosis over them now, and its first
line says why. An etcd that does not answer (a --mesh cluster's, say) is named in one
line on stderr; the clusters that could be read are shown.

With --at TIME it reads the findings timeline instead (`meshhealth events`): the
findings that were open at that time, as the cluster's aggregator recorded them, in the
same shape (SINCE is when each opened).

A finding whose nodes are all in planned maintenance (`meshhealth maintenance start`)
is shown, marked "expected: in maintenance", and does not make the exit code 1.

exit codes: 0 no findings (or only expected ones), 1 findings, 2 usage error or etcd
unreachable

examples:
  meshhealth diagnose --etcd http://127.0.0.1:2379
  meshhealth diagnose --etcd http://10.0.0.1:2379 -o json
  meshhealth diagnose --etcd http://10.0.0.1:2379 --recompute  from the reports, now
  meshhealth diagnose --etcd http://10.0.0.1:2379 --mesh lab2=http://10.1.0.1:2379
  meshhealth diagnose --at 2026-11-27T03:12Z       what was known then
  meshhealth diagnose --at 2h                      ... two hours ago
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "diagnose",
        help="tell whose fault a connectivity failure is, from the matrix in etcd",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_etcd_source_options(parser, "reports")
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.add_argument(
        "--at",
        default=None,
        metavar="TIME",
        help="what was known at TIME (ISO 8601, UTC without a zone; or a duration back "
        "from now: 2h), from the findings timeline",
    )
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="diagnose the health reports now instead of showing the aggregators' "
        "published findings",
    )
    parser.set_defaults(func=run)


def run_at(args: argparse.Namespace) -> int:
    """`--at`: the events open at that time, as findings."""
    import time

    from meshhealth.cli.common import usage_error
    from meshhealth.cli.events_cmd import read_events_from_args
    from meshhealth.cli.format_findings import format_findings_json, format_findings_text
    from meshhealth.diagnosis.timeline import findings_at, open_at
    from meshhealth.timefmt import parse_when

    try:
        when = parse_when(args.at, time.time())
    except ValueError as error:
        return usage_error("diagnose", f"--at: {error}")
    events = read_events_from_args(args, "diagnose")
    if isinstance(events, int):
        return events
    held = open_at(events, when)
    doc = findings_at(held, when)
    text = format_findings_json(doc) if args.output == "json" else format_findings_text(doc)
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_FINDINGS if held else 0


@dataclass(frozen=True, slots=True)
class Published:
    """One cluster's summary as `diagnose` read it: the summary, or why there is none
    to show (`why`, unescaped: it may quote etcd)."""

    cluster: str
    summary: ClusterSummary | None
    why: str = ""


def published(cluster: str, value: bytes | None) -> Published:
    """`cluster`'s summary from the value of its key (None: absent). Current while it is
    in etcd, the rule every agent's follower reads it by: it is under its aggregator's
    lease, gone within one TTL of its aggregator's death."""
    from meshhealth.wire import keys
    from meshhealth.wire.fields import DecodeError
    from meshhealth.wire.summary import ClusterSummary
    from meshhealth.wire.values import decode_cluster_value

    if value is None:
        return Published(cluster, None, f"{cluster} has no summary in etcd (no aggregator)")
    try:
        summary = decode_cluster_value(keys.summary_key(cluster), value)
    except DecodeError as error:
        return Published(cluster, None, f"{cluster}'s summary does not decode: {error}")
    if not isinstance(summary, ClusterSummary):  # the key says summary: cannot happen
        return Published(cluster, None, f"{cluster}'s summary is not a summary")
    return Published(cluster, summary)


async def read_published(etcd: Etcd, cluster: str | None, timeout_s: float) -> list[Published]:
    """The summary of `cluster` (None: of every cluster with registered nodes in this
    etcd). EtcdError or trio.TooSlowError when etcd fails."""
    import trio

    from meshhealth.matrix_source import list_registrations, registered_nodes
    from meshhealth.wire import keys

    with trio.fail_after(timeout_s):
        if cluster is None:
            registered = registered_nodes(await list_registrations(etcd, None, timeout_s=timeout_s))
            clusters = sorted({cluster for cluster, _ in registered})
        else:
            clusters = [cluster]
        found = []
        for name in clusters:
            kv, _ = await etcd.get(keys.summary_key(name))
            found.append(published(name, None if kv is None else kv.value))
    return found


def source_line(read: list[Published], failed: list[str], now: float, *, recompute: bool) -> str:
    """The first line of the text: whose findings these are, or why they are recomputed
    (`failed`: the etcds whose summaries could not be read); escaped."""
    from meshhealth.terminal_text import escape
    from meshhealth.timefmt import format_age

    if recompute:
        return "Findings recomputed from the health reports now (--recompute)"
    missing = [p.why for p in read if p.summary is None]
    not_read = [f"not read: {error}" for error in failed]
    if missing or not read:
        why = "; ".join([*missing, *not_read]) or "no cluster has registered nodes in etcd"
        return escape(f"Findings recomputed from the health reports now: {why}")
    return "; ".join(
        escape(text)
        for text in (
            *(
                f"Findings from {p.cluster}'s aggregator ({p.summary.aggregator}), "
                f"updated {format_age(max(0.0, now - p.summary.generated_at))} ago"
                for p in read
                if p.summary is not None
            ),
            *not_read,
        )
    )


def run(args: argparse.Namespace) -> int:
    import time
    from contextlib import AsyncExitStack

    import trio

    from meshhealth.cli.common import (
        EXIT_UNAVAILABLE,
        etcd_sources_from_args,
        etcd_timeout_from_args,
        print_error,
        usage_error,
    )
    from meshhealth.cli.format_findings import format_findings_json, format_findings_text
    from meshhealth.cli.matrix_read import matrix_or_exit, open_sources
    from meshhealth.diagnosis.diagnose import diagnose
    from meshhealth.diagnosis.findings import findings_json
    from meshhealth.diagnosis.view import matrix_view
    from meshhealth.documents.cluster_health import published_findings_document
    from meshhealth.documents.findings import RECOMPUTED, FindingsJSON
    from meshhealth.kvstore import EtcdError
    from meshhealth.matrix_source import MatrixRead, read_matrix

    if args.at is not None:
        return run_at(args)
    try:
        wanted = etcd_sources_from_args(args)
        timeout_s = etcd_timeout_from_args(args)
    except ValueError as error:
        return usage_error("diagnose", str(error))

    async def fetch() -> tuple[list[Published], list[str], MatrixRead | None]:
        """The summaries (and the etcds that failed), and the matrix when they do not do."""
        async with AsyncExitStack() as stack:
            sources = await open_sources(stack, wanted, timeout_s)
            read: list[Published] = []
            failed: list[str] = []
            if not args.recompute:
                for source in sources:
                    try:
                        read += await read_published(source.etcd, source.cluster, timeout_s)
                    except EtcdError as error:
                        failed.append(str(error))
                    except trio.TooSlowError:
                        failed.append(
                            f"etcd {source.etcd.description}: no answer within {timeout_s:g}s"
                        )
            # An etcd that does not answer holds no report to recompute from either: the
            # summaries that were read do, unless one of them is missing.
            if len(failed) == len(sources):
                return read, failed, None
            if read and all(p.summary is not None for p in read):
                return read, failed, None
            return (
                read,
                failed,
                await read_matrix(
                    sources, now=time.time(), timeout_s=timeout_s, registered_only=True
                ),
            )

    read, failed, matrix_read = trio.run(fetch)
    now = time.time()
    doc: FindingsJSON
    if failed:
        print_error("diagnose", "; ".join(failed))
    if matrix_read is None and len(failed) == len(wanted):
        return EXIT_UNAVAILABLE
    if matrix_read is None:
        doc = published_findings_document([p.summary for p in read if p.summary], now)
    else:
        matrix = matrix_or_exit(matrix_read, len(wanted), "diagnose")
        if isinstance(matrix, int):
            return matrix
        if matrix.unavailable and not failed:  # --recompute: no summary was asked for
            print_error("diagnose", "; ".join(matrix.unavailable.values()))
        findings = diagnose(matrix_view(matrix))
        doc = findings_json(findings, matrix.generated_at, matrix.maintenance, source=RECOMPUTED)
    if args.output == "json":
        text = format_findings_json(doc)
    else:
        text = (
            source_line(read, failed, now, recompute=args.recompute)
            + "\n"
            + format_findings_text(doc)
        )
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_FINDINGS if any(not f.get("expected") for f in doc["findings"]) else 0
