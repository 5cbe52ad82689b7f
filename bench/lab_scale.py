"""Scale of the netns lab: build time, convergence, per-agent RSS/CPU, etcd writes/s.

Run as root:  .venv/bin/python bench/lab_scale.py --nodes 100 [--interval 10] [--idle 30]

Builds a lab with its own prefix (`mhbench`), measures, and always removes it. Prints:
- build_s: `lab up` wall time (until every agent socket answers)
- converge_s: from `lab up` start until every node reports N/N reachable
- agent RSS (MB) and its endpoint responder's; CPU (% of one core, agent + responder)
  over an idle window; min/median/max over the agents
- etcd raft proposals committed per second over the same window (= writes)
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
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(x) for x in text.split()]


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--idle", type=float, default=30.0, help="measurement window, s")
    ap.add_argument("--converge-timeout", type=float, default=300.0)
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
        pending = {n.qualified: n for n in plan.nodes}
        deadline = t0 + args.converge_timeout
        while pending and time.monotonic() < deadline:
            for name, node in list(pending.items()):
                try:
                    s = control.fetch_status(node.socket)["summary"]
                except (OSError, ValueError, KeyError):
                    continue
                if s["reachable"] == s["total"] == args.nodes:
                    del pending[name]
            time.sleep(0.5)
        if pending:
            print(f"converge: {len(pending)} node(s) not at N/N after {args.converge_timeout}s")
        else:
            print(f"converge_s={time.monotonic() - t0:.1f}")
        agents = [r.pid for k, r in st.processes.items() if k.startswith("agent/")]
        alive = [p for p in agents if Path(f"/proc/{p}").exists()]
        print(f"agents_alive={len(alive)}/{len(agents)}")
        agents = alive
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

        def fmt(xs: list[float]) -> str:
            return f"min={min(xs):.1f} median={statistics.median(xs):.1f} max={max(xs):.1f}"

        print(f"agent_rss_mb {fmt(rss)}")
        print(f"endpoint_responder_rss_mb {fmt(rss_children)}")
        print(f"agent_cpu_pct {fmt(cpu)} (over {elapsed:.0f}s)")
        print(f"etcd_writes_per_s={etcd_rate:.1f}")
    finally:
        subprocess.run([*cli, "down", "--prefix", PREFIX], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
