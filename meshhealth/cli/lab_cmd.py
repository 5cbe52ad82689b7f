"""`meshhealth lab up|status|exec|fault|down`: a multi-node lab from network namespaces."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from meshhealth import defaults
from meshhealth.cli.invocation import this_program
from meshhealth.lab import plan as P
from meshhealth.lab import state as S
from meshhealth.terminal_text import escape_lines
from meshhealth.timefmt import parse_iso_time

DESCRIPTION = """\
Build a multi-node meshhealth lab on this Linux host (as root) from network namespaces:
a fabric namespace with a bridge and one etcd per cluster, N node namespaces each with a
NodeIP, a CIDR and an agent whose health endpoint lives in its own namespace. Nothing is
routed to or from the host's own network. Files live in /run/meshhealth/lab/PREFIX/.

examples:
  meshhealth lab up --nodes 4                 build a 4-node lab and show node1's status
  meshhealth lab status                       namespaces, processes, faults, health per node
  meshhealth lab exec node2 -- meshhealth status
  meshhealth lab exec node1 -- etcdctl get --prefix --keys-only meshhealth/
  meshhealth lab fault endpoint-forward-drop node2
  meshhealth lab fault clear
  meshhealth lab down                         remove everything the lab made
"""

FAULT_HELP = """\
fault kinds (NODE: node2 or lab2/node1; "probes" are ICMP echo requests and HTTP to
port 4240, to NodeIP and HealthIP; etcd traffic is never dropped unless said so):
  endpoint-forward-drop NODE  nft in NODE drops forwarded traffic to its HealthIP
  icmp-drop NODE              nft in NODE drops ICMP echo arriving on its fabric link
  udp-drop NODE               nft in NODE drops UDP to port 4240 (the UDP echo) arriving
                              on its fabric link: ICMP and HTTP still pass
  egress-drop NODE            the bridge drops NODE's probes to the other nodes (its
                              answers pass): only its row fails
  ingress-drop NODE           the bridge drops the other nodes' probes to NODE (its own
                              probes and their answers pass): only its column fails
  path-drop SRC DST           the bridge drops SRC's probes to DST, one direction only
  partition GROUP...          the bridge drops all traffic between the groups (a group:
                              node1,node2; nodes not listed form one more group;
                              `partition node3` cuts node3 off); etcd stays reachable
  mtu NODE SIZE               the bridge drops IP packets longer than SIZE bytes between
                              NODE and the other nodes, sending no ICMP "fragmentation
                              needed" back (a black hole; etcd traffic passes)
  kill-agent NODE             SIGKILL the node's agent (`fault clear` restarts it)
  starve NODE                 a helper SIGSTOPs the node's agent 3 s of every 4 (runs in
                              fits like an overloaded node); `fault clear` stops it
  stop-etcd [CLUSTER|NODE]    SIGTERM the cluster's etcd (default lab1)
  start-etcd [CLUSTER|NODE]   start it again on the same data dir
  kill-etcd-member N|labK/N   (--etcd-members 3) SIGKILL member N of the cluster's etcd
  start-etcd-member N|labK/N  start it again on its data dir
  partition-etcd-member N|labK/N  take member N's link down (`fault clear` restores it)
  link-drop RACK              (lab up --racks N) the router drops everything it forwards
                              to or from RACK: a dead link behind the router
  clear [NODE|CLUSTER|RACK]   undo every fault (of NODE / CLUSTER / RACK only; a fault between
                              nodes is undone when any of its nodes is named)

examples:
  meshhealth lab fault endpoint-forward-drop node2
  meshhealth lab fault icmp-drop lab2/node1
  meshhealth lab fault path-drop node1 node3
  meshhealth lab fault partition node1,node2 node3,node4
  meshhealth lab fault mtu node2 1400
  meshhealth lab fault link-drop rack2
  meshhealth lab fault clear node2
"""


def _prefix_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prefix",
        default=os.environ.get("MESHHEALTH_LAB_PREFIX", defaults.LAB_PREFIX),
        help="name prefix of the lab's namespaces and its directory "
        f"[MESHHEALTH_LAB_PREFIX; default: {defaults.LAB_PREFIX}]",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    lab = sub.add_parser(
        "lab",
        help="multi-node lab from network namespaces",
        description=DESCRIPTION,
        formatter_class=raw,
    )
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="LAB_COMMAND", required=True)

    up = lab_sub.add_parser(
        "up",
        help="build a lab",
        formatter_class=raw,
        description="Build the lab: fabric, etcd, nodes, agents.\n\nexample:\n"
        "  meshhealth lab up --nodes 4 --clusters 2",
    )
    up.add_argument("--nodes", type=int, default=defaults.LAB_NODES, help="nodes per cluster")
    up.add_argument("--clusters", type=int, default=defaults.LAB_CLUSTERS, help="clusters (meshed)")
    up.add_argument(
        "--interval",
        type=float,
        default=None,
        help=f"agents' probe interval, s (default: {defaults.LAB_INTERVAL_S:g}, or "
        f"{defaults.LAB_INTERVAL_PER_NODE_S:g} per node of the lab when longer: 10 at 100 nodes)",
    )
    up.add_argument("--no-agents", action="store_true", help="topology and etcd only")
    up.add_argument(
        "--etcd-members",
        type=int,
        default=1,
        metavar="N",
        help="members of each cluster's etcd (odd, up to 5); more than 1: each in a "
        "namespace of its own, TLS with client certificates of a CA the lab makes",
    )
    up.add_argument(
        "--etcd-auth",
        action="store_true",
        help="etcd authentication on, and every agent with its own etcd user that may "
        "write only its node's entries (meshhealth etcd-roles; one cluster)",
    )
    up.add_argument(
        "--racks",
        type=int,
        default=1,
        metavar="R",
        help="split each cluster's nodes into R racks (a bridge and subnet each) joined by "
        "a router namespace; etcd behind the router (IPv4, one etcd member; docs/lab.md)",
    )
    family = up.add_mutually_exclusive_group()
    family.add_argument(
        "--dual-stack",
        action="store_const",
        const="dual",
        dest="ip_mode",
        help="IPv4 and IPv6 on the fabric, the nodes, their endpoints and routes (IPv6 "
        "secondary addresses, ULA fd77::/64 and fd78:K:I::/64)",
    )
    family.add_argument(
        "--ipv6",
        action="store_const",
        const="ipv6",
        dest="ip_mode",
        help="IPv6 only: nodes, endpoints, routes and etcd",
    )
    up.set_defaults(ip_mode="ipv4")
    _prefix_arg(up)
    up.set_defaults(func=run_up)

    status = lab_sub.add_parser(
        "status",
        help="what exists, and each node's health",
        formatter_class=raw,
        description="Show the lab's namespaces, processes, faults and per-node health.\n\n"
        "example:\n  meshhealth lab status",
    )
    _prefix_arg(status)
    status.set_defaults(func=run_status)

    ex = lab_sub.add_parser(
        "exec",
        help="run a command inside a node",
        formatter_class=raw,
        description="Run CMD in NODE's namespace with MESHHEALTH_SOCKET, MESHHEALTH_ETCD and "
        "ETCDCTL_ENDPOINTS set for that node; the exit code passes through.\n\nexamples:\n"
        "  meshhealth lab exec node2 -- meshhealth status\n"
        "  meshhealth lab exec lab2/node1 -- ping -c1 10.77.0.1",
    )
    _prefix_arg(ex)
    ex.add_argument("node", metavar="NODE", help="node2 (cluster lab1) or lab2/node2")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD...")
    ex.set_defaults(func=run_exec)

    fault = lab_sub.add_parser(
        "fault", help="inject or clear a fault", formatter_class=raw, description=FAULT_HELP
    )
    _prefix_arg(fault)
    fault.add_argument("kind", metavar="KIND", help="a fault kind or `clear`")
    fault.add_argument(
        "args",
        metavar="ARG",
        nargs="*",
        help="what the kind takes: NODE (node2, lab2/node1), CLUSTER (lab1), SRC DST, "
        "NODE SIZE or GROUP...",
    )
    fault.set_defaults(func=run_fault)

    down = lab_sub.add_parser(
        "down",
        help="remove the lab",
        formatter_class=raw,
        description="Remove every namespace, process and file of the lab (also a half-built "
        "one). Running it again is fine.\n\nexample:\n  meshhealth lab down",
    )
    _prefix_arg(down)
    down.set_defaults(func=run_down)


def _err(msg: str) -> int:
    print(f"meshhealth lab: {msg}", file=sys.stderr)
    return 1


def _say(line: str) -> None:
    print(line, flush=True)


def _errors() -> tuple[type[BaseException], ...]:
    from meshhealth.lab.build import LabError
    from meshhealth.lab.netns_ops import CommandError
    from meshhealth.lab.plan import PlanError
    from meshhealth.lab.state import StateError

    return (LabError, PlanError, StateError, CommandError, OSError)


def run_up(args: argparse.Namespace) -> int:
    from meshhealth.lab import build

    try:
        P.make_plan(args.prefix, args.nodes, args.clusters, ip_mode=args.ip_mode, racks=args.racks)
        if args.interval is None:
            args.interval = P.lab_interval(args.nodes * args.clusters)
        if not args.interval > defaults.PROBE_TIMEOUT_S:
            raise P.PlanError(
                f"--interval must be longer than the probe timeout "
                f"({defaults.PROBE_TIMEOUT_S:g}s), got {args.interval:g}"
            )
        build.preflight()
        st, plan = build.up(
            args.prefix,
            nodes=args.nodes,
            clusters=args.clusters,
            interval_s=args.interval,
            agents=not args.no_agents,
            say=_say,
            etcd_member_count=args.etcd_members,
            ip_mode=args.ip_mode,
            with_etcd_auth=args.etcd_auth,
            racks=args.racks,
        )
    except _errors() as exc:
        return _err(str(exc))
    first = plan.nodes[0]
    pre = "" if args.prefix == defaults.LAB_PREFIX else f" --prefix {args.prefix}"
    # Commands printed for the user's shell: the program as it can be run there (inside
    # `lab exec`, `meshhealth` is on PATH: exec_env puts it first).
    me = this_program()
    if st.agents:
        n = len(plan.nodes)
        print(f"  waiting until {first.qualified} sees {n}/{n} reachable", flush=True)
        wait_s = 3 * args.interval + 10 + defaults.LAB_CONVERGE_PER_NODE_S * n
        _wait_converged(first.socket, n, args.interval, wait_s)
        print(f"\n$ {me} lab exec{pre} {first.qualified} -- meshhealth status", flush=True)
        _exec(plan, first, ["meshhealth", "status"], st)
    print("\n" + next_steps(me, pre))
    return 0


def next_steps(me: str, pre: str) -> str:
    """The closing "next:" lines of `lab up`: commands that run as shown. Pure."""
    return f"""\
next:
  {me} lab status{pre}
  {me} lab exec{pre} node2 -- meshhealth status
  {me} lab exec{pre} node1 -- etcdctl get --prefix --keys-only meshhealth/
  {me} lab exec{pre} node1 -- meshhealth watch
  {me} lab fault{pre} endpoint-forward-drop node2     (then: {me} lab fault{pre} clear)
  {me} lab down{pre}"""


def convergence(doc: Mapping[str, Any]) -> tuple[int, int, str]:
    """(reachable, total, text) of a status document: the cluster verdicts every
    observer contributes to (`cluster_health` from the aggregators' summaries) when the
    agent has them, else its own direct targets (`summary`)."""
    verdicts = [v for v in doc.get("cluster_health") or () if v.get("source") == "summary"]
    if verdicts:
        reachable = sum(int(v["reachable"]) for v in verdicts)
        total = sum(int(v["total"]) for v in verdicts)
        parts = [f"{v['cluster']} {v['reachable']}/{v['total']}" for v in verdicts]
        return reachable, total, f"cluster verdict {', '.join(parts)} reachable"
    summary = doc["summary"]
    reachable, total = int(summary["reachable"]), int(summary["total"])
    return reachable, total, f"own targets {reachable}/{total} reachable (no cluster verdict yet)"


def _wait_converged(sock: Path, total: int, interval_s: float, timeout_s: float) -> None:
    """Until node1 reads every node of the lab reachable, or `timeout_s` passes (then the
    status shown tells what is still missing). Says how far it got every few seconds."""
    from meshhealth.lab.control import fetch_status

    started = time.monotonic()
    deadline = started + timeout_s
    next_report = started + defaults.LAB_PROGRESS_EVERY_S
    seen = "no answer yet"
    while time.monotonic() < deadline:
        try:
            reachable, of, seen = convergence(fetch_status(sock))
            if of >= total and reachable >= total:
                print(f"  converged: {seen} ({time.monotonic() - started:.0f}s)", flush=True)
                return
        except (OSError, ValueError, KeyError, TypeError):
            pass
        now = time.monotonic()
        if now >= next_report:
            print(f"  {seen} ({now - started:.0f}s)", flush=True)
            next_report = now + defaults.LAB_PROGRESS_EVERY_S
        time.sleep(min(0.25, interval_s / 4))
    print(f"  not converged after {timeout_s:.0f}s: {seen}", flush=True)


def _load(prefix: str) -> tuple[Any, P.LabPlan]:
    from meshhealth.lab import build

    st = build.load_state(prefix)
    if st is None:
        raise build.LabError(f"no lab {prefix} (start one with `meshhealth lab up`)")
    return st, build.plan_of(st)


def run_status(args: argparse.Namespace) -> int:
    from meshhealth.lab import control, netns_ops

    try:
        st, plan = _load(args.prefix)
        verdicts = cluster_health_lines(plan) if st.agents else []
        lines = control.status_lines(st, plan, set(netns_ops.list_netns()), verdicts)
    except _errors() as exc:
        return _err(str(exc))
    print(escape_lines("\n".join(lines)))  # verdicts and names come from the agents
    return 0


def cluster_health_lines(plan: P.LabPlan) -> list[str]:
    """Each cluster's verdict, as `meshhealth status` prints it, from its first node's
    agent (the same on every node: its aggregator's summary)."""
    from meshhealth.cli.format_status import maintenance_lines, verdict_line
    from meshhealth.documents.status_schema import StatusDocument
    from meshhealth.lab.control import fetch_status

    lines = []
    for cluster in plan.clusters:
        node = next(n for n in plan.nodes if n.cluster == cluster.name)
        try:
            doc = fetch_status(node.socket)
        except (OSError, ValueError) as exc:
            lines.append(f"Cluster health {cluster.name}:   no answer on {node.socket}: {exc}")
            continue
        now = parse_iso_time(doc["generated_at"]) if doc.get("generated_at") else None
        for verdict in doc.get("cluster_health") or ():
            if verdict.get("cluster") == cluster.name and verdict.get("source") == "summary":
                local = len(plan.clusters) == 1
                status = cast("StatusDocument", doc)
                lines.append(verdict_line(verdict, status, local=local, now=now))
                lines += maintenance_lines(verdict)
                break
        else:
            lines.append(f"Cluster health {cluster.name}:   no cluster summary yet")
    return lines


def _exec(plan: P.LabPlan, node: P.NodePlan, cmd: list[str], st: S.LabState | None = None) -> int:
    from meshhealth.lab.control import exec_env

    env = exec_env(plan, node, dict(os.environ), st)
    try:
        done = subprocess.run(["ip", "netns", "exec", node.netns, *cmd], env=env, check=False)
    except KeyboardInterrupt:
        return 130
    code = done.returncode
    return 128 - code if code < 0 else code


def run_exec(args: argparse.Namespace) -> int:
    from meshhealth.lab import build

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        return _err("lab exec needs a command: meshhealth lab exec NODE -- CMD...")
    try:
        build.preflight(("ip",))
        st, plan = _load(args.prefix)
        node = plan.node(args.node)
    except _errors() as exc:
        return _err(str(exc))
    return _exec(plan, node, cmd, st)


def run_fault(args: argparse.Namespace) -> int:
    from meshhealth.lab import build, control

    fault_errors: tuple[type[BaseException], ...] = (*_errors(), RuntimeError)
    try:
        build.preflight(("ip", "nft"))
        st, plan = _load(args.prefix)
        if args.kind == "clear":
            if len(args.args) > 1:
                return _err("fault clear takes one NODE, CLUSTER or RACK at most")
            lines = control.clear_faults(st, plan, args.args[0] if args.args else None)
        else:
            lines = [control.apply_fault(st, plan, args.kind, list(args.args))]
    except fault_errors as exc:
        return _err(str(exc))
    print("\n".join(lines))
    return 0


def run_down(args: argparse.Namespace) -> int:
    from meshhealth.lab import build

    try:
        P.validate_prefix(args.prefix)
        build.preflight(("ip",))
        build.down(args.prefix, _say)
    except _errors() as exc:
        return _err(str(exc))
    return 0
