"""`lab up` and `lab down`: build the lab step by step, recording each step in the state
file, and remove everything the state file (and the naming scheme) says exists."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from meshhealth import defaults
from meshhealth.lab import (
    etcd_auth,
    etcd_members,
    etcd_proc,
    neigh_table,
    netns_ops,
    proc_sys,
    processes,
)
from meshhealth.lab import plan as P
from meshhealth.lab import state as S

Say = Callable[[str], None]

# Test hooks: the name of a build step ("fabric", "etcd", "lab1/node2", "agents") after
# which `lab up` fails (and cleans up), or crashes without cleaning up.
FAIL_AT_ENV = "MESHHEALTH_LAB_FAIL_AT"
CRASH_AT_ENV = "MESHHEALTH_LAB_CRASH_AT"
REQUIRED_TOOLS = ("ip", "nft", "etcd", "nsenter")


class LabError(RuntimeError):
    """A lab command cannot do what was asked; the message is for the user."""


def preflight(tools: tuple[str, ...] = REQUIRED_TOOLS) -> None:
    if os.geteuid() != 0:
        raise LabError("must run as root (network namespaces need CAP_NET_ADMIN)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise LabError(
            f"missing {', '.join(missing)} on PATH (Debian: iproute2, nftables, etcd-server, "
            "util-linux; or run scripts/setup.sh)"
        )


def existing_namespaces(prefix: str) -> list[str]:
    pattern = P.netns_pattern(prefix)
    return [n for n in netns_ops.list_netns() if pattern.match(n)]


def lab_exists(prefix: str, root: Path = P.LAB_ROOT) -> bool:
    return P.lab_dir(prefix, root).exists() or bool(existing_namespaces(prefix))


def load_state(prefix: str, root: Path = P.LAB_ROOT) -> S.LabState | None:
    return S.load(P.lab_dir(prefix, root) / "state.json")


def plan_of(st: S.LabState) -> P.LabPlan:
    return P.make_plan(
        st.prefix, st.nodes, st.clusters, Path(st.dir).parent, st.ip_mode, racks=st.racks
    )


def _hook(step: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == step:
        os._exit(3)  # simulate a crash: no cleanup, no state update
    if os.environ.get(FAIL_AT_ENV) == step:
        raise LabError(f"injected failure after step {step} ({FAIL_AT_ENV})")


def agent_env() -> dict[str, str]:
    """The environment of processes started in a node: our interpreter's bin dir first on
    PATH, so `meshhealth` and its children resolve to this installation."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    # Agents read MESHHEALTH_* settings from the environment: the lab's flags alone count.
    for k in [k for k in env if k.startswith("MESHHEALTH_")]:
        del env[k]
    return env


def start_agent(st: S.LabState, plan: P.LabPlan, node: P.NodePlan) -> S.ProcessRecord:
    node.socket.parent.mkdir(parents=True, exist_ok=True)
    node.socket.unlink(missing_ok=True)
    argv = P.agent_argv(plan, node, sys.executable, st.interval_s)
    if st.etcd_members > 1:
        argv = etcd_members.agent_argv(argv, st, plan, node)
    if st.etcd_auth:
        argv += etcd_auth.agent_args(plan, node)
    rec = processes.start_detached(node.netns, argv, node.log, agent_env())
    st.processes[f"agent/{node.qualified}"] = rec
    S.save(st)
    return rec


def socket_answers(path: Path, timeout_s: float = 0.5) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def wait_agents(st: S.LabState, nodes: list[P.NodePlan], timeout_s: float, say: Say) -> None:
    """Until every agent's admin socket answers; says how many do every few seconds."""
    started = time.monotonic()
    deadline = started + timeout_s
    next_report = started + defaults.LAB_PROGRESS_EVERY_S
    waiting = list(nodes)
    while waiting:
        for node in list(waiting):
            rec = st.processes[f"agent/{node.qualified}"]
            if socket_answers(node.socket):
                waiting.remove(node)
            elif not processes.is_alive(rec):
                raise LabError(f"agent of {node.qualified} exited: {_tail(node.log)}")
        now = time.monotonic()
        if waiting and now > deadline:
            names = ", ".join(n.qualified for n in waiting[:5])
            raise LabError(
                f"{len(waiting)} agent socket(s) not answering after {timeout_s:g}s: {names}"
            )
        if waiting and now >= next_report:
            answering = len(nodes) - len(waiting)
            say(f"  agent sockets answering: {answering}/{len(nodes)} ({now - started:.0f}s)")
            next_report = now + defaults.LAB_PROGRESS_EVERY_S
        if waiting:
            time.sleep(0.1)
    say(f"  {len(nodes)} agent socket(s) answering")


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return f"no log at {path}"
    return f"{lines[-1] if lines else '(empty log)'} (log: {path})"


def up(
    prefix: str,
    *,
    nodes: int,
    clusters: int,
    interval_s: float,
    agents: bool,
    say: Say,
    root: Path = P.LAB_ROOT,
    etcd_member_count: int = 1,
    ip_mode: str = "ipv4",
    with_etcd_auth: bool = False,
    racks: int = 1,
) -> tuple[S.LabState, P.LabPlan]:
    """Build the lab. On any failure the half-built lab is removed and LabError raised."""
    plan = P.make_plan(prefix, nodes, clusters, root, ip_mode, racks=racks)
    if racks > 1 and etcd_member_count > 1:
        raise LabError("--racks runs a one-member etcd per cluster (--etcd-members 1)")
    if ip_mode == "ipv6" and etcd_member_count > 1:
        raise LabError("--ipv6 runs a one-member etcd per cluster (--etcd-members 1)")
    if with_etcd_auth and (etcd_member_count > 1 or clusters > 1):
        raise LabError(
            "--etcd-auth builds one cluster with a one-member etcd (--clusters 1 "
            "--etcd-members 1): agents read a meshed cluster's etcd without a user"
        )
    if lab_exists(prefix, root):
        raise LabError(f"lab {prefix} already exists; run `meshhealth lab down` first")
    if agents:
        taken = endpoint_names_taken(plan)
        if taken:
            raise LabError(
                f"namespace {taken[0]} exists: another lab's agents use the same health "
                "endpoint names (agents name them after cluster and node); remove that lab "
                "first, or use --no-agents"
            )
    st = S.LabState(
        prefix=prefix,
        dir=str(plan.dir),
        nodes=nodes,
        clusters=clusters,
        interval_s=interval_s,
        agents=agents,
        etcd_members=etcd_members.validate_count(etcd_member_count),
        ip_mode=ip_mode,
        etcd_auth=with_etcd_auth,
        racks=racks,
    )
    started = time.monotonic()
    try:
        _build(st, plan, say)
    except BaseException as exc:
        reason = str(exc) or type(exc).__name__
        say(f"lab up failed: {reason}; removing the half-built lab")
        down(prefix, say, root)
        if isinstance(exc, LabError | netns_ops.CommandError | RuntimeError | OSError):
            raise LabError(reason) from exc
        raise
    say(f"lab {prefix} is up in {time.monotonic() - started:.1f}s")
    return st, plan


def _size_neigh_table(st: S.LabState, nodes: int, say: Say) -> None:
    """Raise the kernel-wide ARP table limits when this lab would overflow them and they
    can be set here; otherwise say once what the limit allows."""

    def record(previous: dict[str, int]) -> None:
        st.neigh_thresholds = previous
        S.save(st)

    sizing = neigh_table.size_for_lab(nodes, before_write=record)
    if sizing.previous is None:
        if st.neigh_thresholds:  # recorded, but the write failed: nothing to restore
            st.neigh_thresholds = {}
            S.save(st)
    else:
        say(
            f"  host ARP table limits raised for {nodes} nodes: {sizing.raised_to} "
            "(restored by lab down)"
        )
    if sizing.note is not None:
        say(f"  {sizing.note}")


def _other_labs_up(prefix: str, root: Path) -> bool:
    """Another lab's state file is there: leave the raised limits to its `lab down`."""
    if not root.exists():
        return False
    return any(p.name != prefix and (p / "state.json").exists() for p in root.iterdir())


def _build(st: S.LabState, plan: P.LabPlan, say: Say) -> None:
    plan.dir.mkdir(parents=True, exist_ok=True)
    S.save(st)
    total = len(plan.nodes)
    say(f"building lab {plan.prefix}: {len(plan.clusters)} cluster(s) x {st.nodes} node(s)")
    subnet = f"{P.ROUTER_CORE_IP}/{P.CORE_PREFIXLEN}, core" if plan.racks else P.FABRIC_SUBNET
    say(f"  fabric namespace {plan.fabric_netns}, bridge {P.BRIDGE} ({subnet})")
    _size_neigh_table(st, total, say)
    if proc_sys.read_only():
        st.proc_sys_net_mounted = True  # recorded first: a crash right after still undoes it
        S.save(st)
        try:
            proc_sys.make_writable()
        except netns_ops.CommandError:
            st.proc_sys_net_mounted = False  # nothing to undo
            S.save(st)
            raise
        say("  /proc/sys is read-only here (a container): /proc/sys/net made writable")
    st.add_namespace(plan.fabric_netns)
    S.save(st)
    netns_ops.add_netns(plan.fabric_netns)
    netns_ops.make_fabric(plan.fabric_netns, plan.etcd_addresses())
    if plan.router_netns is not None:
        st.add_namespace(plan.router_netns)
        S.save(st)
        netns_ops.add_netns(plan.router_netns)
        netns_ops.make_racks(plan)
        racks = ", ".join(f"{r.bridge} ({r.subnet})" for r in plan.racks)
        say(f"  router namespace {plan.router_netns} joins {racks} and {P.BRIDGE}")
    _hook("fabric")
    if st.etcd_members > 1:
        etcd_members.build_members(st, plan, say)
    for cluster in plan.clusters if st.etcd_members == 1 else ():
        rec = etcd_proc.start_etcd(plan.fabric_netns, cluster)
        st.processes[f"etcd/{cluster.name}"] = rec
        S.save(st)
        say(f"  etcd of {cluster.name} on {cluster.etcd_url} (pid {rec.pid})")
    _hook("etcd")
    verbose = total <= 16
    for n, node in enumerate(plan.nodes, start=1):
        st.add_namespace(node.netns)
        S.save(st)
        netns_ops.add_netns(node.netns)
        netns_ops.attach_node(plan.fabric_netns, node)
        if verbose:
            secondary = (
                ""
                if node.node_ip_secondary is None
                else f" (and {node.node_ip_secondary}, {node.cidr_secondary})"
            )
            say(
                f"  node {node.qualified}: netns {node.netns}, "
                f"NodeIP {node.node_ip}, CIDR {node.cidr}{secondary}"
            )
        elif n % 10 == 0 or n == total:
            say(f"  nodes: {n}/{total}")
        _hook(node.qualified)
    for cluster in plan.clusters if st.etcd_members == 1 else ():
        etcd_proc.wait_etcd(
            plan.fabric_netns,
            cluster,
            st.processes[f"etcd/{cluster.name}"],
            defaults.LAB_ETCD_READY_TIMEOUT_S,
        )
    if st.etcd_members == 1:
        say(f"  etcd answering: {', '.join(c.etcd_url for c in plan.clusters)}")
    if st.etcd_auth:
        users = etcd_auth.enable(plan)
        say(
            f"  etcd authentication on: {users} node user(s), passwords in "
            f"{etcd_auth.password_dir(plan)}"
        )
        _hook("etcd-auth")
    if st.agents:
        for node in plan.nodes:
            start_agent(st, plan, node)
        say(
            f"  {total} agent(s) started (probe interval {st.interval_s:g}s), "
            "waiting for their sockets"
        )
        _hook("agents")
        wait_agents(
            st,
            list(plan.nodes),
            defaults.LAB_AGENT_READY_TIMEOUT_S + defaults.LAB_AGENT_READY_PER_NODE_S * total,
            say,
        )
    st.phase = "ready"
    S.save(st)


@dataclass
class DownReport:
    found: bool = False
    processes: list[int] = field(default_factory=list)
    # every lab namespace that existed and is gone: the ones `down` deleted and the
    # health endpoints' (`-ep`), which their agents remove as they stop
    namespaces: list[str] = field(default_factory=list)
    dir_removed: bool = False


def namespaces_removed(present: Sequence[str], exists: Callable[[str], bool]) -> list[str]:
    """Of the namespaces `present` at the start, those that no longer exist. Pure."""
    return [name for name in present if not exists(name)]


def endpoint_names_taken(plan: P.LabPlan) -> list[str]:
    """Endpoint namespace names the plan's agents would use that exist already."""
    present = set(netns_ops.list_netns())
    names = (n.endpoint_netns for n in plan.nodes)
    return [n for n in names if n in present]


def lab_netns_all(prefix: str, st: S.LabState | None) -> list[str]:
    """The lab's namespaces: recorded ones, ones matching its naming scheme, and the
    namespaces on the far side of their veths (the agents' health endpoints)."""
    names = list(st.namespaces) if st else []
    for n in existing_namespaces(prefix):
        if n not in names:
            names.append(n)
    fabric = f"{prefix}-fabric"
    for n in list(names):
        if n == fabric:
            continue
        for peer in sorted(netns_ops.peer_netns(n)):
            # Only namespaces our own agents made; never a host-level name.
            if peer not in names and peer.startswith("mh"):
                names.append(peer)
    if st is not None:
        # An endpoint namespace whose veth is gone is found by the agents' naming scheme,
        # unless it is wired to a namespace that is not ours (another lab's node).
        for node in plan_of(st).nodes:
            name = node.endpoint_netns
            exists = name not in names and netns_ops.netns_exists(name)
            if exists and netns_ops.peer_netns(name) <= set(names):
                names.append(name)
    return names


def down(prefix: str, say: Say, root: Path = P.LAB_ROOT) -> DownReport:
    """Remove the lab: processes (by PID + start time), namespaces, files. Idempotent."""
    report = DownReport()
    base = P.lab_dir(prefix, root)
    try:
        st = S.load(base / "state.json")
    except S.StateError as exc:
        say(f"warning: {exc}; removing by naming scheme only")
        st = None
    report.found = st is not None or base.exists() or bool(existing_namespaces(prefix))
    if not report.found:
        say(f"no lab {prefix}")
        return report
    errors: list[str] = []

    def lab_names() -> list[str]:
        try:
            return lab_netns_all(prefix, st)
        except (netns_ops.CommandError, OSError) as exc:
            errors.append(str(exc))
            return list(st.namespaces) if st else existing_namespaces(prefix)

    # Endpoint namespaces are found through the agents' veths: look before the agents
    # stop (a clean shutdown removes them, a failed one may leave half of them).
    names = lab_names()
    present = [n for n in names if netns_ops.netns_exists(n)]
    if st is not None:
        st.phase = "removing"
        S.save(st)
        # Helpers that SIGSTOP agents (`fault starve`) first, then every agent gets a
        # SIGCONT: a stopped agent would not act on SIGTERM.
        helpers = [r for k, r in st.processes.items() if k.startswith("starve/")]
        report.processes += processes.stop(helpers, grace_s=2.0)
        agents = [r for k, r in st.processes.items() if k.startswith("agent/")]
        for rec in agents:
            processes.signal_process(rec, signal.SIGCONT)
        others = [r for k, r in st.processes.items() if not k.startswith(("agent/", "starve/"))]
        # Agents first: a clean shutdown deregisters them and removes their endpoints.
        report.processes += processes.stop(agents)
        report.processes += processes.stop(others)
    found_later = [n for n in lab_names() if n not in names]
    names += found_later
    present += [n for n in found_later if netns_ops.netns_exists(n)]
    # Whatever still runs inside the lab's namespaces was started by the lab (endpoint
    # responders of a killed agent, a restarted agent): stop it by PID.
    leftover = {
        pid: t
        for n in names
        for pid in netns_ops.netns_pids(n)
        if (t := processes.start_ticks(pid))
    }
    leftover.pop(os.getpid(), None)
    report.processes += processes.stop_pids(leftover, grace_s=2.0)
    # Node and endpoint namespaces before the fabric (deleting a node ns removes its veth).
    for n in sorted(names, key=lambda n: n == f"{prefix}-fabric"):
        if netns_ops.netns_exists(n):
            try:
                netns_ops.del_netns(n)
            except netns_ops.CommandError as exc:
                errors.append(str(exc))
    report.namespaces = namespaces_removed(present, netns_ops.netns_exists)
    if errors:
        # Keep the state file: `lab down` again retries what is left.
        raise LabError(f"lab {prefix} only partly removed: {'; '.join(errors)}")
    if st is not None and st.neigh_thresholds and not _other_labs_up(prefix, root):
        try:
            neigh_table.write_thresholds(st.neigh_thresholds)
            say(f"  host ARP table limits restored: {st.neigh_thresholds}")
        except OSError as exc:  # the lab is gone; the limits stay raised, say so
            say(f"  host ARP table limits not restored to {st.neigh_thresholds}: {exc}")
    if st is not None and st.proc_sys_net_mounted and not _other_labs_up(prefix, root):
        try:
            proc_sys.undo()
            say("  /proc/sys/net read-only again")
        except netns_ops.CommandError as exc:
            say(f"  /proc/sys/net left writable: {exc}")
    for data in P.etcd_data_dirs(prefix, root):
        if data.exists():
            shutil.rmtree(data)
    with contextlib.suppress(OSError):  # the shared parent, once no lab uses it
        P.ETCD_DATA_ROOT.rmdir()
    if base.exists():
        shutil.rmtree(base)
        report.dir_removed = True
    say(
        f"lab {prefix} removed: {len(report.processes)} process(es) stopped, "
        f"{len(report.namespaces)} namespace(s) deleted, {base} removed"
    )
    return report
