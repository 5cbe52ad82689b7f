"""etcd load of the coordination plane: many simulated agents against one local etcd.

Run:  .venv/bin/python bench/etcd_load.py [--agents 1000] [--workers 4] [--steady 120]

Starts its own etcd on loopback (ports --port and --port + 1, data in a temporary
directory, stopped by PID at the end) and `--workers` processes, each simulating its
share of the agents with meshhealth's own code: the real `Registrar` (node and ip
entries in one transaction under a lease, keep-alive every TTL/3), a discovery watch of
the ip prefix (`Etcd.watch_prefix`), the real `Publisher` (change-driven writes, the
liveness refresh, wire.health.encode_health_report) fed by a round every interval whose
targets come from the real probe plan (`build_plan`: K targets + the node itself,
rotated every epoch), and the cluster-verdict readers: ONE aggregator watching the
health prefix and writing one summary key when the summary changes, and N agents
watching that one key. Nothing is probed: a round is made up (every path OK, and at
`--changes-per-hour` a target fails for one round per agent and hour).

Timeline: registrations spread over --ramp (the watches start at its end, from the
revision of then: a real agent lists once at start, which is not repeated here 1,000
times), --settle to reach the steady rhythm (one epoch at least), then the --steady
window (counters read at both ends, etcd's puts every second), then three
events timed against every agent: a node joins (its ip entry reaches every discovery
watch), a path fails (the observer's write -> the aggregator -> the summary key ->
every agent) and a node leaves (lease revoked: its ip entries' deletion reaches every
agent).

Prints the figures and the same model extrapolated to 5,000 agents. On a small shared
machine 1,000 agents (two watch threads each) can fall behind their keep-alives:
`--lease-ttl 60` keeps the simulation's leases alive (docs/performance.md, "Scale: the
coordination plane").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "bench"
SUMMARY_MIN_GAP_S = 1.0  # as bench/etcd_load_agents.py's aggregator
ETCD_METRICS = (
    "etcd_mvcc_put_total",
    "etcd_mvcc_delete_total",
    "etcd_mvcc_txn_total",
    "etcd_mvcc_range_total",
    "etcd_server_proposals_committed_total",
    "etcd_network_client_grpc_received_bytes_total",
    "etcd_network_client_grpc_sent_bytes_total",
)


# --- the main process: etcd, workers, figures -------------------------------------------


def etcd_metrics(url: str) -> dict[str, float]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open(f"{url}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ETCD_METRICS:
            found[name] = float(value)
    return found


def proc_cpu_s(pid: int) -> float:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start_etcd(port: int, data_dir: str) -> subprocess.Popen[bytes]:
    client, peer = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    argv = ["etcd", "--name", "bench", "--data-dir", data_dir,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"bench={peer}", "--log-level", "error"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            etcd_metrics(client)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("etcd did not start")


def sample_puts(url: str, until: float, workers: list[subprocess.Popen[bytes]]) -> list[float]:
    """etcd's puts in each second until `until` (the peaks of the steady rhythm); stops
    the run at once when a worker has failed."""
    per_s: list[float] = []
    last = etcd_metrics(url).get("etcd_mvcc_put_total", 0.0)
    next_at = time.time() + 1
    while next_at <= until:
        time.sleep(max(0.0, next_at - time.time()))
        for worker in workers:
            if worker.poll() not in (None, 0):
                raise SystemExit(f"a worker failed (exit {worker.returncode})")
        now = etcd_metrics(url).get("etcd_mvcc_put_total", 0.0)
        per_s.append(now - last)
        last, next_at = now, next_at + 1
    return per_s or [0.0]


def schedule(args: argparse.Namespace) -> dict[str, float]:
    t0 = time.time() + 5  # the workers' imports
    steady_start = t0 + args.ramp + args.settle
    steady_end = steady_start + args.steady
    return {
        "t0": t0,
        "ramp_end": t0 + args.ramp,
        "steady_start": steady_start,
        "steady_end": steady_end,
        "join_at": steady_end + 2,
        "fail_at": steady_end + 17,
        "leave_at": steady_end + 32,
        "end": steady_end + 47,
    }


def spread(times: list[float], since: float) -> str:
    if not times or not since:
        return "not measured"
    delays = sorted(t - since for t in times)
    return (
        f"median {statistics.median(delays) * 1000:.0f} ms, "
        f"max {delays[-1] * 1000:.0f} ms ({len(delays)} agents)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--interval", type=float, default=10.0, help="probe interval, s")
    parser.add_argument("--ramp", type=float, default=100.0, help="registrations over, s")
    parser.add_argument("--settle", type=float, default=70.0, help="before the window, s")
    parser.add_argument("--steady", type=float, default=120.0, help="steady window, s")
    parser.add_argument("--changes-per-hour", type=float, default=1.0,
                        help="one-round path failures per agent and hour")  # fmt: skip
    parser.add_argument("--lease-ttl", type=int, default=defaults_lease_ttl_s(),
                        help="the agents' lease TTL, s (keep-alive every third of it)")  # fmt: skip
    parser.add_argument("--port", type=int, default=21150, help="etcd client port (+1 peer)")
    from meshhealth.lab.ram_disk import etcd_data_root

    root = etcd_data_root(disk=Path(tempfile.gettempdir()))
    parser.add_argument("--data-parent", default=root.path,
                        help="etcd's data goes under it (default: /dev/shm, a tmpfs, "
                             "when it has room)")  # fmt: skip
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--plan", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        from etcd_load_agents import run_worker  # bench/, next to this file

        run_worker(args, json.loads(args.plan))
        return
    # SIGTERM ends the run through `finally`: workers and etcd stopped, data removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.data_parent == root.path:
        print(root.line(), flush=True)
    data_dir = tempfile.mkdtemp(prefix="mh-etcd-load-", dir=args.data_parent)
    etcd = start_etcd(args.port, data_dir)
    url = f"http://127.0.0.1:{args.port}"
    workers: list[subprocess.Popen[bytes]] = []
    try:
        plan: dict[str, Any] = schedule(args) | {"url": url, "out": data_dir}
        for i in range(args.workers):
            argv = [sys.executable, __file__, *sys.argv[1:], "--worker", str(i),
                    "--plan", json.dumps(plan)]  # fmt: skip
            workers.append(subprocess.Popen(argv, cwd=ROOT))
        time.sleep(max(0.0, plan["steady_start"] - time.time()))
        before, cpu_before, at_before = etcd_metrics(url), proc_cpu_s(etcd.pid), time.time()
        puts_per_s = sample_puts(url, plan["steady_end"], workers)
        after, cpu_after, at_after = etcd_metrics(url), proc_cpu_s(etcd.pid), time.time()
        window = Window(
            before, after, at_after - at_before,
            (cpu_after - cpu_before) / (at_after - at_before), proc_rss_mb(etcd.pid),
            sorted(puts_per_s),
        )  # fmt: skip
        for worker in workers:
            if worker.wait(timeout=plan["end"] - time.time() + 120) != 0:
                raise SystemExit(f"a worker failed (exit {worker.returncode})")
        results = [json.loads(Path(data_dir, f"worker{i}.json").read_text())
                   for i in range(args.workers)]  # fmt: skip
        report(args, results, window)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        etcd.terminate()
        try:
            etcd.wait(10)
        except subprocess.TimeoutExpired:
            etcd.kill()
            etcd.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Window:
    """What etcd says of the steady window."""

    before: dict[str, float]
    after: dict[str, float]
    seconds: float
    etcd_cpu: float  # fraction of one core
    etcd_rss_mb: float
    puts_per_s: list[float]  # sorted, one per second

    def rate(self, name: str) -> float:
        return float(self.after.get(name, 0.0) - self.before.get(name, 0.0)) / self.seconds


def report(args: argparse.Namespace, results: list[dict[str, Any]], window: Window) -> None:
    def total(name: str) -> float:
        return float(sum(r["steady"][name] for r in results))

    def rate(name: str) -> float:
        return total(name) / window.seconds

    n = args.agents
    reasons: dict[str, int] = {}
    for r in results:
        for reason, count in r["steady"]["writes_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + count
    health_writes_s = rate("health_writes")
    summary_writes_s = rate("summary_writes")
    print("command: .venv/bin/python bench/etcd_load.py " + " ".join(sys.argv[1:]))
    print(f"etcd_load: {n} agents in {args.workers} processes, interval {args.interval:g} s, "
          f"{args.changes_per_hour:g} path failures per agent-hour, "
          f"steady window {window.seconds:.0f} s")  # fmt: skip
    print("writes beyond lease keep-alives (counted by the writers):")
    print(
        f"  health entries      {health_writes_s:7.2f} writes/s  "
        f"{rate('health_bytes') / 1024:7.1f} KiB/s  by reason {dict(sorted(reasons.items()))}"
    )
    print(
        f"  summary key         {summary_writes_s:7.2f} writes/s  "
        f"{rate('summary_bytes') / 1024:7.1f} KiB/s"
    )
    print(f"  registrations       {rate('registrations'):7.2f} writes/s")
    all_writes = health_writes_s + summary_writes_s + rate("registrations")
    print(f"  all                 {all_writes:7.2f} writes/s (goal <= 20)")
    keepalives = rate("keepalives")
    print(f"lease keep-alives     {keepalives:7.1f} /s (+ one get each: the registrar's check)")
    print("etcd over the window (its own counters):")
    rates = {name.removeprefix("etcd_mvcc_"): window.rate(name) for name in ETCD_METRICS}
    print(
        f"  mvcc puts {rates['put_total']:.2f}/s, deletes {rates['delete_total']:.2f}/s, "
        f"txns {rates['txn_total']:.2f}/s, ranges {rates['range_total']:.1f}/s, "
        f"raft proposals {rates['etcd_server_proposals_committed_total']:.2f}/s"
    )
    received = window.rate("etcd_network_client_grpc_received_bytes_total") / 1024
    sent = window.rate("etcd_network_client_grpc_sent_bytes_total") / 1024
    print(f"  gRPC received {received:.1f} KiB/s, sent {sent:.1f} KiB/s")
    print(f"  CPU {window.etcd_cpu * 100:.1f} % of one core, RSS {window.etcd_rss_mb:.0f} MB")
    ip_events, summary_events, health_events = (
        rate("ip_events"),
        rate("summary_events"),
        rate("health_events"),
    )
    print("watch events delivered:")
    print(f"  discovery (N watchers of the ip prefix)      {ip_events:8.2f} /s")
    print(f"  aggregator (1 watcher of the health prefix)  {health_events:8.2f} /s")
    print(f"  verdict (N watchers of the summary key)      {summary_events:8.2f} /s")
    join = [t for r in results for t in r["join_seen"]]
    fail = [t for r in results for t in r["fail_seen"]]
    leave = [t for r in results for t in r["leave_seen"]]
    joined_at = next((r["joined_at"] for r in results if r.get("joined_at")), 0.0)
    failed_at = next((r["failed_at"] for r in results if r.get("failed_at")), 0.0)
    left_at = next((r["left_at"] for r in results if r.get("left_at")), 0.0)
    print(
        f"a join reaches every agent (registered -> each discovery watch): "
        f"{spread(join, joined_at)}"
    )
    print(
        f"a path failure reaches every agent (status noted -> publisher -> aggregator "
        f"-> summary key -> each agent): {spread(fail, failed_at)}"
    )
    print(
        f"a leave reaches every agent (lease revoked -> each discovery watch): "
        f"{spread(leave, left_at)}"
    )
    busiest = window.puts_per_s
    print(
        f"etcd puts per second over the window: median {statistics.median(busiest):.0f}, "
        f"95th percentile {busiest[int(0.95 * (len(busiest) - 1))]:.0f}, max {busiest[-1]:.0f} "
        "(each epoch boundary moves every agent's targets)"
    )
    extrapolate(
        args.lease_ttl,
        n,
        health_writes_s=health_writes_s,
        health_bytes_s=rate("health_bytes"),
        summary_writes_s=summary_writes_s,
        etcd_cpu=window.etcd_cpu,
    )


def extrapolate(
    lease_ttl_s: float,
    n: int,
    *,
    health_writes_s: float,
    health_bytes_s: float,
    summary_writes_s: float,
    etcd_cpu: float,
) -> None:
    """The model: health writes, their bytes and keep-alives grow with N (one write per
    agent per epoch, refresh or change; one keep-alive per agent per TTL/3); the
    aggregator receives every health write once; the summary key changes with the
    failures, which grow with N, but is written at most once a second, and each write
    is one event per agent; a join or a leave is 2 events (NodeIP and HealthIP entries)
    per agent's discovery watch."""
    print("model, extrapolated (linear per agent; the summary key capped at 1 write/s):")
    for agents in (n, 5000):
        scale = agents / n
        summary = min(1 / SUMMARY_MIN_GAP_S, summary_writes_s * scale)
        keepalives = agents / (lease_ttl_s / 3)
        print(f"  {agents:5d} agents: health {health_writes_s * scale:6.1f} writes/s "
              f"({health_bytes_s * scale / 1024:6.1f} KiB/s; as many aggregator events/s), "
              f"summary {summary:4.2f} writes/s -> {summary * agents:6.0f} events/s to agents, "
              f"a join or leave -> {2 * agents} discovery events, "
              f"keep-alives {keepalives:5.0f}/s, etcd CPU ~{etcd_cpu * scale * 100:.0f} % "
              "of a core (linear guess)")  # fmt: skip


def defaults_lease_ttl_s() -> int:
    from meshhealth import defaults

    return int(defaults.LEASE_TTL_S)


if __name__ == "__main__":
    main()
