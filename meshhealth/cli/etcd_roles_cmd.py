"""`meshhealth etcd-roles`: print the etcdctl commands that give each node of a cluster
its own etcd user, allowed to write only its own entries (meshhealth.etcd_roles)."""

from __future__ import annotations

import argparse

from meshhealth.cli.common import usage_error

DESCRIPTION = """\
Print the etcdctl commands (roles, grants, users, then `auth enable`) that give every
node of CLUSTER its own etcd user: it may read all of meshhealth/ and write only its own
node, health and ip entries, plus the keys every node shares (the aggregator claim, the
summary, the cluster config, the retained entries). Nothing is run: review the lines,
then run them against the cluster's etcd (as root; etcd's user `root` must exist before
`auth enable`). Each user's password is read from PASSWORD_DIR/<user>.password (mode
0600), which the agent of that node then reads with --etcd-password-file.

examples:
  meshhealth etcd-roles --cluster lab1 --nodes node1=10.0.0.1,node2=10.0.0.2
  meshhealth etcd-roles --cluster lab1 --nodes node1=10.0.0.1+fd00::1 --readers lab2
See docs/security.md.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "etcd-roles",
        help="print etcdctl commands for per-node etcd users (least authority)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cluster", required=True, metavar="NAME", help="the cluster's name")
    parser.add_argument(
        "--nodes",
        required=True,
        metavar="NODE=IP[+IP...],...",
        help="each node and the addresses of its ip entries (NodeIP, HealthIP, secondary ones)",
    )
    parser.add_argument(
        "--readers",
        default="",
        metavar="CLUSTER,...",
        help="remote clusters (clustermesh) that read this etcd: a read-only user each",
    )
    parser.add_argument(
        "--password-dir",
        default="/etc/meshhealth/etcd-passwords",
        metavar="DIR",
        help="where each user's password file is (default /etc/meshhealth/etcd-passwords)",
    )
    parser.add_argument(
        "--no-auth-enable", action="store_true", help="leave out the final `auth enable`"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from meshhealth import etcd_roles
    from meshhealth.wire import keys

    try:
        keys.validate_cluster_name(args.cluster)
        nodes = etcd_roles.parse_nodes(args.nodes)
        readers = [r.strip() for r in args.readers.split(",") if r.strip()]
        for remote in readers:
            keys.validate_cluster_name(remote)
    except ValueError as error:
        return usage_error("etcd-roles", str(error))
    for command in etcd_roles.commands(
        args.cluster,
        nodes,
        readers=readers,
        password_dir=args.password_dir,
        enable_auth=not args.no_auth_enable,
    ):
        print(command.shell())
    return 0
