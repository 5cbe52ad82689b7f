"""Scale of the netns lab: build time, convergence, per-node RSS/CPU, etcd writes/s,
stability, and how fast a killed agent shows.

Run as root:
    .venv/bin/python bench/lab_scale.py --nodes 100 [--interval 10] [--idle 30]
        [--settle 60] [--stable 600] [--kill-agent node37]

Builds a lab with its own prefix (`mhbench`) and the agents' defaults (probe plan K=5),
measures, and always removes it. Prints:
- build_s: `lab up` wall time (until node1 converged or gave up)
- converge_s: from `lab up` start until every node reads N/N reachable (its cluster
  verdict, from the aggregator's summary; the same rule as `lab up`)
- agent RSS (MB), its endpoint responder's, and the node's total; CPU (% of one core,
  agent + responder) over an idle window `--settle` seconds after convergence (the
  steady state, not the last joins' routes and plans); min/median/max over the nodes
- etcd raft proposals committed per second over the same window (= writes)
- stable: over `--stable` seconds, every node's verdict polled every interval: the
  polls that read fewer than N reachable, and the paths reported unreachable
- kill_agent: SIGKILL of one node's agent (`lab fault kill-agent`), then the time until
  node1's cluster verdict counts a node not reachable
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from meshhealth.cli.lab_cmd import convergence
from meshhealth.lab import control, netns_ops
from meshhealth.lab import plan as P
from meshhealth.lab import state as S

PREFIX = "mhbench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pid: int) -> float:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except FileNotFoundError:
        return 0.0
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    """Child processes of every thread of `pid`: in netns mode the agent starts its
    responder from a thread that entered the endpoint's namespace, and when that thread
    ends the child belongs to another thread of the agent, not always the main one."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return found


def etcd_proposals(plan: P.LabPlan) -> float:
    cluster = plan.clusters[0]

    def get() -> str:
        import http.client

        conn = http.client.HTTPConnection(cluster.etcd_ip, P.ETCD_CLIENT_PORT, timeout=5)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    text = netns_ops.call_in_netns(plan.fabric_netns, get)
    m = re.search(r"^etcd_server_proposals_committed_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def verdict(node: P.NodePlan) -> tuple[int, int, int] | None:
    """(reachable, total, own paths unreachable) as `node` reads them; None: no answer."""
    try:
        doc = control.fetch_status(node.socket)
        reachable, total, _ = convergence(doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    bad = sum(1 for n in doc["nodes"] if n.get("state") == "unreachable")
    return reachable, total, bad


def wait_converged(plan: P.LabPlan, n: int, deadline: float) -> list[str]:
    pending = {node.qualified: node for node in plan.nodes}
    while pending and time.monotonic() < deadline:
        for name, node in list(pending.items()):
            seen = verdict(node)
            if seen is not None and seen[0] == seen[1] == n:
                del pending[name]
        time.sleep(0.5)
    return sorted(pending)


def stability(plan: P.LabPlan, n: int, seconds: float, every_s: float) -> None:
    polls = short = unanswered = unreachable_paths = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        for node in plan.nodes:
            seen = verdict(node)
            polls += 1
            if seen is None:
                unanswered += 1
                continue
            short += seen[0] < n
            unreachable_paths += seen[2]
        time.sleep(max(0.0, every_s - (time.monotonic() - started)))
    print(
        f"stable_s={seconds:.0f} polls={polls} below_N={short} unanswered={unanswered} "
        f"unreachable_node_reports={unreachable_paths}"
    )


def kill_agent(cli: list[str], plan: P.LabPlan, victim: str, n: int, timeout_s: float) -> None:
    first = plan.nodes[0]
    subprocess.run([*cli, "fault", "--prefix", PREFIX, "kill-agent", victim], check=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        seen = verdict(first)
        if seen is not None and seen[0] < seen[1]:
            print(f"kill_agent {victim}: node1 reads {seen[0]}/{seen[1]} after "
                  f"{time.monotonic() - t0:.1f}s")  # fmt: skip
            return
        time.sleep(0.2)
    print(f"kill_agent {victim}: node1 still reads N/N after {timeout_s:.0f}s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--idle", type=float, default=30.0, help="measurement window, s")
    ap.add_argument(
        "--settle", type=float, default=60.0, help="wait after convergence before measuring, s"
    )
    ap.add_argument("--converge-timeout", type=float, default=300.0)
    ap.add_argument("--stable", type=float, default=0.0, help="stability window, s")
    ap.add_argument("--kill-agent", metavar="NODE", help="e.g. node37")
    args = ap.parse_args()
    cli = [sys.executable, "-m", "meshhealth", "lab"]
    t0 = time.monotonic()
    up = subprocess.run(
        [*cli, "up", "--prefix", PREFIX, "--nodes", str(args.nodes), "--interval",
         f"{args.interval:g}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    build_s = time.monotonic() - t0
    try:
        if up.returncode != 0:
            print(up.stdout, up.stderr, file=sys.stderr)
            return 1
        print(f"nodes={args.nodes} interval_s={args.interval:g}")
        print(f"build_s={build_s:.1f}")
        st = S.load(P.lab_dir(PREFIX) / "state.json")
        assert st is not None
        plan = P.make_plan(PREFIX, args.nodes)
        pending = wait_converged(plan, args.nodes, t0 + args.converge_timeout)
        if pending:
            print(f"converge: {len(pending)} node(s) not at N/N after {args.converge_timeout}s")
        else:
            print(f"converge_s={time.monotonic() - t0:.1f}")
        agents = [r.pid for k, r in st.processes.items() if k.startswith("agent/")]
        alive = [p for p in agents if Path(f"/proc/{p}").exists()]
        print(f"agents_alive={len(alive)}/{len(agents)}")
        agents = alive
        time.sleep(args.settle)
        groups = {pid: [pid, *children(pid)] for pid in agents}
        before = {pid: sum(cpu_ticks(p) for p in g) for pid, g in groups.items()}
        etcd0, w0 = etcd_proposals(plan), time.monotonic()
        time.sleep(args.idle)
        elapsed = time.monotonic() - w0
        etcd_rate = (etcd_proposals(plan) - etcd0) / elapsed
        cpu = [
            100 * (sum(cpu_ticks(p) for p in g) - before[pid]) / CLK_TCK / elapsed
            for pid, g in groups.items()
        ]
        rss = [rss_mb(pid) for pid in groups]
        rss_children = [sum(rss_mb(p) for p in g[1:]) for g in groups.values()]
        rss_node = [a + b for a, b in zip(rss, rss_children, strict=True)]

        def fmt(xs: list[float]) -> str:
            return f"min={min(xs):.1f} median={statistics.median(xs):.1f} max={max(xs):.1f}"

        print(f"agent_rss_mb {fmt(rss)}")
        print(f"endpoint_responder_rss_mb {fmt(rss_children)}")
        print(f"node_rss_mb {fmt(rss_node)} (agent + endpoint responder)")
        print(f"node_cpu_pct {fmt(cpu)} (agent + endpoint responder, over {elapsed:.0f}s)")
        print(f"etcd_writes_per_s={etcd_rate:.2f}")
        if args.stable > 0:
            stability(plan, args.nodes, args.stable, args.interval)
        if args.kill_agent:
            kill_agent(cli, plan, args.kill_agent, args.nodes, 120.0)
    finally:
        subprocess.run([*cli, "down", "--prefix", PREFIX], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
