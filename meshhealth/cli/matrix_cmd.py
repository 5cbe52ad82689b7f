"""`meshhealth matrix`: the cluster-wide N x N view, straight from etcd (no agent needed).

Exit codes: 0 when the matrix was read (even with unreachable cells), 1 when some cell
is not reachable and `--fail-on-unreachable` is given, 2 for a usage error or when no
etcd could be read (one line on stderr naming the flag or the endpoints).
"""

from __future__ import annotations

import argparse
import sys

from meshhealth import defaults
from meshhealth.cli.common import add_etcd_source_options

DESCRIPTION = f"""\
Read every node's published health entry (meshhealth/state/health/v1/) and show the
N x N matrix: one row per source node, one column per target node (grouped by
cluster), one cell per pair with host ICMP, host HTTP, endpoint ICMP and endpoint HTTP.
A report older than its source's liveness refresh ({defaults.PUBLISH_REFRESH_S:g} s) plus
{defaults.STALE_MARGIN_INTERVALS} of its probe intervals and {defaults.STALE_MARGIN_S:g} s is shown
stale.

examples:
  meshhealth matrix --etcd http://127.0.0.1:2379
  meshhealth matrix --etcd http://10.0.0.1:2379 --cluster lab1 -o json
  meshhealth matrix --etcd http://10.0.0.1:2379 --mesh lab2=http://10.1.0.1:2379
  meshhealth status --matrix          the same, through this node's agent
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "matrix",
        help="show the cluster-wide N x N connectivity matrix, read from etcd",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_etcd_source_options(parser, "reports")
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.add_argument(
        "--fail-on-unreachable",
        action="store_true",
        help="exit 1 when any cell is unreachable or stale (cells of a node in planned "
        "maintenance do not count)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from meshhealth.cli.format_matrix import format_matrix_json, format_matrix_text
    from meshhealth.cli.matrix_read import read_matrix_from_args
    from meshhealth.diagnosis.cluster_summary import summaries_of
    from meshhealth.diagnosis.diagnose import diagnose
    from meshhealth.diagnosis.findings import findings_json
    from meshhealth.diagnosis.view import matrix_view
    from meshhealth.documents.cluster_health import SOURCE_REPORTS, summary_verdict_document
    from meshhealth.documents.matrix_json import matrix_document

    matrix = read_matrix_from_args(args, "matrix")
    if isinstance(matrix, int):
        return matrix
    doc = matrix_document(matrix)
    if args.output == "json":
        text = format_matrix_json(doc)
    else:
        findings = diagnose(matrix_view(matrix))
        found = findings_json(findings, matrix.generated_at, matrix.maintenance)
        verdicts = [
            summary_verdict_document(summary, matrix.generated_at, source=SOURCE_REPORTS)
            for _, summary in sorted(summaries_of(matrix, findings).items())
        ]
        text = format_matrix_text(doc, found["findings"], verdicts)
    sys.stdout.write(text)
    sys.stdout.flush()
    if args.fail_on_unreachable and matrix.unexpected_failures():
        return 1
    return 0
