"""Process size: what each import costs, and the RSS and idle CPU of the two processes
every node runs (docs/performance.md, "Process size").

    sudo .venv/bin/python bench/process_size.py [--code-root DIR] [--nodes 3]
        [--settle-s 25] [--idle-s 30] [--skip-imports]

Prints
- per import: RSS of a fresh interpreter that imports only that module (MB) and its
  cumulative import time (`python -X importtime`, ms);
- `meshhealth responder --passive` alone: RSS after answering 50 probes, CPU over an
  idle window (% of one core);
- `meshhealth agent` in loopback endpoint mode (`--nodes` agents against one local etcd
  on loopback, interval 10 s): each agent's RSS and CPU over the idle window, and its
  endpoint responder's.
`--code-root` measures another checkout's code with this interpreter (PYTHONPATH), to
compare before and after. Traffic stays on 127.104.0.0/16; everything started here is
stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `meshhealth` and `tests` importable
    sys.path.insert(0, str(ROOT))

from tests.plugins.local_etcd import LocalEtcd  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
IMPORTS = (
    "h11",
    "msgpack",
    "rich",
    "trio",
    "trio_websocket",
    "grpc",
    "etcd3",
    "meshhealth.probe.hello_server",
    "meshhealth.cli.responder_cmd",
    "meshhealth.probe.responder",
    "meshhealth.kvstore.client",
    "meshhealth.cli.watch_screen",
    "meshhealth.agent.app",
)


def cpu_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    """`pid`'s child processes, whichever of its threads started them."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            raw = stat.read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(raw[raw.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def code_env(code_root: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(code_root))


def import_cost(module: str, code_root: Path) -> tuple[float, float]:
    """(RSS MB of an interpreter that imported only `module`, import time ms)."""
    code = f"import {module}\nprint(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        cwd=code_root,
        env=code_env(code_root),
        capture_output=True,
        text=True,
        check=True,
    )
    top = [ln for ln in out.stderr.splitlines() if re.search(rf"\|\s{re.escape(module)}$", ln)]
    cumulative_us = int(top[-1].split("|")[1]) if top else 0
    return int(out.stdout.split()[-1]) / 1024, cumulative_us / 1000


def bare_rss_mb() -> float:
    code = "print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout) / 1024


def get_hello(host: str, port: int) -> bytes:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def cpu_percent(pids: list[int], idle_s: float) -> list[float]:
    before = [cpu_ticks(p) for p in pids]
    time.sleep(idle_s)  # the measurement window
    after = [cpu_ticks(p) for p in pids]
    return [100 * (a - b) / CLK_TCK / idle_s for a, b in zip(after, before, strict=True)]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def measure_responder(code_root: Path, idle_s: float) -> None:
    argv = [sys.executable, "-m", "meshhealth", "responder", "--listen", "127.104.2.250:0"]
    proc = subprocess.Popen(
        [*argv, "--passive"], cwd=code_root, env=code_env(code_root), stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        port = int(line.split()[3].rsplit(":", 1)[1])
        for _ in range(50):
            assert get_hello("127.104.2.250", port).startswith(b"HTTP/1.1 200")
        rss = rss_mb(proc.pid)
        (cpu,) = cpu_percent([proc.pid], idle_s)
        print(f"responder_passive_rss_mb {rss:.1f}")
        print(f"responder_passive_idle_cpu_pct {cpu:.2f} (over {idle_s:.0f} s)")
    finally:
        stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def measure_agents(code_root: Path, nodes: int, settle_s: float, idle_s: float) -> None:
    with LocalEtcd() as etcd, tempfile.TemporaryDirectory(prefix="hi-size-") as tmp:
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(1, nodes + 1):
                argv = [
                    sys.executable,
                    "-m",
                    "meshhealth",
                    "agent",
                    "--etcd",
                    etcd.endpoint,
                    "--cluster",
                    "hi-size",
                    "--node",
                    f"hi-node{i}",
                    "--node-ip",
                    f"127.104.1.{i}",
                    "--health-mode",
                    "loopback",
                    "--health-ip",
                    f"127.104.2.{i}",
                    "--socket",
                    f"{tmp}/node{i}.sock",
                    "--interval",
                    "10",
                    "--log-level",
                    "warning",
                ]
                procs.append(
                    subprocess.Popen(
                        argv, cwd=code_root, env=code_env(code_root), stdin=subprocess.DEVNULL
                    )
                )
            deadline = time.monotonic() + 60
            while not all(children(p.pid) for p in procs):  # each endpoint is up
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("agents did not start their health endpoints")
                time.sleep(0.2)
            time.sleep(settle_s)  # a few rounds: caches, histograms, etcd watches warm up
            agents = [p.pid for p in procs]
            responders = [children(pid)[0] for pid in agents]
            cpu = cpu_percent(agents + responders, idle_s)
            agent_rss = [rss_mb(pid) for pid in agents]
            responder_rss = [rss_mb(pid) for pid in responders]

            def fmt(xs: list[float]) -> str:
                return f"min {min(xs):.1f} max {max(xs):.1f}"

            print(f"agents {nodes} (loopback endpoint mode, interval 10 s)")
            print(f"agent_rss_mb {fmt(agent_rss)}")
            print(f"agent_cpu_pct {fmt(cpu[:nodes])} (over {idle_s:.0f} s)")
            print(f"endpoint_responder_rss_mb {fmt(responder_rss)}")
            print(f"endpoint_responder_cpu_pct {fmt(cpu[nodes:])}")
        finally:
            for proc in procs:
                stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code-root", type=Path, default=ROOT)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=25.0)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--skip-imports", action="store_true")
    args = parser.parse_args()
    root = args.code_root.resolve()
    print(f"code {root}  python {sys.version.split()[0]}")
    if not args.skip_imports:
        print("| import | RSS (MB) | import time (ms) |\n|---|---|---|")
        print(f"| (none) | {bare_rss_mb():.1f} | 0 |")
        for module in IMPORTS:
            try:
                rss, ms = import_cost(module, root)
            except subprocess.CalledProcessError:
                print(f"| {module} | (absent) | |")
                continue
            print(f"| {module} | {rss:.1f} | {ms:.0f} |")
    measure_responder(root, args.idle_s)
    measure_agents(root, args.nodes, args.settle_s, args.idle_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
