"""`meshhealth diagnose`: whose fault it is, from the matrix in etcd (no agent needed).

Exit codes: 0 when the matrix was read and diagnosis finds nothing (or only findings
expected because their nodes are in planned maintenance), 1 when it finds something,
2 for a usage error or when no etcd could be read (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys

from meshhealth.cli.common import add_etcd_source_options
from meshhealth.cli.matrix_cmd import read_matrix_from_args

EXIT_FINDINGS = 1

DESCRIPTION = """\
Read every node's published health entry (as `meshhealth matrix` does) and tell whose
fault a failure is: node-down, node-isolated, ingress-blocked, egress-blocked,
agent-down, endpoint-down, mtu-blackhole, udp-blocked, port-blocked, path, partition,
observer-degraded. One line per finding, most confident first: kind, nodes, confidence
(0..1), since when, and the evidence. docs/diagnosis.md explains every kind and what to check.

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


def run(args: argparse.Namespace) -> int:
    from meshhealth.cli.format_findings import format_findings_json, format_findings_text
    from meshhealth.diagnosis.diagnose import diagnose
    from meshhealth.diagnosis.findings import findings_json
    from meshhealth.diagnosis.view import matrix_view

    if args.at is not None:
        return run_at(args)
    matrix = read_matrix_from_args(args, "diagnose")
    if isinstance(matrix, int):
        return matrix
    findings = diagnose(matrix_view(matrix))
    doc = findings_json(findings, matrix.generated_at, matrix.maintenance)
    text = format_findings_json(doc) if args.output == "json" else format_findings_text(doc)
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_FINDINGS if any(not f.get("expected") for f in doc["findings"]) else 0
