"""`lab up --etcd-auth`: each cluster's etcd with authentication on, and every agent with
its own etcd user that may write only its node's entries (meshhealth.etcd_roles).

The passwords are random, one file each under `<lab dir>/etcd-passwords/` (mode 0600,
the directory 0700): `root.password` for etcd's root user of every cluster, and
`<user>.password` per node, which its agent reads with `--etcd-password-file`. The
etcdctl commands run in the fabric namespace, where the etcds listen.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from meshhealth import etcd_roles
from meshhealth.lab import plan as P
from meshhealth.lab.netns_ops import CommandError

ROOT_USER = "root"


def password_dir(plan: P.LabPlan) -> Path:
    return plan.dir / "etcd-passwords"


def node_user(node: P.NodePlan) -> str:
    return etcd_roles.node_user(node.cluster, node.name)


def node_access(node: P.NodePlan) -> etcd_roles.NodeAccess:
    """The node and the addresses its registrar writes ip entries under."""
    listed = (node.node_ip, node.health_ip, node.node_ip_secondary, node.health_ip_secondary)
    return etcd_roles.NodeAccess(node.name, tuple(ip for ip in listed if ip is not None))


def agent_args(plan: P.LabPlan, node: P.NodePlan) -> list[str]:
    """The agent options that make it use its own user."""
    user = node_user(node)
    path = etcd_roles.password_file(str(password_dir(plan)), user)
    return ["--etcd-user", user, "--etcd-password-file", path]


def _write_password(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(24) + "\n")


def _etcdctl(plan: P.LabPlan, cluster: P.ClusterPlan, command: etcd_roles.Command) -> None:
    stdin = None if command.stdin_file is None else Path(command.stdin_file).read_bytes()
    argv = ["ip", "netns", "exec", plan.fabric_netns, "etcdctl", "--endpoints"]
    argv += [cluster.etcd_url, "--dial-timeout", "2s", *command.args]
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=15, check=False, env=env)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        raise CommandError(
            f"`{command.shell()}` against {cluster.etcd_url} failed: "
            f"{why[-1] if why else done.returncode}"
        )


def enable(plan: P.LabPlan) -> int:
    """Create the password files, the users, roles and grants of every cluster, then
    turn authentication on. Returns the number of users made."""
    directory = password_dir(plan)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_password(directory / f"{ROOT_USER}.password")
    users = 0
    for cluster in plan.clusters:
        nodes = [node for node in plan.nodes if node.cluster == cluster.name]
        for node in nodes:
            _write_password(directory / f"{node_user(node)}.password")
        root_file = str(directory / f"{ROOT_USER}.password")
        commands = [
            etcd_roles.Command(("user", "add", ROOT_USER, "--interactive=false"), root_file),
            *etcd_roles.commands(
                cluster.name,
                [node_access(node) for node in nodes],
                password_dir=str(directory),
            ),
        ]
        for command in commands:
            _etcdctl(plan, cluster, command)
        users += len(nodes)
    return users
