"""Working with a lab that is up: faults, `lab exec` environment, agents' status."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from meshhealth import defaults
from meshhealth.lab import etcd_members, etcd_proc, faults, processes
from meshhealth.lab import fabric_faults as F
from meshhealth.lab import fault_targets as T
from meshhealth.lab import plan as P
from meshhealth.lab import state as S
from meshhealth.lab.build import LabError, start_agent
from meshhealth.timefmt import iso_time

STATUS_PATH = "/v1/status"
STARVE_KEY = "starve/"  # + lab1/node2: the helper of `fault starve` in st.processes


def exec_env(
    plan: P.LabPlan, node: P.NodePlan, base: dict[str, str], st: S.LabState | None = None
) -> dict[str, str]:
    """Environment for a command run in `node`: its socket, its cluster's etcd, and this
    installation's `meshhealth` first on PATH. Pure."""
    cluster = plan.cluster(node.cluster)
    env = dict(base)
    env["MESHHEALTH_SOCKET"] = str(node.socket)
    env["MESHHEALTH_ETCD"] = cluster.etcd_url
    env["ETCDCTL_ENDPOINTS"] = cluster.etcd_url
    env["ETCDCTL_API"] = "3"
    env["MESHHEALTH_LAB_NODE"] = node.qualified
    if st is not None and st.etcd_members > 1:
        etcd_members.exec_env(env, st, plan, node)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bindir}:{base.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    return env


def resolve_target(plan: P.LabPlan, kind: str, target: str | None) -> str:
    """The fault's target as recorded: `lab1/node2` for node faults, `lab1` for etcd."""
    return T.parse_target(plan, kind, [] if target is None else [target]).target


def apply_fault(st: S.LabState, plan: P.LabPlan, kind: str, args: list[str]) -> str:
    """Inject a fault; returns a line for the user. Recorded in the state file before it
    is applied, so `lab down` and `fault clear` undo it even after a crash."""
    if kind in etcd_members.MEMBER_FAULTS:
        if len(args) > 1:
            raise LabError(f"fault {kind} takes one member")
        return etcd_members.apply_member_fault(st, plan, kind, args[0] if args else None)
    if kind not in faults.FAULT_KINDS:
        raise LabError(f"unknown fault {kind!r} (have {', '.join(faults.FAULT_KINDS)})")
    goal = T.parse_target(plan, kind, args)
    where = goal.target
    if kind == faults.START_ETCD:
        return _start_etcd(st, plan, where)
    if st.fault(kind, where):
        return f"fault {kind} on {where} is already active"
    if kind == faults.LINK_DROP:
        assert plan.router_netns is not None  # (a rack was found)
        st.faults.append(S.FaultRecord(kind=kind, target=where, since=time.time()))
        S.save(st)
        faults.apply_fabric(plan.router_netns, F.link_drop_script(plan.rack(where)))
        return f"fault {kind} on {where}: {faults.FAULT_KINDS[kind].shows}"
    if kind in faults.NFT_KINDS:
        faults.apply_nft(kind, plan.node(where))
    elif kind in faults.FABRIC_KINDS:
        st.faults.append(S.FaultRecord(kind=kind, target=where, since=time.time()))
        S.save(st)
        script = F.fabric_script(kind, where, plan, goal.groups, goal.size)
        faults.apply_fabric(plan.fabric_netns, script)
        return f"fault {kind} on {where}: {faults.FAULT_KINDS[kind].shows}"
    elif kind == faults.KILL_AGENT:
        rec = st.processes.get(f"agent/{where}")
        if rec is None or not processes.signal_process(rec, signal.SIGKILL):
            raise LabError(f"no running agent on {where}")
    elif kind == faults.STARVE:
        _start_starve(st, plan, where)
    elif kind == faults.STOP_ETCD:
        rec = st.processes.get(f"etcd/{where}")
        if rec is None or not processes.is_alive(rec):
            raise LabError(f"etcd of {where} is not running")
        processes.stop([rec])
    st.faults.append(S.FaultRecord(kind=kind, target=where, since=time.time()))
    S.save(st)
    return f"fault {kind} on {where}: {faults.FAULT_KINDS[kind].shows}"


def _start_starve(st: S.LabState, plan: P.LabPlan, where: str) -> None:
    agent = st.processes.get(f"agent/{where}")
    if agent is None or not processes.is_alive(agent):
        raise LabError(f"no running agent on {where}")
    argv = [
        sys.executable, "-m", "meshhealth.lab.starve", str(agent.pid), str(agent.start_ticks),
        f"{defaults.LAB_STARVE_STOP_S:g}", f"{defaults.LAB_STARVE_PERIOD_S:g}",
    ]  # fmt: skip
    node = plan.node(where)
    log = node.log.with_name(f"{node.name}.starve.log")
    st.processes[f"{STARVE_KEY}{where}"] = processes.start_detached(plan.fabric_netns, argv, log)
    S.save(st)


def stop_starving(st: S.LabState, node_names: set[str] | None = None) -> list[str]:
    """Stop the starve helpers (of `node_names`, or all) and make sure their agents run
    (SIGCONT, by the agent's recorded PID). Also used by `lab down`."""
    lines = []
    for key in [k for k in st.processes if k.startswith(STARVE_KEY)]:
        node = key.removeprefix(STARVE_KEY)
        if node_names is not None and node not in node_names:
            continue
        processes.stop([st.processes.pop(key)], grace_s=2.0)
        agent = st.processes.get(f"agent/{node}")
        if agent is not None:
            processes.signal_process(agent, signal.SIGCONT)
        lines.append(f"agent of {node} runs freely again")
    S.save(st)
    return lines


def _start_etcd(st: S.LabState, plan: P.LabPlan, cluster_name: str) -> str:
    cluster = plan.cluster(cluster_name)
    key = f"etcd/{cluster_name}"
    rec = st.processes.get(key)
    if rec is not None and processes.is_alive(rec):
        msg = f"etcd of {cluster_name} is already running (pid {rec.pid})"
    else:
        rec = etcd_proc.start_etcd(plan.fabric_netns, cluster)
        st.processes[key] = rec
        S.save(st)
        etcd_proc.wait_etcd(plan.fabric_netns, cluster, rec, defaults.LAB_ETCD_READY_TIMEOUT_S)
        msg = f"etcd of {cluster_name} started on {cluster.etcd_url} (pid {rec.pid})"
    st.faults = [
        f for f in st.faults if not (f.kind == faults.STOP_ETCD and f.target == cluster_name)
    ]
    S.save(st)
    return msg


def _clear_link_drops(st: S.LabState, plan: P.LabPlan, rack: str | None) -> list[str]:
    """Delete the link-drop tables (of `rack`, or all, and any a crash left unrecorded)
    in the router namespace."""
    router = plan.router_netns
    if router is None:
        return []
    lines = []
    for fault in [f for f in st.faults if f.kind == faults.LINK_DROP]:
        if rack is None or fault.target == rack:
            if faults.clear_router(router, F.table_name(fault.kind, fault.target)):
                lines.append(f"cleared {fault.kind} on {fault.target}")
            st.faults.remove(fault)
    if rack is None:
        for table in faults.router_tables(router):
            if faults.clear_router(router, table):
                lines.append(f"cleared router table {table}")
    S.save(st)
    if rack is not None and not lines:
        lines.append("no faults to clear")
    return lines


def clear_faults(st: S.LabState, plan: P.LabPlan, target: str | None) -> list[str]:
    """Undo recorded faults (all, or those of one node / cluster / rack) and delete the
    lab's nft table in the matching node namespaces."""
    lines: list[str] = []
    if target is not None and target.startswith("rack"):
        return _clear_link_drops(st, plan, plan.rack(target).name)
    if target is None:
        nodes = list(plan.nodes)
        clusters = {c.name for c in plan.clusters}
    elif "/" not in target and target.startswith("lab"):
        clusters = {plan.cluster(target).name}
        nodes = [n for n in plan.nodes if n.cluster in clusters]
    else:
        node = plan.node(target)
        nodes, clusters = [node], set()
    for node in nodes:
        if faults.clear_nft(node.netns):
            lines.append(f"cleared nft rules on {node.qualified}")
    node_names = {n.qualified for n in nodes}

    def involved(fault: S.FaultRecord) -> bool:
        return bool(T.nodes_of(fault.target) & node_names)

    lines += stop_starving(st, node_names)
    for fault in st.faults:
        table = F.table_name(fault.kind, fault.target)
        fabric = fault.kind in faults.FABRIC_KINDS and involved(fault)
        if fabric and faults.clear_fabric(plan.fabric_netns, table):
            lines.append(f"cleared {fault.kind} on {fault.target}")
    if target is None:  # and what a crash left behind unrecorded
        for table in faults.fabric_tables(plan.fabric_netns):
            if faults.clear_fabric(plan.fabric_netns, table):
                lines.append(f"cleared fabric table {table}")
    lines += etcd_members.clear_member_faults(st, plan, clusters)
    if target is None:
        lines += _clear_link_drops(st, plan, None)
    for fault in list(st.faults):
        if fault.kind == faults.STOP_ETCD and fault.target in clusters:
            lines.append(_start_etcd(st, plan, fault.target))
        elif fault.kind == faults.KILL_AGENT and fault.target in node_names:
            old = st.processes.get(f"agent/{fault.target}")
            if old is not None:
                processes.stop([old], grace_s=1.0)
            rec = start_agent(st, plan, plan.node(fault.target))
            lines.append(f"restarted agent of {fault.target} (pid {rec.pid})")
    st.faults = [
        f
        for f in st.faults
        if not involved(f) and not (f.kind == faults.STOP_ETCD and f.target in clusters)
    ]
    S.save(st)
    if not lines:
        lines.append("no faults to clear")
    return lines


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path = str(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def fetch_status(sock_path: Path, timeout_s: float = 3.0) -> dict[str, Any]:
    """The agent's status document (GET /v1/status on its admin socket)."""
    conn = _UnixHTTPConnection(sock_path, timeout_s)
    try:
        conn.request("GET", STATUS_PATH)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status} from {sock_path}")
        doc: dict[str, Any] = json.loads(body)
        return doc
    finally:
        conn.close()


def _path_bad(addr: dict[str, Any] | None) -> list[str]:
    if not addr:
        return []
    p = addr["primary_address"]
    return [proto for proto in ("icmp", "http") if p[proto]["status"] not in ("ok", "unknown")]


def health_line(doc: dict[str, Any]) -> str:
    """One line per node for `lab status`: its own probes, `4/4 reachable` plus what
    fails (the cluster's verdict is the `Cluster health:` line above them). Pure."""
    s = doc["summary"]
    text = f"{s['reachable']}/{s['total']} reachable"
    plan = doc.get("probe_plan")
    if plan and plan.get("subset"):  # the node's direct targets, not the cluster
        text = (
            f"{s['reachable']}/{s['total']} direct targets reachable "
            f"(probing {plan['targets']} of {plan['nodes']} nodes)"
        )
    if s.get("unknown"):
        text += f", {s['unknown']} not probed yet"
    bad: list[str] = []
    for node in doc["nodes"]:
        parts = [f"host {p}" for p in _path_bad(node.get("host"))]
        parts += [f"endpoint {p}" for p in _path_bad(node.get("health_endpoint"))]
        if parts:
            bad.append(f"{node['cluster']}/{node['name']} ({', '.join(parts)})")
    if bad:
        text += "; failing: " + "; ".join(bad)
    if not doc["etcd"]["up"]:
        text += "; etcd unreachable"
    return text


def process_lines(st: S.LabState) -> list[str]:
    lines = []
    for key, rec in sorted(st.processes.items()):
        alive = "running" if processes.is_alive(rec) else "NOT RUNNING"
        lines.append(f"  {key:<20} pid {rec.pid:<8} {alive:<12} log {rec.log}")
    return lines


def status_lines(
    st: S.LabState,
    plan: P.LabPlan,
    present_netns: set[str],
    verdict_lines: Sequence[str] = (),
) -> list[str]:
    """What `lab status` prints; `verdict_lines`: each cluster's `Cluster health:` line
    (the caller formats them as `meshhealth status` does), before each node's own."""
    ns_ok = sum(1 for n in plan.netns_names if n in present_netns)
    lines = [
        f"lab {st.prefix}: {st.phase}, {len(plan.clusters)} cluster(s) x {st.nodes} node(s), "
        f"agents {'on' if st.agents else 'off'}, dir {st.dir}",
        f"namespaces: {ns_ok}/{len(plan.netns_names)} present "
        f"({plan.fabric_netns}, {plan.nodes[0].netns} ...)",
        etcd_members.status_line(st, plan)
        if st.etcd_members > 1
        else "etcd: "
        + ", ".join(
            f"{c.name} {c.etcd_url} "
            + ("answering" if etcd_proc.etcd_healthy(plan.fabric_netns, c) else "NOT ANSWERING")
            for c in plan.clusters
        ),
        "processes:",
        *process_lines(st),
    ]
    if st.faults:
        lines.append("faults:")
        lines += [f"  {f.kind} on {f.target} (since {iso_time(f.since)})" for f in st.faults]
    else:
        lines.append("faults: none")
    if st.agents:
        lines += verdict_lines
        lines.append("direct targets (each node's own probes):")
        for node in plan.nodes:
            try:
                line = health_line(fetch_status(node.socket))
            except (OSError, ValueError, KeyError) as exc:
                line = f"no answer on {node.socket}: {exc}"
            lines.append(f"  {node.qualified:<12} {line}")
        lines.append("web pages (reachable inside the lab, see docs/ui.md):")
        lines += [f"  {node.qualified:<12} {node.web_url}" for node in plan.nodes]
    return lines
