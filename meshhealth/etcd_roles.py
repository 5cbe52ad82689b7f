"""Least authority in etcd: the users, roles and grants that let each node's agent write
only its own entries. Pure: the etcdctl commands, as argument lists (the lab runs them)
or as shell lines (`meshhealth etcd-roles` prints them).

Per node N of cluster C, user `meshhealth_node_C_N` with two roles:

    meshhealth_node_C_N   readwrite, exact keys: state/nodes/v1/C/N, state/health/v1/C/N
                          and state/ip/v1/C/<ip> for each of N's addresses
    meshhealth_cluster_C  read, prefix meshhealth/ (every cluster's entries, the
                          liveness key); readwrite, exact keys: state/aggregator/v1/C,
                          state/summary/v1/C, cluster-config/C; readwrite, prefix
                          state/retained/v1/C/ (the keeper stamps others' retained
                          entries)

Exact keys, not prefixes: a prefix grant on `.../nodes/v1/C/node1` would also cover
`.../node10`. Remote clusters that read this etcd (clustermesh) get user
`meshhealth_reader_R` with role `meshhealth_reader`: read, prefix meshhealth/. Names
are joined with `_`, which cluster and node names never hold, so no two names meet.

Passwords never appear in a command line: `user add` reads the password on stdin, from
`<password_dir>/<user>.password` (the shell line redirects it).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from meshhealth.wire import keys

READ_ROLE = "meshhealth_reader"


@dataclass(frozen=True, slots=True)
class NodeAccess:
    """A node and the addresses its ip entries are written under (NodeIP, HealthIP and
    the secondary ones of a dual-stack node)."""

    name: str
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Command:
    """One etcdctl invocation: its arguments (after `etcdctl`) and, for `user add`, the
    file whose content is its stdin (the password)."""

    args: tuple[str, ...]
    stdin_file: str | None = None

    def shell(self) -> str:
        """The command as one shell line, every argument quoted."""
        line = shlex.join(("etcdctl", *self.args))
        return line if self.stdin_file is None else f"{line} < {shlex.quote(self.stdin_file)}"


def node_user(cluster: str, node: str) -> str:
    return f"meshhealth_node_{keys.validate_cluster_name(cluster)}_{keys.validate_node_name(node)}"


def reader_user(remote: str) -> str:
    return f"meshhealth_reader_{keys.validate_cluster_name(remote)}"


def shared_role(cluster: str) -> str:
    return f"meshhealth_cluster_{keys.validate_cluster_name(cluster)}"


def password_file(password_dir: str, user: str) -> str:
    return f"{password_dir.rstrip('/') or '/'}/{user}.password"


def parse_nodes(text: str) -> list[NodeAccess]:
    """`node1=10.0.0.1+fd00::1,node2=10.0.0.2` -> the nodes and their addresses
    (canonical). ValueError naming what is wrong."""
    nodes: list[NodeAccess] = []
    for item in (part.strip() for part in text.split(",")):
        name, sep, addresses = item.partition("=")
        if not sep or not addresses:
            raise ValueError(
                f"expected NODE=IP[+IP...], got {item!r} (the node's ip entries are "
                "written under its addresses)"
            )
        keys.validate_node_name(name)
        if name in {n.name for n in nodes}:
            raise ValueError(f"node {name} given twice")
        ips = tuple(keys.canonical_ip(a.strip()) for a in addresses.split("+"))
        nodes.append(NodeAccess(name, tuple(dict.fromkeys(ips))))
    taken: dict[str, str] = {}
    for node in nodes:
        for ip in node.addresses:
            if ip in taken:
                raise ValueError(f"address {ip} given to {taken[ip]} and {node.name}")
            taken[ip] = node.name
    return nodes


def _grant(role: str, permission: str, key: str, *, prefix: bool = False) -> Command:
    args = ("role", "grant-permission", role, permission, key)
    return Command((*args[:3], "--prefix=true", *args[3:]) if prefix else args)


def _user(user: str, roles: Sequence[str], password_dir: str) -> list[Command]:
    add = Command(("user", "add", user, "--interactive=false"), password_file(password_dir, user))
    return [add, *(Command(("user", "grant-role", user, role)) for role in roles)]


def commands(
    cluster: str,
    nodes: Sequence[NodeAccess],
    *,
    readers: Sequence[str] = (),
    password_dir: str,
    enable_auth: bool = True,
) -> list[Command]:
    """Every command, in order: the shared role, each node's role and user, the read
    role and its users, then `auth enable` (etcd's user `root` must exist by then)."""
    shared = shared_role(cluster)
    out = [
        Command(("role", "add", shared)),
        _grant(shared, "read", keys.PREFIX, prefix=True),
        _grant(shared, "readwrite", keys.aggregator_key(cluster)),
        _grant(shared, "readwrite", keys.summary_key(cluster)),
        _grant(shared, "readwrite", keys.cluster_config_key(cluster)),
        _grant(shared, "readwrite", keys.retained_prefix(cluster), prefix=True),
    ]
    for node in nodes:
        user = node_user(cluster, node.name)
        out.append(Command(("role", "add", user)))
        own = [keys.node_key(cluster, node.name), keys.health_key(cluster, node.name)]
        own += [keys.ip_key(cluster, ip) for ip in node.addresses]
        out += [_grant(user, "readwrite", key) for key in own]
        out += _user(user, [user, shared], password_dir)
    if readers:
        out += [
            Command(("role", "add", READ_ROLE)),
            _grant(READ_ROLE, "read", keys.PREFIX, prefix=True),
        ]
        for remote in readers:
            out += _user(reader_user(remote), [READ_ROLE], password_dir)
    if enable_auth:
        out.append(Command(("auth", "enable")))
    return out
