"""Per-node etcd users (meshhealth.etcd_roles): the commands, pure, and what they allow
against a real etcd with authentication on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth import etcd_roles
from meshhealth.etcd_roles import Command, NodeAccess
from meshhealth.kvstore import EtcdError, open_etcd
from meshhealth.kvstore.etcd_config import EtcdAccess, EtcdAuth, etcd_access
from meshhealth.model import HealthReport, Node
from meshhealth.wire import keys
from meshhealth.wire.health import encode_health_report
from meshhealth.wire.node import encode_node
from tests.etcd_helpers import FAST_ETCD
from tests.kv_strategies import cluster_names, node_names
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

# --- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("node1=10.0.0.1", [NodeAccess("node1", ("10.0.0.1",))]),
        (
            "node1=10.0.0.1+fd00:0::1, node2=10.0.0.2",
            [NodeAccess("node1", ("10.0.0.1", "fd00::1")), NodeAccess("node2", ("10.0.0.2",))],
        ),
        ("a.b=10.0.0.1+10.0.0.1", [NodeAccess("a.b", ("10.0.0.1",))]),
    ],
)
def test_parse_nodes(text: str, nodes: list[NodeAccess]) -> None:
    assert etcd_roles.parse_nodes(text) == nodes


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("node1", "expected NODE=IP[+IP...], got 'node1'"),
        ("node1=", "expected NODE=IP"),
        ("Node1=10.0.0.1", "invalid node name 'Node1'"),
        ("node1=10.0.0.1,node1=10.0.0.2", "node node1 given twice"),
        ("node1=10.0.0.1,node2=10.0.0.1", "address 10.0.0.1 given to node1 and node2"),
        ("node1=10.0.0.1+nope", "invalid IP address 'nope'"),
        ("node1=fe80::1%eth0", "scoped"),
    ],
)
def test_parse_nodes_refuses(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        etcd_roles.parse_nodes(text)
    assert says in str(caught.value)


# --- the commands -------------------------------------------------------------------------


def test_the_commands_of_one_node_and_one_reader() -> None:
    lines = [
        c.shell()
        for c in etcd_roles.commands(
            "lab1",
            [NodeAccess("node1", ("10.0.0.1", "fd00::1"))],
            readers=["lab2"],
            password_dir="/run/pw dir/",
        )
    ]
    shared, node, reader = (
        "meshhealth_cluster_lab1",
        "meshhealth_node_lab1_node1",
        "meshhealth_reader_lab2",
    )
    s = "meshhealth/state"
    assert lines == [
        f"etcdctl role add {shared}",
        f"etcdctl role grant-permission {shared} --prefix=true read meshhealth/",
        f"etcdctl role grant-permission {shared} readwrite {s}/aggregator/v1/lab1",
        f"etcdctl role grant-permission {shared} readwrite {s}/summary/v1/lab1",
        f"etcdctl role grant-permission {shared} readwrite meshhealth/cluster-config/lab1",
        f"etcdctl role grant-permission {shared} --prefix=true readwrite {s}/retained/v1/lab1/",
        f"etcdctl role add {node}",
        f"etcdctl role grant-permission {node} readwrite {s}/nodes/v1/lab1/node1",
        f"etcdctl role grant-permission {node} readwrite {s}/health/v1/lab1/node1",
        f"etcdctl role grant-permission {node} readwrite {s}/ip/v1/lab1/10.0.0.1",
        f"etcdctl role grant-permission {node} readwrite {s}/ip/v1/lab1/fd00::1",
        f"etcdctl user add {node} --interactive=false < '/run/pw dir/{node}.password'",
        f"etcdctl user grant-role {node} {node}",
        f"etcdctl user grant-role {node} {shared}",
        "etcdctl role add meshhealth_reader",
        "etcdctl role grant-permission meshhealth_reader --prefix=true read meshhealth/",
        f"etcdctl user add {reader} --interactive=false < '/run/pw dir/{reader}.password'",
        f"etcdctl user grant-role {reader} meshhealth_reader",
        "etcdctl auth enable",
    ]


def test_no_grant_is_a_prefix_of_a_node_entry() -> None:
    """A prefix grant on a node's key would also cover node10's: only exact keys."""
    commands = etcd_roles.commands(
        "lab1", [NodeAccess("node1", ("10.0.0.1",))], password_dir="/p", enable_auth=False
    )
    prefixes = [c.args[-1] for c in commands if "--prefix=true" in c.args]
    assert prefixes == ["meshhealth/", "meshhealth/state/retained/v1/lab1/"]
    assert all(c.args[-2] == "read" for c in commands if c.args[-1] == "meshhealth/")
    assert commands[-1].args[0] != "auth"


@pytest.mark.parametrize(
    ("command", "line"),
    [
        (
            Command(("user", "add", "u", "--interactive=false"), "/a b/u.password"),
            "etcdctl user add u --interactive=false < '/a b/u.password'",
        ),
        (Command(("user", "add", "u"), "/x/it's"), "etcdctl user add u < '/x/it'\"'\"'s'"),
        (Command(("role", "add", "r;rm -rf /")), "etcdctl role add 'r;rm -rf /'"),
    ],
)
def test_shell_lines_quote_every_argument(command: Command, line: str) -> None:
    assert command.shell() == line


@given(a=st.tuples(cluster_names, node_names), b=st.tuples(cluster_names, node_names))
def test_user_and_role_names_never_meet(a: tuple[str, str], b: tuple[str, str]) -> None:
    names = {
        etcd_roles.node_user(*a),
        etcd_roles.node_user(*b),
        etcd_roles.shared_role(a[0]),
        etcd_roles.shared_role(b[0]),
        etcd_roles.reader_user(a[0]),
        etcd_roles.reader_user(b[0]),
        etcd_roles.READ_ROLE,
    }
    # one user per node, a role and a reader per cluster, the read role: all distinct
    assert len(names) == len({a, b}) + 2 * len({a[0], b[0]}) + 1


def test_the_command_prints_the_lines() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "meshhealth",
            "etcd-roles",
            "--cluster",
            "lab1",
            "--nodes",
            "node1=10.0.0.1",
            "--password-dir",
            "/p",
            "--no-auth-enable",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "etcdctl role add meshhealth_cluster_lab1"
    user = "meshhealth_node_lab1_node1"
    assert f"etcdctl user add {user} --interactive=false < /p/{user}.password" in lines
    assert "auth enable" not in done.stdout


# --- against a real etcd with authentication on -------------------------------------------


def apply(server: EtcdServer, commands: list[Command]) -> None:
    for command in commands:
        stdin = None if command.stdin_file is None else Path(command.stdin_file).read_bytes()
        server.etcdctl(*command.args, input_bytes=stdin)


def _node(name: str, ip: str) -> Node:
    return Node(name, "lab1", ip, None, (), 4240, "1.0", 1.0)


async def test_a_node_user_writes_its_own_entries_only(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    nodes = etcd_roles.parse_nodes("node1=127.0.0.11,node2=127.0.0.12")
    commands = etcd_roles.commands(
        "lab1", nodes, readers=["lab2"], password_dir=str(tmp_path), enable_auth=False
    )
    for user in (
        "meshhealth_node_lab1_node1",
        "meshhealth_node_lab1_node2",
        "meshhealth_reader_lab2",
    ):
        path = tmp_path / f"{user}.password"
        path.write_text(f"pw-{user}\n")
        path.chmod(0o600)
    apply(etcd_server, commands)
    etcd_server.enable_auth("rootpw")
    # root writes node2's entries, as node2's agent would have
    node1, node2 = _node("node1", "127.0.0.11"), _node("node2", "127.0.0.12")
    etcd_server.etcdctl("put", keys.node_key("lab1", "node2"), input_bytes=encode_node(node2))

    def access(user: str) -> EtcdAccess:
        return etcd_access(
            etcd_server.endpoint,
            auth=EtcdAuth(user, password_file=str(tmp_path / f"{user}.password")),
        )

    report = encode_health_report(HealthReport("node1", "lab1", 1.0, 1.0, ()))
    async with open_etcd(access("meshhealth_node_lab1_node1"), **FAST_ETCD) as etcd:
        # its own entries: node, health, ip, under a lease (and the lease revoked)
        lease = await etcd.lease_grant(10)
        await etcd.put(keys.node_key("lab1", "node1"), encode_node(node1), lease_id=lease)
        await etcd.put(keys.health_key("lab1", "node1"), report, lease_id=lease)
        await etcd.put(keys.ip_key("lab1", "127.0.0.11"), b"x", lease_id=lease)
        # the keys every node shares
        await etcd.put(keys.summary_key("lab1"), b"x")
        await etcd.put(keys.retained_key("lab1", "node2"), b"x")
        # node2's: refused
        for key in (
            keys.node_key("lab1", "node2"),
            keys.health_key("lab1", "node2"),
            keys.ip_key("lab1", "127.0.0.12"),
            keys.node_key("lab1", "node10"),  # not a prefix grant
            keys.node_key("lab2", "node1"),  # another cluster
        ):
            with pytest.raises(EtcdError, match="permission denied"):
                await etcd.put(key, b"forged")
        with pytest.raises(EtcdError, match="permission denied"):
            await etcd.delete(keys.node_key("lab1", "node2"))
        # it reads everything
        kv, _ = await etcd.get(keys.node_key("lab1", "node2"))
        assert kv is not None and kv.value == encode_node(node2)
        await etcd.lease_revoke(lease)
    async with open_etcd(access("meshhealth_reader_lab2"), **FAST_ETCD) as etcd:
        kvs, _ = await etcd.get_prefix(keys.nodes_prefix("lab1"))
        assert [kv.key for kv in kvs] == [keys.node_key("lab1", "node2")]
        with pytest.raises(EtcdError, match="permission denied"):
            await etcd.put(keys.summary_key("lab2"), b"x")
