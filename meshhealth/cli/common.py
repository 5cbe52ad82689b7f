"""Bits every command shares: the `--etcd` option with its environment default, the
etcd TLS and user options, the one-line error users read (`meshhealth CMD: what and
where` on stderr) and the exit code of a usage error.

Exit codes of every command: 0 done; 1 done, but what was found is bad (a failing
check with `--fail-on-unreachable`, an error answer); 2 a usage error (a bad flag or
value: argparse's own code, and ours for what argparse cannot check) or what the command
needs cannot be reached (the agent, etcd). Each command's help says which apply."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from meshhealth import defaults
from meshhealth.terminal_text import escape

if TYPE_CHECKING:
    from meshhealth.kvstore.etcd_config import EtcdAccess

ENV_ETCD = "MESHHEALTH_ETCD"
EXIT_USAGE = 2  # as argparse exits on a bad flag
EXIT_UNAVAILABLE = 2  # the agent or etcd cannot be reached
# The etcd TLS and user options: (flag, attribute, environment variable, help).
ETCD_ACCESS_OPTIONS = (
    ("--etcd-config", "etcd_config", "MESHHEALTH_ETCD_CONFIG",
     "etcd configuration file, Cilium's shape (endpoints, trusted-ca-file, cert-file, key-file)"),
    ("--etcd-ca", "etcd_ca", "MESHHEALTH_ETCD_CA", "CA certificate (PEM) that signs etcd's"),
    ("--etcd-cert", "etcd_cert", "MESHHEALTH_ETCD_CERT", "client certificate (PEM) for etcd"),
    ("--etcd-key", "etcd_key", "MESHHEALTH_ETCD_KEY", "client key (PEM) for etcd"),
    ("--etcd-user", "etcd_user", "MESHHEALTH_ETCD_USER", "etcd user name"),
    ("--etcd-password-file", "etcd_password_file", "MESHHEALTH_ETCD_PASSWORD_FILE",
     "file holding the etcd user's password (or set MESHHEALTH_ETCD_PASSWORD)"),
)  # fmt: skip
ENV_ETCD_PASSWORD = "MESHHEALTH_ETCD_PASSWORD"


def add_etcd_option(parser: argparse.ArgumentParser, *, metavar: str = "URLS") -> None:
    """`--etcd URLS`, defaulting to $MESHHEALTH_ETCD, else defaults.DEFAULT_ETCD (read by
    `etcd_endpoints`)."""
    parser.add_argument(
        "--etcd",
        default=None,
        metavar=metavar,
        help=f"etcd endpoints (default: ${ENV_ETCD}, else {defaults.DEFAULT_ETCD})",
    )
    add_etcd_access_options(parser)


def add_etcd_timeout_option(parser: argparse.ArgumentParser) -> None:
    """`--timeout SECONDS`: how long a command waits for etcd's answer (checked > 0 by
    the command)."""
    parser.add_argument(
        "--timeout",
        type=float,
        default=defaults.ETCD_REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help="give up when etcd has not answered within this time "
        f"(default {defaults.ETCD_REQUEST_TIMEOUT_S:g})",
    )


def add_etcd_source_options(
    parser: argparse.ArgumentParser, what: str, *, mesh: bool = True
) -> None:
    """`--etcd` (TLS and user options included), `--cluster`, `--mesh` (unless `mesh` is
    False) and `--timeout`: where a command reads `what` (`reports`, `events`,
    `roll-ups`) from; read back by `etcd_sources_from_args` and `etcd_timeout_from_args`."""
    add_etcd_option(parser)
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="NAME",
        help=f"only the {what} of this cluster's nodes (default: every cluster in that etcd)",
    )
    if mesh:
        parser.add_argument(
            "--mesh",
            action="append",
            default=[],
            metavar="NAME=URLS",
            help=f"also read the {what} of remote cluster NAME from its etcd (repeatable)",
        )
    else:
        parser.set_defaults(mesh=[])
    add_etcd_timeout_option(parser)


def etcd_sources_from_args(args: argparse.Namespace) -> list[tuple[str | None, EtcdAccess]]:
    """(cluster or None, etcd) to read, from `add_etcd_source_options`' options: the
    local etcd first, then each `--mesh` cluster's (with the same TLS files and user);
    ValueError with a one-line message."""
    from meshhealth.wire.keys import validate_cluster_name

    access = etcd_access_from_args(args)
    cluster = None if args.cluster is None else validate_cluster_name(args.cluster)
    sources: list[tuple[str | None, EtcdAccess]] = [(cluster, access)]
    for item in args.mesh:
        name, sep, urls = item.partition("=")
        if not sep:
            raise ValueError(f"--mesh: expected NAME=URLS, got {item!r}")
        sources.append((validate_cluster_name(name.strip()), etcd_access_from_args(args, urls)))
    return sources


def etcd_timeout_from_args(args: argparse.Namespace) -> float:
    """`--timeout` (`add_etcd_timeout_option`); ValueError when it is not > 0."""
    timeout_s: float = args.timeout
    if not timeout_s > 0:
        raise ValueError("--timeout must be > 0")
    return timeout_s


def add_etcd_access_options(parser: argparse.ArgumentParser) -> None:
    """`--etcd-config`, `--etcd-ca/-cert/-key`, `--etcd-user`, `--etcd-password-file`,
    each defaulting to its environment variable (read by `etcd_access_from_args`).
    There is no password flag: a command line is visible to every user."""
    group = parser.add_argument_group("etcd TLS and authentication")
    refuse_password_flag(group)
    for flag, dest, env, text in ETCD_ACCESS_OPTIONS:
        group.add_argument(
            flag,
            dest=dest,
            default=None,
            metavar="FILE" if "user" not in dest else "NAME",
            help=f"{text} (default: ${env})",
        )


def refuse_password_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--etcd-password` is an error that says why. Without it argparse would take
    `--etcd-password X` for an abbreviation of `--etcd-password-file X`."""
    parser.add_argument(
        "--etcd-password", nargs="?", action=_NoPasswordFlag, help=argparse.SUPPRESS
    )


class _NoPasswordFlag(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser.error(
            "--etcd-password: a password on the command line is visible to every user; "
            "use --etcd-password-file FILE or MESHHEALTH_ETCD_PASSWORD"
        )


def etcd_access_from_args(args: argparse.Namespace, endpoints: str | None = None) -> EtcdAccess:
    """Endpoints, TLS files and user from the options (each falling back to its
    environment variable, the endpoints and files also to `--etcd-config`).
    EtcdConfigError (a ValueError) with a one-line message when they do not fit."""
    from meshhealth.kvstore.etcd_config import (
        EtcdAuth,
        TlsFiles,
        etcd_access,
        read_etcd_config_file,
    )

    def value(dest: str) -> str | None:
        env = next(e for _, d, e, _ in ETCD_ACCESS_OPTIONS if d == dest)
        given: str | None = getattr(args, dest, None) or os.environ.get(env) or None
        return given

    config_path = value("etcd_config")
    config = read_etcd_config_file(config_path) if config_path else None
    spec = endpoints or getattr(args, "etcd", None) or os.environ.get(ENV_ETCD)
    if not spec and config is None:
        spec = defaults.DEFAULT_ETCD
    tls = TlsFiles(value("etcd_ca"), value("etcd_cert"), value("etcd_key"))
    user = value("etcd_user")
    auth = None
    if user is not None:
        auth = EtcdAuth(
            user,
            password_file=value("etcd_password_file"),
            password=os.environ.get(ENV_ETCD_PASSWORD),
        )
    return etcd_access(spec, config=config, tls=tls, auth=auth)


def etcd_endpoints(args: argparse.Namespace) -> str:
    """The endpoints `--etcd` stands for: the flag, else $MESHHEALTH_ETCD, else the
    default."""
    endpoints: str = args.etcd or os.environ.get(ENV_ETCD) or defaults.DEFAULT_ETCD
    return endpoints


def print_error(command: str, message: str) -> None:
    """`meshhealth COMMAND: message` on stderr (one line, no traceback; what it quotes
    from etcd or a peer escaped: meshhealth.terminal_text)."""
    print(f"meshhealth {command}: {escape(message)}", file=sys.stderr)


def usage_error(command: str, message: str) -> int:
    """Print a bad flag or value as one line; the exit code of a usage error."""
    print_error(command, message)
    return EXIT_USAGE
