"""A chaos soak that scores itself: a netns lab under overlapping faults, restarts and
etcd member trouble, with the mesh's truth checked all along.

Run as root:
    .venv/bin/python bench/chaos_soak.py --nodes 16 --etcd-members 3 --minutes 60 --seed 1

Brings up a lab (`meshhealth lab up`'s own code, prefix `mhsk`, one cluster), waits until
every node's verdict reads N/N, then runs a seeded schedule of faults
(meshhealth/lab/chaos_schedule.py: every lab fault kind, agent kills and quick restarts,
etcd member kills and partitions, CPU starve; at most two at a time, never two on one
node) and checks, every tick, what every agent's `status` says against what was
injected (meshhealth/lab/chaos_score.py):

  headline     the cluster verdict names exactly the nodes it should (within bounds)
  named        each fault is named by its finding (kind and culprit) within a bound
  cleared      no finding names a node whose fault was cleared longer than a bound ago
  registered   every node whose agent runs is registered in etcd
  timeline     at the end, from the findings timeline (`meshhealth events`, printed
               too): each fault that had to be named has its event, opened within the
               named bound and closed within the cleared bound
  tracebacks   no "Traceback" in any agent's log
  agent-rss    no agent's RSS grows more than a bound over the run
  etcd-writes  the agents' etcd writes (meshhealth_kvstore_writes_total) over every
               minute stay within the budget (writes/s per node)

Prints the schedule, then a score table (invariant, checks, violations, worst) and
exits 1 when an invariant broke (2 when the lab did not come up). The lab is removed at
the end, also on failure and Ctrl-C.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from meshhealth.cli.format_events import format_events_text
from meshhealth.cli.lab_cmd import convergence
from meshhealth.documents.events import EventsJSON
from meshhealth.lab import build, control, etcd_members
from meshhealth.lab import plan as P
from meshhealth.lab import state as S
from meshhealth.lab.chaos_schedule import ScheduledFault, concurrency, make_schedule
from meshhealth.lab.chaos_score import (
    RSS,
    TIMELINE,
    TRACEBACKS,
    WRITES,
    Bounds,
    Event,
    Finding,
    Judge,
    View,
    traceback_exceptions,
)
from meshhealth.netns import call_in_netns
from meshhealth.timefmt import iso_time, parse_when

PREFIX = "mhsk"
CLUSTER = "lab1"
NODES_KEY = f"meshhealth/state/nodes/v1/{CLUSTER}/"
TICK_S = 2.0
SLOW_EVERY_S = 10.0  # registrations, logs, RSS
WRITES_WINDOW_S = 60.0
# Bounds: a fault shows and is named within BOUND_BASE_S + BOUND_INTERVALS probe
# intervals (30 s at the lab's 2 s); its traces go within CLEAR_EXTRA_S more (a restarted
# agent registers again only once its old entry's lease, 15 s, has expired).
BOUND_BASE_S = 20.0
BOUND_INTERVALS = 5.0
CLEAR_EXTRA_S = 10.0
# etcd writes per node and second over a minute, every agent's together. Quiet, a node
# writes once a minute (0.017/s); under this soak's faults, on a loaded 2-core host, the
# minute's rate reached 0.55/s a node (docs/performance.md, "Chaos soak"): every path
# status and suspicion change is a write. The budget catches a write loop, not churn.
WRITES_BUDGET_PER_NODE = 1.0
RSS_WARM_S = 30.0  # an agent's RSS baseline: its first sample this long after it appeared
_WRITES_RE = re.compile(r"^meshhealth_kvstore_writes_total\{[^}]*\} (\S+)$", re.M)
_REFUSED_RE = re.compile(
    r'^meshhealth_responder_connections_refused_total\{reason="([^"]*)"\} (\S+)$', re.M
)


class Interrupted(Exception):
    pass


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signum}")


def say(line: str) -> None:
    print(line, flush=True)


@dataclass
class Probe:
    """The soak's side state: what it read last from each agent."""

    log_offsets: dict[str, int] = field(default_factory=dict)
    rss_base: dict[int, float] = field(default_factory=dict)  # pid -> baseline MB
    rss_seen: dict[int, list[tuple[float, float, str]]] = field(
        default_factory=dict
    )  # (t, MB, node)
    pid_seen: dict[int, float] = field(default_factory=dict)  # pid -> first seen (t)
    writes_last: dict[str, float] = field(default_factory=dict)
    writes_window: list[tuple[float, float]] = field(default_factory=list)  # (t, delta)
    missing_since: dict[str, float] = field(default_factory=dict)


def load(prefix: str) -> tuple[S.LabState, P.LabPlan]:
    st = build.load_state(prefix)
    if st is None:
        raise RuntimeError(f"lab {prefix} is gone")
    return st, build.plan_of(st)


def inject(prefix: str, fault: ScheduledFault) -> str:
    st, plan = load(prefix)
    return control.apply_fault(st, plan, fault.spec.lab_kind, fault.lab_args)


def clear(prefix: str, fault: ScheduledFault) -> list[str]:
    st, plan = load(prefix)
    if fault.member is not None:
        # One member fault at a time (chaos_schedule): clearing the cluster's member
        # faults clears this one, without touching the nodes.
        return etcd_members.clear_member_faults(st, plan, {CLUSTER})
    lines: list[str] = []
    for node in fault.nodes:
        st, plan = load(prefix)
        lines += control.clear_faults(st, plan, f"{CLUSTER}/{node}")
    return lines


def view_of(doc: dict[str, Any]) -> View | None:
    for verdict in doc.get("cluster_health") or ():
        if verdict.get("cluster") == CLUSTER and verdict.get("source") == "summary":
            findings = [
                Finding(f["kind"], frozenset(f["nodes"])) for f in doc.get("findings") or ()
            ]
            return View(dict(verdict.get("node_states") or {}), findings)
    return None


def fetch_views(plan: P.LabPlan, skip: set[str]) -> list[View]:
    def one(node: P.NodePlan) -> View | None:
        try:
            return view_of(control.fetch_status(node.socket, timeout_s=2.0))
        except (OSError, ValueError, KeyError):
            return None

    nodes = [n for n in plan.nodes if n.name not in skip]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        return [v for v in pool.map(one, nodes) if v is not None]


def registered(st: S.LabState, plan: P.LabPlan) -> set[str] | None:
    node = plan.nodes[0]
    env = control.exec_env(plan, node, dict(os.environ), st)
    try:
        done = subprocess.run(
            ["ip", "netns", "exec", node.netns, "etcdctl", "--command-timeout=5s",
             "get", "--prefix", "--keys-only", NODES_KEY],
            env=env, capture_output=True, text=True, timeout=15, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return {
        f"{CLUSTER}/{line.removeprefix(NODES_KEY)}"
        for line in done.stdout.split()
        if line.startswith(NODES_KEY)
    }


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def metrics_text(node: P.NodePlan) -> str | None:
    host, _, port = node.metrics_listen.rpartition(":")

    def get() -> str:
        conn = http.client.HTTPConnection(host, int(port), timeout=3)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    try:
        return call_in_netns(node.netns, get)
    except (OSError, http.client.HTTPException):
        return None


def slow_checks(judge: Judge, probe: Probe, t: float, args: argparse.Namespace) -> None:
    st, plan = load(args.prefix)
    killed = {n for f in st.faults if f.kind == "kill-agent" for n in [f.target.split("/")[1]]}
    # registrations
    regs = registered(st, plan)
    if regs is not None:
        for node in plan.nodes:
            if node.qualified in regs:
                probe.missing_since.pop(node.qualified, None)
            else:
                probe.missing_since.setdefault(node.qualified, t)
        judge.registrations(t, regs, probe.missing_since)
    # logs
    tb = judge.tallies[TRACEBACKS]
    for node in plan.nodes:
        try:
            with open(node.log, "rb") as f:
                f.seek(probe.log_offsets.get(node.qualified, 0))
                new = f.read()
        except OSError:
            continue
        probe.log_offsets[node.qualified] = probe.log_offsets.get(node.qualified, 0) + len(new)
        found = new.count(b"Traceback")
        raised = "; ".join(traceback_exceptions(new))
        tb.check(found == 0, f"t={t:.0f}s {found} traceback(s) in {node.log}: {raised}")
    # RSS
    rss = judge.tallies[RSS]
    for node in plan.nodes:
        rec = st.processes.get(f"agent/{node.qualified}")
        if rec is None or node.name in killed:
            continue
        mb = rss_mb(rec.pid)
        if mb is None:
            continue
        first = probe.pid_seen.setdefault(rec.pid, t)
        if rec.pid not in probe.rss_base:
            if t - first >= RSS_WARM_S:
                probe.rss_base[rec.pid] = mb
            continue
        probe.rss_seen.setdefault(rec.pid, []).append((t, mb, node.qualified))
        growth = mb - probe.rss_base[rec.pid]
        rss.worse(growth)
        rss.check(
            growth <= args.rss_bound_mb,
            f"t={t:.0f}s agent of {node.qualified} (pid {rec.pid}) grew {growth:.1f} MB "
            f"to {mb:.1f} MB",
        )
    # etcd writes
    delta = 0.0
    top: list[tuple[float, str]] = []
    refused: dict[str, float] = {}
    for node in plan.nodes:
        if node.name in killed:
            continue
        text = metrics_text(node)
        if text is None:
            continue
        total = sum(float(v) for v in _WRITES_RE.findall(text))
        for reason, value in _REFUSED_RE.findall(text):
            refused[reason] = refused.get(reason, 0.0) + float(value)
        last = probe.writes_last.get(node.qualified)
        probe.writes_last[node.qualified] = total
        if last is not None:
            mine = total - last if total >= last else total  # a restarted agent
            delta += mine
            top.append((mine, node.name))
    probe.writes_window.append((t, delta))
    probe.writes_window = [(u, d) for u, d in probe.writes_window if u > t - WRITES_WINDOW_S]
    span = t - probe.writes_window[0][0] + SLOW_EVERY_S
    rate = sum(d for _, d in probe.writes_window) / span
    busiest = ", ".join(f"{name} {n:g}" for n, name in sorted(top, reverse=True)[:3])
    faults = ", ".join(f"{f.kind} {f.target}" for f in st.faults) or "none"
    say(
        f"[{t:7.1f}s] faults: {faults} | writes {rate:.2f}/s over {span:.0f}s "
        f"(last {SLOW_EVERY_S:g}s: {delta:g}; {busiest}) | RSS +{rss.worst:.1f} MB at most"
        f" | /hello refused {','.join(f'{k} {v:g}' for k, v in sorted(refused.items()))}"
    )
    if span >= WRITES_WINDOW_S - 0.5 * SLOW_EVERY_S:
        budget = args.writes_budget * len(plan.nodes)
        writes = judge.tallies[WRITES]
        writes.worse(rate)
        writes.check(
            rate <= budget,
            f"t={t:.0f}s {rate:.2f} writes/s over {span:.0f}s (budget {budget:.2f})",
        )


def wait_converged(plan: P.LabPlan, timeout_s: float) -> bool:
    n = len(plan.nodes)
    deadline = time.monotonic() + timeout_s
    pending = {node.qualified: node for node in plan.nodes}
    while pending and time.monotonic() < deadline:
        for name, node in list(pending.items()):
            try:
                reachable, total, _ = convergence(control.fetch_status(node.socket))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if reachable == total == n:
                del pending[name]
        time.sleep(1.0)
    if pending:
        say(f"not converged after {timeout_s:.0f}s: {', '.join(sorted(pending))}")
    return not pending


def run_soak(args: argparse.Namespace, judge: Judge) -> None:
    duration = args.minutes * 60
    schedule = make_schedule(
        args.seed,
        nodes=args.nodes,
        etcd_members=args.etcd_members,
        duration_s=duration,
        settle_s=args.settle,
    )
    kinds = sorted({f.kind for f in schedule})
    say(
        f"schedule (seed {args.seed}): {len(schedule)} faults, {len(kinds)} kinds, at most "
        f"{concurrency(schedule)} at once"
    )
    for f in schedule:
        say(f"  {f.start_s:7.1f}s - {f.end_s:7.1f}s  {f.label}")
    events = sorted(
        [(f.start_s, 1, f) for f in schedule] + [(f.end_s, 0, f) for f in schedule],
        key=lambda e: (e[0], e[1]),
    )
    probe = Probe()
    t0 = time.monotonic()
    t0_unix = time.time()
    next_slow = 0.0
    on: set[ScheduledFault] = set()
    while True:
        t = time.monotonic() - t0
        while events and events[0][0] <= t:
            _, start, fault = events.pop(0)
            when = time.monotonic() - t0
            if start:
                try:
                    line = inject(args.prefix, fault)
                except Exception as exc:  # a fault that could not be applied: said, skipped
                    say(f"[{when:7.1f}s] could not inject {fault.label}: {exc}")
                    continue
                judge.fault_on(fault, when)
                on.add(fault)
                say(f"[{when:7.1f}s] + {fault.label}: {line}")
            elif fault in on:
                lines = clear(args.prefix, fault)
                judge.fault_off(fault, time.monotonic() - t0)
                on.discard(fault)
                say(f"[{when:7.1f}s] - {fault.label}: {'; '.join(lines)}")
        t = time.monotonic() - t0
        if t >= duration:
            break
        st, plan = load(args.prefix)
        killed = {f.target.split("/")[1] for f in st.faults if f.kind == "kill-agent"}
        judge.observe(t, fetch_views(plan, killed))
        if t >= next_slow:
            slow_checks(judge, probe, t, args)
            next_slow = t + SLOW_EVERY_S
        elapsed = time.monotonic() - t0 - t
        time.sleep(max(0.1, TICK_S - elapsed))
    for fault in list(on):  # nothing should be left: the schedule ends quiet
        clear(args.prefix, fault)
    late = late_growth(probe, duration / 2)
    if late is not None:
        say(f"agent RSS over the second half of the soak: +{late[0]:.1f} MB at most ({late[1]})")
    timeline = read_timeline(args.prefix, t0_unix - 1.0, t0_unix)
    if timeline is None:
        judge.tallies[TIMELINE].check(False, "the findings timeline could not be read")
    else:
        judge.timeline(timeline, end_s=time.monotonic() - t0)


def read_timeline(prefix: str, since_unix: float, t0_unix: float) -> list[Event] | None:
    """The findings timeline since the soak began, as `meshhealth events` prints it for an
    operator (said here) and as events in the soak's seconds (None: not readable)."""
    st, plan = load(prefix)
    node = plan.nodes[0]
    env = control.exec_env(plan, node, dict(os.environ), st)
    base = ["ip", "netns", "exec", node.netns, sys.executable, "-m", "meshhealth", "events"]
    since = ["--since", iso_time(since_unix) or "", "--cluster", CLUSTER]
    try:
        done = subprocess.run(
            [*base, *since, "-o", "json"],
            env=env, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        say("meshhealth events: no answer within 30 s")
        return None
    say(f"$ meshhealth events --since {iso_time(since_unix)}")
    if done.returncode != 0:
        for line in (done.stdout + done.stderr).splitlines():
            say(f"  {line}")
        return None
    doc: EventsJSON = json.loads(done.stdout)
    for line in format_events_text(doc).splitlines():  # as the text output prints it
        say(f"  {line}")
    events: list[Event] = []
    for e in doc["events"]:
        closed = e["closed_at"]
        events.append(
            Event(
                kind=e["kind"],
                nodes=frozenset(e["nodes"]),
                opened_s=parse_when(e["opened_at"], t0_unix) - t0_unix,
                closed_s=None if closed is None else parse_when(closed, t0_unix) - t0_unix,
            )
        )
    return events


def late_growth(probe: Probe, from_s: float) -> tuple[float, str] | None:
    """The largest RSS growth (MB) of an agent that ran from `from_s` to the end, over
    that time, and its node: a leak keeps growing, a warm-up (caches, buffers filling
    to their bounds) has stopped by then. None when no agent ran so long."""
    worst: tuple[float, str] | None = None
    for samples in probe.rss_seen.values():
        if samples[0][0] > from_s:
            continue
        start = next(mb for t, mb, _ in samples if t >= from_s)
        growth = samples[-1][1] - start
        if worst is None or growth > worst[0]:
            worst = (growth, samples[-1][2])
    return worst


def keep_logs(prefix: str, to: Path) -> None:
    """Copy the lab's logs (agents, etcd members) to `to` before the lab goes."""
    st = build.load_state(prefix)
    if st is None:
        return
    to.mkdir(parents=True, exist_ok=True)
    for log in Path(st.dir).rglob("*.log"):
        shutil.copy(log, to / f"{log.parent.name}-{log.name}")
    say(f"logs kept in {to}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--etcd-members", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interval", type=float, default=None, help="probe interval (lab's default)")
    ap.add_argument("--prefix", default=PREFIX, help=f"the lab's prefix (default {PREFIX})")
    bound = f"(default: {BOUND_BASE_S:g} s + {BOUND_INTERVALS:g} intervals"
    ap.add_argument("--show-bound", type=float, help=f"s: a fault shows {bound})")
    ap.add_argument("--name-bound", type=float, help=f"s: a fault is named {bound})")
    ap.add_argument(
        "--clear-bound", type=float, help=f"s: a fault's traces go {bound} + {CLEAR_EXTRA_S:g} s)"
    )
    ap.add_argument("--settle", type=float, help="s: its nodes' quiet after a fault (clear bound)")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy the lab's logs here at the end")
    ap.add_argument("--rss-bound-mb", type=float, default=15.0)
    ap.add_argument(
        "--writes-budget",
        type=float,
        default=WRITES_BUDGET_PER_NODE,
        help="etcd writes/s per node, over every minute (all agents together)",
    )
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    interval = args.interval or P.lab_interval(args.nodes)
    base = BOUND_BASE_S + BOUND_INTERVALS * interval
    args.show_bound = args.show_bound or base
    args.name_bound = args.name_bound or base
    args.clear_bound = args.clear_bound or base + CLEAR_EXTRA_S
    args.settle = args.settle or args.clear_bound
    bounds = Bounds(show_s=args.show_bound, name_s=args.name_bound, clear_s=args.clear_bound)
    judge = Judge(CLUSTER, args.nodes, bounds)
    if build.lab_exists(args.prefix):
        say(f"lab {args.prefix} exists already: `meshhealth lab down --prefix {args.prefix}` first")
        return 2
    started = time.monotonic()
    try:
        try:
            _, plan = build.up(
                args.prefix, nodes=args.nodes, clusters=1, interval_s=interval, agents=True,
                say=say, etcd_member_count=args.etcd_members,
            )  # fmt: skip
        except (build.LabError, P.PlanError) as exc:
            say(f"lab up failed: {exc}")
            return 2
        if not wait_converged(plan, 3 * interval + 60 + 5.0 * args.nodes):
            return 2
        say(f"converged in {time.monotonic() - started:.0f}s; soak of {args.minutes:g} min")
        run_soak(args, judge)
    except (KeyboardInterrupt, Interrupted) as exc:
        say(f"interrupted ({exc or 'Ctrl-C'}): removing the lab")
        return 130
    finally:
        if args.keep_logs:
            keep_logs(args.prefix, Path(args.keep_logs))
        build.down(args.prefix, say)
    say("")
    say(
        f"chaos soak: {args.nodes} nodes, {args.etcd_members} etcd members, "
        f"{args.minutes:g} min, seed {args.seed}; bounds: show {bounds.show_s:g}s, "
        f"named {bounds.name_s:g}s, cleared {bounds.clear_s:g}s, RSS +{args.rss_bound_mb:g} MB, "
        f"writes {args.writes_budget:g}/s per node"
    )
    for row in judge.table():
        say(row)
    for name in judge.broken():
        for example in judge.tallies[name].examples:
            say(f"  {name}: {example}")
    if judge.bystanders:
        say(
            f"  note: {len(judge.bystanders)} finding(s) named a faulted node and a bystander "
            f"too (longest {judge.bystander_worst:.0f}s): "
            + "; ".join(
                f"{f.kind} {','.join(sorted(f.nodes))} at {t:.0f}s"
                for f, t in list(judge.bystanders.items())[:5]
            )
        )
    for fault in judge.unnamed():
        say(f"  never named everywhere: {fault}")
    return 1 if judge.broken() else 0


if __name__ == "__main__":
    sys.exit(main())
