"""Benchmark of the agent's admin API (not a test).

    .venv/bin/python bench/admin_latency.py [--starts 7] [--dead 300] [--seconds 20]

1. Start-up: time from spawning `meshhealth agent` to its first `GET /v1/healthz`
   answer on the admin socket, `--starts` times each with etcd up (a local etcd) and
   with etcd unreachable (a closed loopback port); median and max. For scale: the time
   `python -m meshhealth --version` takes (interpreter + CLI imports).
2. Responsiveness (root: network namespaces): an etcd and one agent run inside a client
   namespace (tests/plugins/netns.py make_lab); etcd holds `--dead` nodes whose NodeIP
   and HealthIP are routed to the target namespace and dropped there silently, so every
   round is `--dead` x 4 paths of timeouts. While rounds run (`--interval` 5 s, timeout
   1 s) a client asks `GET /v1/status`, then `GET /v1/healthz`, in a loop, one fresh
   connection per request as `meshhealth status` does: p50 / p99 / max (status split by
   whether a round was running when the agent answered), and the agent's CPU use.

Everything it made (namespaces, processes, files) is removed at the end, also on
failure. Prints the figures; docs/performance.md "Agent admin API" has a run's figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `meshhealth` and `tests` importable
    sys.path.insert(0, str(ROOT))

from tests.agent_cluster import (  # noqa: E402
    AgentCluster,
    AgentProcess,
    dead_target_entries,
    netns_etcd,
    put_entries,
    wait_for,
)
from tests.plugins.etcd_server import EtcdServer  # noqa: E402
from tests.plugins.local_etcd import free_loopback_port  # noqa: E402
from tests.plugins.netns import NetnsFactory  # noqa: E402


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _percentile(samples: list[float], fraction: float) -> float:
    """Nearest rank."""
    ordered = sorted(samples)
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def _python_start_s(runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "meshhealth", "--version"],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        times.append(time.monotonic() - start)
    return statistics.median(times)


def _first_answer_s(etcd_endpoint: str, runs: int) -> list[float]:
    out = []
    for index in range(runs):
        with tempfile.TemporaryDirectory(prefix="mhbench") as tmp:
            cluster = AgentCluster(Path(tmp), etcd_endpoint, cluster=f"s{index}")
            try:
                agent = cluster.spawn(cluster.make("n1"))
                cluster.wait_admin(agent, timeout_s=20, interval_s=0.005)
                out.append(time.monotonic() - agent.started_at)
            finally:
                cluster.close()
    return out


def bench_start(runs: int) -> None:
    print(f"== 1. agent start -> first /v1/healthz answer ({runs} runs each)")
    print(f"   python -m meshhealth --version: median {_ms(_python_start_s(runs))}")
    server = EtcdServer()
    server.start()
    try:
        up = _first_answer_s(server.endpoint, runs)
    finally:
        server.close()
    down = _first_answer_s(f"http://127.0.0.1:{free_loopback_port()}", runs)
    for what, samples in (("etcd up", up), ("etcd unreachable", down)):
        print(
            f"   {what:17}: median {_ms(statistics.median(samples))}, "
            f"max {_ms(max(samples))}  (runs: {', '.join(_ms(s) for s in samples)})"
        )


def bench_dead_rounds(dead: int, seconds: float, interval_s: float) -> None:
    print(f"== 2. admin API while rounds of {dead} dead nodes ({dead * 4} paths) run")
    if os.geteuid() != 0:
        print("   skipped: needs root (network namespaces)")
        return
    factory = NetnsFactory()
    try:
        lab = factory.make_lab(live=0, dead=dead * 2)
        with netns_etcd(lab.client) as etcd, tempfile.TemporaryDirectory(prefix="mhb") as tmp:
            put_entries(
                etcd.endpoint,
                dead_target_entries("c1", lab.dead[:dead], lab.dead[dead:]),
                lab.client,
            )
            with AgentCluster(
                Path(tmp), etcd.endpoint, interval_s=interval_s, timeout_s=1.0, netns=lab.client
            ) as cluster:
                agent = cluster.start("n1")
                doc, _ = wait_for(
                    lambda: agent.admin("GET", "/v1/status")[1],
                    lambda d: d["summary"]["unreachable"] == dead and d["round"]["completed"] >= 1,
                    30,
                    what="a finished round over every dead node",
                )
                print(
                    f"   rounds: {doc['round']['last_duration_s']:.2f} s each "
                    f"(interval {interval_s:g} s, timeout 1 s, spread {interval_s * 0.2:g} s)"
                )
                _measure(agent, seconds)
    finally:
        factory.close()


def _cpu_s(pid: int) -> float:
    """utime + stime of `pid` (seconds), from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _line(what: str, samples: list[float]) -> str:
    if not samples:
        return f"   {what}: no samples"
    return (
        f"   {what}: n={len(samples)} p50 {_ms(statistics.median(samples))}, "
        f"p99 {_ms(_percentile(samples, 0.99))}, max {_ms(max(samples))}"
    )


def _measure(agent: AgentProcess, seconds: float) -> None:
    """GET /v1/status, split by whether a round was running; then GET /v1/healthz."""
    # Parsing 400 KiB of JSON makes ~25k objects: the client's cyclic GC then walks every
    # object this process imported (grpc, etcd3, test helpers) now and then, ~15-25 ms
    # counted as the agent's latency in ~1 % of the samples. Not the agent's time.
    gc.freeze()
    busy: list[float] = []
    idle: list[float] = []
    size = 0
    cpu_start, wall_start = _cpu_s(agent.pid), time.monotonic()
    deadline = time.monotonic() + seconds / 2
    while time.monotonic() < deadline:
        start = time.monotonic()
        code, doc = agent.admin("GET", "/v1/status", timeout_s=5.0)
        elapsed = time.monotonic() - start
        if code != 200:
            raise RuntimeError(f"/v1/status answered {code}: {doc}")
        (busy if doc["round"]["running"] else idle).append(elapsed)
        size = len(json.dumps(doc))
    print(_line("GET /v1/status  during a round", busy))
    print(_line("GET /v1/status  between rounds", idle))
    healthz: list[float] = []
    deadline = time.monotonic() + seconds / 2
    while time.monotonic() < deadline:
        start = time.monotonic()
        code, doc = agent.admin("GET", "/v1/healthz", timeout_s=5.0)
        healthz.append(time.monotonic() - start)
    print(_line("GET /v1/healthz (any time)    ", healthz))
    cpu = (_cpu_s(agent.pid) - cpu_start) / (time.monotonic() - wall_start)
    print(f"   status document ~{size // 1024} KiB; agent CPU {cpu * 100:.0f} % of one core")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=7, help="start-up runs per case")
    parser.add_argument("--dead", type=int, default=300, help="dead nodes (4 paths each)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measuring time")
    parser.add_argument("--interval", type=float, default=5.0, help="agent's probe interval")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, Linux {platform.release()}, ", end="")
    print(f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    bench_start(args.starts)
    bench_dead_rounds(args.dead, args.seconds, args.interval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
