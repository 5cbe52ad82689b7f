"""Real `meshhealth agent` processes for end-to-end tests and benchmarks (synchronous).

    with AgentCluster(tmp_path, etcd.endpoint, interval_s=1) as cluster:
        n1 = cluster.start("n1")                 # NodeIP 127.<k>.1.1, HealthIP 127.<k>.2.1
        cluster.wait_admin(n1)                    # socket answers GET /v1/healthz
        doc = n1.status_json()                    # `meshhealth status -o json -H unix://...`
        n1.signal(signal.SIGSTOP)

Every agent gets unique 127.x addresses (second octet random per cluster, so parallel
runs do not clash), its own admin socket and log file in the tmp dir, and one shared
free HTTP port (all agents of a cluster probe one port, as in a real cluster). Agents
(and the responder children they started) are tracked by PID and always stopped on
close: SIGCONT, SIGTERM, SIGKILL after a grace period. Nothing is ever stopped by name.

`netns=NAME` runs every agent inside that network namespace (`ip netns exec`, which
execs: the PID is the agent's). `NetnsEtcd` is an etcd run inside a namespace, and
`put_entries` writes (key, value) pairs through a python process inside the namespace
the etcd is reachable from.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from meshhealth.model import (
    IDENTITY_HEALTH,
    IDENTITY_REMOTE_NODE,
    LABEL_HEALTH,
    LABEL_REMOTE_NODE,
    IPEntry,
    Node,
)
from meshhealth.wire import keys
from meshhealth.wire.ip_entry import encode_ip_entry
from meshhealth.wire.node import encode_node
from tests.plugins.etcd_server import EtcdServer, running_etcd
from tests.plugins.local_etcd import free_loopback_port
from tests.repo_paths import REPO_ROOT

STOP_GRACE_S = 5.0
T = TypeVar("T")


# --- polling ------------------------------------------------------------------------


def wait_for(
    fetch: Callable[[], T],
    accept: Callable[[T], bool],
    timeout_s: float,
    *,
    what: str,
    interval_s: float = 0.1,
) -> tuple[T, float]:
    """Call `fetch` until `accept(value)`; returns (value, seconds taken). AssertionError
    naming `what` and the last value after `timeout_s`."""
    start = time.monotonic()
    last: object = None
    while True:
        try:
            value = fetch()
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            last = exc
        else:
            last = value
            if accept(value):
                return value, time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s}s; last: {str(last)[-2000:]}")
        time.sleep(interval_s)


# --- the admin API, synchronously ---------------------------------------------------


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def admin_call(
    socket_path: str, method: str, path: str, *, timeout_s: float = 5.0
) -> tuple[int, dict[str, Any]]:
    """One request on a fresh connection (what `meshhealth status` does): (code, JSON)."""
    conn = _UnixHTTPConnection(socket_path, timeout_s)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body)
    finally:
        conn.close()


# --- agents -------------------------------------------------------------------------


def _meshhealth_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshhealth", *args]


def _children(pid: int) -> list[int]:
    """PIDs of the direct children of `pid` (every thread's, from /proc)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found.extend(int(p) for p in f.read().split())
    return found


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class AgentProcess:
    """One agent subprocess and what it was started with."""

    name: str
    cluster: str
    node_ip: str
    health_ip: str
    socket: str
    metrics_port: int
    log_path: Path
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0  # time.monotonic() of the spawn
    responder_pids: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def responder_children(self) -> list[int]:
        """The agent's `meshhealth responder` children now (remembered for cleanup)."""
        if self.proc is None:
            return []
        pids = [p for p in _children(self.proc.pid) if " responder " in _cmdline(p)]
        self.responder_pids.update(pids)
        return pids

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def admin(self, method: str, path: str, timeout_s: float = 5.0) -> tuple[int, dict[str, Any]]:
        return admin_call(self.socket, method, path, timeout_s=timeout_s)

    def status_cli(self, *args: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
        """`meshhealth status -H unix://SOCKET ARGS...` as a subprocess."""
        return subprocess.run(
            _meshhealth_argv("status", "-H", f"unix://{self.socket}", *args),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=REPO_ROOT,
        )

    def status_json(self) -> dict[str, Any]:
        done = self.status_cli("-o", "json")
        if done.returncode != 0:
            raise ValueError(f"status exit {done.returncode}: {done.stderr.strip()}")
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    def metrics_text(self, timeout_s: float = 5.0) -> str:
        conn = http.client.HTTPConnection(self.node_ip, self.metrics_port, timeout=timeout_s)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()


def node_of(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The status document's entry of node `name` (any cluster), or None."""
    for node in doc["nodes"]:
        if node["name"] == name:
            found: dict[str, Any] = node
            return found
    return None


def path_status(doc: dict[str, Any], name: str, address: str, protocol: str) -> str | None:
    """`status` of one path: address `host`|`health_endpoint`, protocol `icmp`|`http`."""
    node = node_of(doc, name)
    if node is None or node[address] is None:
        return None
    status: str = node[address]["primary_address"][protocol]["status"]
    return status


def all_paths_ok(doc: dict[str, Any], names: Sequence[str]) -> bool:
    """Exactly `names` are listed and every path of every one of them is `ok`."""
    if sorted(n["name"] for n in doc["nodes"]) != sorted(names):
        return False
    return all(
        path_status(doc, name, address, protocol) == "ok"
        for name in names
        for address in ("host", "health_endpoint")
        for protocol in ("icmp", "http")
    )


class AgentCluster:
    """Agents of one cluster on one etcd, with unique loopback addresses; see module doc."""

    def __init__(
        self,
        workdir: Path,
        etcd_endpoint: str,
        *,
        cluster: str = "c1",
        interval_s: float = 1.0,
        timeout_s: float = 0.5,
        lease_ttl_s: int | None = None,
        netns: str | None = None,
        octet: int | None = None,
        extra_args: Sequence[str] = (),
        log_level: str = "info",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.env = dict(env or {})  # set in every agent's environment
        self.etcd_endpoint = etcd_endpoint
        self.cluster = cluster
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.lease_ttl_s = lease_ttl_s
        self.netns = netns
        self.octet = octet if octet is not None else random.randrange(64, 250)
        self.extra_args = list(extra_args)
        self.log_level = log_level
        # One port for every agent's /hello responder and health endpoint. Free on
        # 127.0.0.1 now; agents bind 127.<octet>.x.y, where nothing else of ours listens.
        self.http_port = free_loopback_port()
        self.agents: dict[str, AgentProcess] = {}
        self._index = 0

    def __enter__(self) -> AgentCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def make(self, name: str, *extra: str) -> AgentProcess:
        """Define agent `name` (addresses, socket, argv) without starting it."""
        self._index += 1
        index = self._index
        node_ip = f"127.{self.octet}.1.{index}"
        health_ip = f"127.{self.octet}.2.{index}"
        sock = str(self.workdir / f"{name}.sock")
        metrics_port = free_loopback_port()
        args = [
            "agent",
            "--etcd",
            self.etcd_endpoint,
            "--cluster",
            self.cluster,
            "--node",
            name,
            "--node-ip",
            node_ip,
            "--health-mode",
            "loopback",
            "--health-ip",
            health_ip,
            "--socket",
            sock,
            "--interval",
            str(self.interval_s),
            "--timeout",
            str(self.timeout_s),
            "--http-port",
            str(self.http_port),
            "--udp-port",  # the UDP echo: the same free number, over UDP
            str(self.http_port),
            "--metrics-listen",
            f"{node_ip}:{metrics_port}",
            "--log-level",
            self.log_level,
        ]
        if self.lease_ttl_s is not None:
            args += ["--lease-ttl", str(self.lease_ttl_s)]
        argv = _meshhealth_argv(*args, *self.extra_args, *extra)
        if self.netns is not None:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        agent = AgentProcess(
            name=name,
            cluster=self.cluster,
            node_ip=node_ip,
            health_ip=health_ip,
            socket=sock,
            metrics_port=metrics_port,
            log_path=self.workdir / f"{name}.log",
            argv=argv,
        )
        self.agents[name] = agent
        return agent

    def spawn(self, agent: AgentProcess) -> AgentProcess:
        """Start (or restart) `agent`'s process; returns at once."""
        if agent.alive():
            raise RuntimeError(f"agent {agent.name} is already running (pid {agent.pid})")
        env = dict(os.environ)
        for key in [k for k in env if k.startswith("MESHHEALTH_")]:
            del env[key]
        env.update(self.env)
        with open(agent.log_path, "ab") as log_file:
            agent.started_at = time.monotonic()
            agent.proc = subprocess.Popen(
                agent.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                env=env,
            )
        return agent

    def start(self, name: str, *extra: str, wait: bool = True) -> AgentProcess:
        agent = self.spawn(self.make(name, *extra))
        if wait:
            self.wait_admin(agent)
        return agent

    def wait_admin(
        self, agent: AgentProcess, timeout_s: float = 10.0, *, interval_s: float = 0.1
    ) -> dict[str, Any]:
        """Until GET /v1/healthz answers 200; returns the document."""

        def fetch() -> tuple[int, dict[str, Any]]:
            if not agent.alive():
                raise AssertionError(f"agent {agent.name} exited: {agent.log_text()[-2000:]}")
            return agent.admin("GET", "/v1/healthz", timeout_s=1.0)

        (_, doc), _ = wait_for(
            fetch,
            lambda r: r[0] == 200,
            timeout_s,
            what=f"{agent.name} admin API",
            interval_s=interval_s,
        )
        return doc

    def stop(self, agent: AgentProcess, signum: int = signal.SIGTERM) -> int | None:
        """Signal the agent (resumed first), wait up to STOP_GRACE_S, SIGKILL; its exit
        code. Responder children still alive afterwards are killed by PID."""
        if agent.proc is None:
            return None
        agent.responder_children()
        if agent.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent.proc.pid, signal.SIGCONT)
            agent.proc.send_signal(signum)
            try:
                agent.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait(STOP_GRACE_S)
        self._reap_responders(agent)
        return agent.proc.returncode

    def _reap_responders(self, agent: AgentProcess) -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        for pid in sorted(agent.responder_pids):
            while pid_alive(pid) and " responder " in _cmdline(pid):
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    break
                time.sleep(0.05)

    def close(self) -> None:
        for agent in self.agents.values():
            if agent.proc is not None and agent.proc.poll() is None:
                agent.responder_children()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(agent.proc.pid, signal.SIGCONT)
                agent.proc.terminate()
        for agent in self.agents.values():
            self.stop(agent, signal.SIGKILL)


# --- dead targets and etcd in a namespace -------------------------------------------


def dead_target_entries(
    cluster: str, node_ips: Sequence[str], health_ips: Sequence[str] = ()
) -> list[tuple[str, bytes]]:
    """The node entry and ip -> identity entries of nodes `dead<i>` (NodeIP, and HealthIP
    if given): the node entry vouches for the ip entries, as a registration's does."""
    items: list[tuple[str, bytes]] = []
    for index, node_ip in enumerate(node_ips):
        name = f"dead{index}"
        health_ip = health_ips[index] if index < len(health_ips) else None
        node = Node(name, cluster, node_ip, health_ip, (), 4240, "test", 0.0)
        items.append((keys.node_key(cluster, name), encode_node(node)))
        entry = IPEntry(node_ip, node_ip, name, IDENTITY_REMOTE_NODE, (LABEL_REMOTE_NODE,))
        items.append((keys.ip_key(cluster, node_ip), encode_ip_entry(entry)))
        if health_ip is not None:
            health = IPEntry(health_ip, node_ip, name, IDENTITY_HEALTH, (LABEL_HEALTH,))
            items.append((keys.ip_key(cluster, health.ip), encode_ip_entry(health)))
    return items


_PUT_SCRIPT = """
import base64, json, sys
import etcd3
host, port = sys.argv[1], int(sys.argv[2])
client = etcd3.client(host=host, port=port, timeout=10)
for line in sys.stdin:
    key, value = json.loads(line)
    client.put(key, base64.b64decode(value))
client.close()
"""


def put_entries(endpoint: str, items: Sequence[tuple[str, bytes]], netns: str | None) -> None:
    """Put every (key, value) into the etcd at `endpoint` (seen from `netns`)."""
    hostport = endpoint.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    argv = [sys.executable, "-c", _PUT_SCRIPT, host, port]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    lines = "".join(
        json.dumps([key, base64.b64encode(value).decode()]) + "\n" for key, value in items
    )
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    subprocess.run(argv, input=lines.encode(), check=True, timeout=60, env=env, capture_output=True)


class NetnsEtcd(EtcdServer):
    """An etcd run inside network namespace `netns` (on its 127.0.0.1)."""

    def __init__(self, netns: str) -> None:
        super().__init__(client_port=free_loopback_port(), peer_port=free_loopback_port())
        self.netns = netns

    def command(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *super().command()]

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.running:
                raise RuntimeError(f"etcd in {self.netns} exited: {self._log_tail()}")
            if self.etcdctl("endpoint", "health", check=False).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd in {self.netns} not healthy: {self._log_tail()}")
            time.sleep(0.05)

    def etcdctl_argv(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *super().etcdctl_argv()]


def netns_etcd(netns: str) -> contextlib.AbstractContextManager[NetnsEtcd]:
    """A started NetnsEtcd for the `with` block, closed on the way out."""
    return running_etcd(NetnsEtcd(netns))
