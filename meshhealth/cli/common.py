"""Bits every command shares: the `--etcd` option with its environment default, and the
one-line error users read (`meshhealth CMD: what and where` on stderr)."""

from __future__ import annotations

import argparse
import os
import sys

from meshhealth import defaults

ENV_ETCD = "MESHHEALTH_ETCD"


def add_etcd_option(parser: argparse.ArgumentParser, *, metavar: str = "URLS") -> None:
    """`--etcd URLS`, defaulting to $MESHHEALTH_ETCD, else defaults.DEFAULT_ETCD (read by
    `etcd_endpoints`)."""
    parser.add_argument(
        "--etcd",
        default=None,
        metavar=metavar,
        help=f"etcd endpoints (default: ${ENV_ETCD}, else {defaults.DEFAULT_ETCD})",
    )


def etcd_endpoints(args: argparse.Namespace) -> str:
    """The endpoints `--etcd` stands for: the flag, else $MESHHEALTH_ETCD, else the
    default."""
    endpoints: str = args.etcd or os.environ.get(ENV_ETCD) or defaults.DEFAULT_ETCD
    return endpoints


def print_error(command: str, message: str) -> None:
    """`meshhealth COMMAND: message` on stderr (one line, no traceback)."""
    print(f"meshhealth {command}: {message}", file=sys.stderr)
