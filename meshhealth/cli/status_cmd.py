"""`meshhealth status`: what this node's agent sees, in cilium-health's format.

Exit codes: 0 when the agent answered (even when nodes are unreachable, like
cilium-health; `--fail-on-unreachable` makes that 1 for scripts), 1 when the agent
answered with an error (a `--probe` round that did not finish in time), 2 when the
agent cannot be reached (one line on stderr naming the socket).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, cast

from meshhealth import defaults
from meshhealth.cli.common import EXIT_UNAVAILABLE, print_error, usage_error

if TYPE_CHECKING:
    from meshhealth.documents.matrix_json import MatrixDocument
    from meshhealth.documents.status_schema import StatusDocument

DESCRIPTION = """\
Show what this node's agent sees: every node, its host (NodeIP) and health endpoint
(HealthIP) over ICMP and HTTP, and `Cluster health: X/Y reachable`.

examples:
  meshhealth status                          the last round's results
  meshhealth status --probe                  probe now and wait for the fresh results
  meshhealth status --verbose                loss, p50/p95, last probed, node table
  meshhealth status -o json | jq '.summary'
  meshhealth status --matrix                 the cluster-wide N x N matrix (every node's view)
  meshhealth status -H unix:///run/meshhealth/node2.sock
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "status",
        help="show node connectivity as this node's agent sees it (cilium-health status)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-H",
        "--host",
        metavar="unix://PATH",
        default=None,
        help=f"the agent's admin socket (env {defaults.ADMIN_SOCKET_ENV}; "
        f"default unix://{defaults.ADMIN_SOCKET})",
    )
    parser.add_argument(
        "--probe", action="store_true", help="run a probe round now and wait for its results"
    )
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="the cluster-wide matrix (all nodes' published results, meshed clusters too)",
    )
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="add loss, percentiles and a node table"
    )
    parser.add_argument(
        "--fail-on-unreachable",
        action="store_true",
        help="exit 1 when any node is not reachable (default: 0 whenever the agent answers)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from meshhealth.admin_client import AdminUnavailable, admin_request, socket_path_from_host
    from meshhealth.cli.format_status import format_status_text

    host = args.host or os.environ.get(defaults.ADMIN_SOCKET_ENV) or defaults.ADMIN_SOCKET
    try:
        socket_path = socket_path_from_host(host)
    except ValueError as exc:
        return usage_error("status", str(exc))
    if args.matrix and args.probe:
        return usage_error("status", "--matrix and --probe cannot be combined")
    if args.matrix:
        method, path = "GET", "/v1/matrix"
        timeout_s = defaults.ADMIN_REQUEST_TIMEOUT_S + defaults.MATRIX_READ_TIMEOUT_S
    elif args.probe:
        method, path = "PUT", "/v1/status/probe"
        timeout_s = defaults.ADMIN_PROBE_TIMEOUT_S + defaults.ADMIN_REQUEST_TIMEOUT_S
    else:
        method, path = "GET", "/v1/status"
        timeout_s = defaults.ADMIN_REQUEST_TIMEOUT_S
    try:
        status_code, doc = trio.run(
            lambda: admin_request(socket_path, method, path, timeout_s=timeout_s)
        )
    except AdminUnavailable as exc:
        print_error("status", str(exc))
        return EXIT_UNAVAILABLE
    if status_code != 200:
        print_error(
            "status", f"the agent at {socket_path} answered {status_code}: {doc.get('error', doc)}"
        )
        return 1
    # The answer is read as the document it claims to be; a missing field or one of the
    # wrong type is a KeyError / TypeError / ValueError here, one line for the user.
    try:
        if args.output == "json":
            text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        elif args.matrix:
            from meshhealth.cli.format_matrix import format_matrix_text

            text = format_matrix_text(cast("MatrixDocument", doc))
        else:
            text = format_status_text(cast("StatusDocument", doc), verbose=args.verbose)
    except (KeyError, TypeError, ValueError) as exc:
        print_error(
            "status", f"the agent at {socket_path} sent a status this client cannot read: {exc!r}"
        )
        return 1
    sys.stdout.write(text)
    summary = doc.get("summary", {})
    if args.matrix:
        failing = summary.get("unreachable", 0) or summary.get("stale", 0)
        return 1 if args.fail_on_unreachable and failing else 0
    if args.fail_on_unreachable and summary.get("reachable") != summary.get("total"):
        return 1
    return 0
