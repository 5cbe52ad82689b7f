"""A multi-member etcd per cluster (`lab up --etcd-members 3`), TLS with client
certificates, each member in a namespace of its own.

| what                          | value                              | example (k=1, m=2)       |
|-------------------------------|------------------------------------|--------------------------|
| member m of cluster k         | netns `<prefix>-labk-etcdm`        | `mh-lab1-etcd2`          |
| its address (on the fabric)   | 10.77.(250+m).k                    | 10.77.252.1              |
| client URL (TLS, client cert) | https://10.77.(250+m).k:2379       | https://10.77.252.1:2379 |
| peer URL (between members)    | http://10.77.(250+m).k:2380        |                          |

The lab makes its own CA (`<lab dir>/pki`, meshhealth.lab.certs): one server
certificate per member (its address as subjectAltName) and one client certificate the
agents, `lab exec` commands and etcdctl use. Peer traffic between members stays plain
inside the lab's fabric. Agents get every member's URL with the CA and client files,
and reach the other clusters through a mesh directory of Cilium-shaped files
(`<lab dir>/mesh/labk`).

Faults (target `N` or `labk/N`): `kill-etcd-member` (SIGKILL), `start-etcd-member`
(again, same data dir), `partition-etcd-member` (its link down: no client or peer
reaches it; `lab fault clear` brings it up).
"""

from __future__ import annotations

import contextlib
import http.client
import shutil
import signal
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from meshhealth import defaults
from meshhealth.lab import certs, netns_ops, processes
from meshhealth.lab import plan as P
from meshhealth.lab import state as S
from meshhealth.netns import call_in_netns

KILL_MEMBER: Final = "kill-etcd-member"
START_MEMBER: Final = "start-etcd-member"
PARTITION_MEMBER: Final = "partition-etcd-member"
MEMBER_FAULTS: Final = {
    KILL_MEMBER: "SIGKILL one etcd member: agents fail over to the others, nothing else moves",
    START_MEMBER: "start the member again on its data dir; it catches up with the others",
    PARTITION_MEMBER: "the member's link goes down: agents using it fail over within seconds",
}
MAX_MEMBERS: Final = 5
CA_NAME: Final = "meshhealth-lab-ca"
CLIENT_NAME: Final = "client"


@dataclass(frozen=True, slots=True)
class MemberPlan:
    cluster: str
    cluster_index: int
    index: int  # m, 1-based
    name: str  # lab1-etcd2
    netns: str
    ip: str
    client_url: str
    peer_url: str
    data_dir: Path
    log: Path
    veth_fabric: str

    @property
    def key(self) -> str:
        """Its process key in the state file and its fault target: `etcd/lab1/2`."""
        return f"etcd/{self.cluster}/{self.index}"

    @property
    def target(self) -> str:
        return f"{self.cluster}/{self.index}"


def validate_count(members: int) -> int:
    if members < 1 or members > MAX_MEMBERS or members % 2 == 0:
        raise P.PlanError(f"--etcd-members must be an odd number 1..{MAX_MEMBERS}, got {members}")
    return members


def members_of(plan: P.LabPlan, cluster: P.ClusterPlan, count: int) -> tuple[MemberPlan, ...]:
    """The members of `cluster` (pure)."""
    out = []
    for m in range(1, count + 1):
        ip = f"10.77.{250 + m}.{cluster.index}"
        out.append(
            MemberPlan(
                cluster=cluster.name,
                cluster_index=cluster.index,
                index=m,
                name=f"{cluster.name}-etcd{m}",
                netns=f"{plan.prefix}-{cluster.name}-etcd{m}",
                ip=ip,
                client_url=f"https://{ip}:{P.ETCD_CLIENT_PORT}",
                peer_url=f"http://{ip}:{P.ETCD_PEER_PORT}",
                data_dir=cluster.etcd_dir.parent / f"etcd{m}.data",
                log=cluster.dir / f"etcd{m}.log",
                veth_fabric=f"vl{cluster.index}e{m}",
            )
        )
    return tuple(out)


def all_members(plan: P.LabPlan, count: int) -> list[MemberPlan]:
    return [m for c in plan.clusters for m in members_of(plan, c, count)]


def client_urls(plan: P.LabPlan, cluster: P.ClusterPlan, count: int) -> str:
    return ",".join(m.client_url for m in members_of(plan, cluster, count))


# --- files: CA, certificates, the mesh directory ---------------------------------------------


def pki_dir(plan: P.LabPlan) -> Path:
    return plan.dir / "pki"


def ca_file(plan: P.LabPlan) -> Path:
    return pki_dir(plan) / f"{CA_NAME}.crt"


def client_pair(plan: P.LabPlan) -> certs.KeyPair:
    return certs.KeyPair(pki_dir(plan) / f"{CLIENT_NAME}.crt", pki_dir(plan) / f"{CLIENT_NAME}.key")


def server_pair(plan: P.LabPlan, member: MemberPlan) -> certs.KeyPair:
    return certs.KeyPair(pki_dir(plan) / f"{member.name}.crt", pki_dir(plan) / f"{member.name}.key")


def mesh_dir(plan: P.LabPlan) -> Path:
    return plan.dir / "mesh"


def make_files(plan: P.LabPlan, count: int) -> None:
    """The lab's CA, a certificate per member, the client certificate, and one
    Cilium-shaped etcd configuration file per cluster in the mesh directory."""
    ca = certs.make_ca(pki_dir(plan), CA_NAME)
    for member in all_members(plan, count):
        certs.make_cert(ca, pki_dir(plan), member.name, ips=[member.ip], dns=[member.name])
    client = certs.make_cert(ca, pki_dir(plan), CLIENT_NAME, ips=[], dns=["meshhealth"])
    mesh_dir(plan).mkdir(parents=True, exist_ok=True)
    for cluster in plan.clusters:
        urls = "".join(f"- {m.client_url}\n" for m in members_of(plan, cluster, count))
        (mesh_dir(plan) / cluster.name).write_text(
            f"endpoints:\n{urls}trusted-ca-file: {ca.cert}\n"
            f"cert-file: {client.cert}\nkey-file: {client.key}\n"
        )


# --- processes ----------------------------------------------------------------------------------


def member_argv(plan: P.LabPlan, member: MemberPlan, count: int, etcd_bin: str) -> list[str]:
    cluster = plan.cluster(member.cluster)
    peers = ",".join(f"{m.name}={m.peer_url}" for m in members_of(plan, cluster, count))
    pair = server_pair(plan, member)
    return [
        etcd_bin,
        "--name", member.name,
        "--data-dir", str(member.data_dir),
        "--listen-client-urls", member.client_url,
        "--advertise-client-urls", member.client_url,
        "--listen-peer-urls", member.peer_url,
        "--initial-advertise-peer-urls", member.peer_url,
        "--initial-cluster", peers,
        "--initial-cluster-state", "new",
        "--initial-cluster-token", f"meshhealth-{plan.prefix}-{cluster.name}",
        "--cert-file", str(pair.cert),
        "--key-file", str(pair.key),
        "--trusted-ca-file", str(ca_file(plan)),
        "--client-cert-auth",
        "--quota-backend-bytes", str(256 * 1024 * 1024),
        "--auto-compaction-retention", "5m",
        "--logger", "zap",
        "--log-level", "warn",
    ]  # fmt: skip


def start_member(st: S.LabState, plan: P.LabPlan, member: MemberPlan) -> S.ProcessRecord:
    """Start (or restart, on its data dir) one member; does not wait."""
    etcd = shutil.which("etcd") or "etcd"
    member.data_dir.parent.mkdir(parents=True, exist_ok=True)
    rec = processes.start_detached(
        member.netns,
        member_argv(plan, member, st.etcd_members, etcd),
        member.log,
        nice=defaults.LAB_ETCD_NICE,
    )
    st.processes[member.key] = rec
    S.save(st)
    return rec


def member_healthy(plan: P.LabPlan, member: MemberPlan, timeout_s: float = 1.0) -> bool:
    """GET /health over TLS with the client certificate, from the member's namespace."""
    client = client_pair(plan)

    def get() -> bool:
        context = ssl.create_default_context(cafile=str(ca_file(plan)))
        context.load_cert_chain(str(client.cert), str(client.key))
        conn = http.client.HTTPSConnection(
            member.ip, P.ETCD_CLIENT_PORT, timeout=timeout_s, context=context
        )
        try:
            conn.request("GET", "/health")
            response = conn.getresponse()
            return response.status == 200 and b'"health":"true"' in response.read()
        except (OSError, ssl.SSLError):
            return False
        finally:
            conn.close()

    with contextlib.suppress(OSError):
        return call_in_netns(member.netns, get)
    return False


def _log_tail(member: MemberPlan) -> str:
    try:
        lines = member.log.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return f"no log at {member.log}"
    return f"{lines[-1] if lines else '(empty log)'} (log: {member.log})"


def wait_members(
    st: S.LabState, plan: P.LabPlan, members: list[MemberPlan], timeout_s: float
) -> None:
    """Until every member in `members` answers /health; RuntimeError with the log's tail."""
    deadline = time.monotonic() + timeout_s
    waiting = list(members)
    while waiting:
        for member in list(waiting):
            if member_healthy(plan, member):
                waiting.remove(member)
            elif not processes.is_alive(st.processes[member.key]):
                raise RuntimeError(f"etcd member {member.name} exited: {_log_tail(member)}")
        if waiting and time.monotonic() > deadline:
            names = ", ".join(m.name for m in waiting)
            raise RuntimeError(f"etcd member(s) {names} not healthy within {timeout_s:g}s")
        if waiting:
            time.sleep(0.2)


# --- lab up -----------------------------------------------------------------------------------


def build_members(st: S.LabState, plan: P.LabPlan, say: Callable[[str], None]) -> None:
    """CA and certificates, one namespace per member on the fabric, every member started
    (they elect a leader once a majority runs), then waited for."""
    make_files(plan, st.etcd_members)
    say(f"  CA and certificates in {pki_dir(plan)}; mesh files in {mesh_dir(plan)}")
    members = all_members(plan, st.etcd_members)
    for member in members:
        st.add_namespace(member.netns)
        S.save(st)
        netns_ops.add_netns(member.netns)
        netns_ops.attach_veth(plan.fabric_netns, member.netns, member.veth_fabric, member.ip)
    for member in members:
        rec = start_member(st, plan, member)
        say(
            f"  etcd member {member.name} on {member.client_url} "
            f"(netns {member.netns}, pid {rec.pid})"
        )
    wait_members(st, plan, members, defaults.LAB_ETCD_READY_TIMEOUT_S)
    say(f"  etcd answering (TLS, client certificates): {len(members)} member(s)")


def agent_argv(argv: list[str], st: S.LabState, plan: P.LabPlan, node: P.NodePlan) -> list[str]:
    """The agent's command line for a multi-member lab: every member of its cluster,
    the lab's CA and client certificate, and the other clusters via the mesh dir
    (instead of `--mesh NAME=URL`). Pure."""
    out: list[str] = []
    skip = 0
    for i, arg in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if arg in ("--etcd", "--mesh") and i + 1 < len(argv):
            skip = 1
            continue
        out.append(arg)
    client = client_pair(plan)
    out += [
        "--etcd", client_urls(plan, plan.cluster(node.cluster), st.etcd_members),
        "--etcd-ca", str(ca_file(plan)),
        "--etcd-cert", str(client.cert),
        "--etcd-key", str(client.key),
    ]  # fmt: skip
    if len(plan.clusters) > 1:
        out += ["--mesh-dir", str(mesh_dir(plan))]
    return out


def exec_env(env: dict[str, str], st: S.LabState, plan: P.LabPlan, node: P.NodePlan) -> None:
    """`lab exec`: meshhealth commands and etcdctl reach the members with the lab's CA."""
    urls = client_urls(plan, plan.cluster(node.cluster), st.etcd_members)
    client = client_pair(plan)
    env["MESHHEALTH_ETCD"] = env["ETCDCTL_ENDPOINTS"] = urls
    env["MESHHEALTH_ETCD_CA"] = env["ETCDCTL_CACERT"] = str(ca_file(plan))
    env["MESHHEALTH_ETCD_CERT"] = env["ETCDCTL_CERT"] = str(client.cert)
    env["MESHHEALTH_ETCD_KEY"] = env["ETCDCTL_KEY"] = str(client.key)


# --- faults -------------------------------------------------------------------------------------


def member_for(st: S.LabState, plan: P.LabPlan, target: str | None) -> MemberPlan:
    """`2` (cluster lab1) or `lab2/2`."""
    if target is None:
        raise P.PlanError("an etcd member fault needs a member number N (or labK/N)")
    cluster_name, _, number = target.rpartition("/")
    cluster = plan.cluster(cluster_name) if cluster_name else plan.clusters[0]
    members = members_of(plan, cluster, st.etcd_members)
    if not number.isdigit() or not 1 <= int(number) <= len(members):
        raise P.PlanError(
            f"no etcd member {target!r} (members 1..{len(members)} of {cluster.name}; "
            "a lab up with --etcd-members 3 has three)"
        )
    return members[int(number) - 1]


def apply_member_fault(st: S.LabState, plan: P.LabPlan, kind: str, target: str | None) -> str:
    member = member_for(st, plan, target)
    if kind == START_MEMBER:
        return restart_member(st, plan, member)
    if st.fault(kind, member.target):
        return f"fault {kind} on {member.target} is already active"
    if kind == KILL_MEMBER:
        rec = st.processes.get(member.key)
        if rec is None or not processes.is_alive(rec):
            raise RuntimeError(f"etcd member {member.name} is not running")
        processes.signal_process(rec, signal.SIGKILL)
        processes.is_alive(rec)  # reaps it
    elif kind == PARTITION_MEMBER:
        netns_ops.set_link(member.netns, P.NODE_IFACE, up=False)
    st.faults.append(S.FaultRecord(kind=kind, target=member.target, since=time.time()))
    S.save(st)
    return f"fault {kind} on {member.name} ({member.client_url}): {MEMBER_FAULTS[kind]}"


def restart_member(st: S.LabState, plan: P.LabPlan, member: MemberPlan) -> str:
    rec = st.processes.get(member.key)
    if rec is not None and processes.is_alive(rec):
        msg = f"etcd member {member.name} is already running (pid {rec.pid})"
    else:
        rec = start_member(st, plan, member)
        wait_members(st, plan, [member], defaults.LAB_ETCD_READY_TIMEOUT_S)
        msg = f"etcd member {member.name} started on {member.client_url} (pid {rec.pid})"
    st.faults = [f for f in st.faults if not (f.kind == KILL_MEMBER and f.target == member.target)]
    S.save(st)
    return msg


def clear_member_faults(st: S.LabState, plan: P.LabPlan, clusters: set[str]) -> list[str]:
    """Undo member faults of `clusters`: links up, killed members started again."""
    lines = []
    for fault in list(st.faults):
        if fault.kind not in MEMBER_FAULTS or fault.target.split("/")[0] not in clusters:
            continue
        member = member_for(st, plan, fault.target)
        if fault.kind == PARTITION_MEMBER:
            netns_ops.set_link(member.netns, P.NODE_IFACE, up=True)
            lines.append(f"etcd member {member.name}: link up again")
        elif fault.kind == KILL_MEMBER:
            lines.append(restart_member(st, plan, member))
    st.faults = [
        f for f in st.faults if not (f.kind in MEMBER_FAULTS and f.target.split("/")[0] in clusters)
    ]
    S.save(st)
    return lines


def status_line(st: S.LabState, plan: P.LabPlan) -> str:
    parts = []
    for member in all_members(plan, st.etcd_members):
        state = "answering" if member_healthy(plan, member) else "NOT ANSWERING"
        parts.append(f"{member.name} {member.client_url} {state}")
    return "etcd (TLS): " + ", ".join(parts)
