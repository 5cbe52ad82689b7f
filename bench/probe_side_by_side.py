"""fping, blackbox_exporter (ICMP and HTTP modules) and meshhealth, side by side (not a test).

    sudo .venv/bin/python bench/probe_side_by_side.py [--live 500 --dead 500 --burst 20]

One lab (tests/plugins/netns.py make_lab, namespaces hc<pid>n<k>): `--live` addresses
answer in the target namespace, where a `/hello` responder listens on port 4240;
`--dead` addresses are routed there and dropped silently. Every prober runs inside the
client namespace, on the same targets:

- **fping** 5.x (`fping -q -C N ...`), ICMP only;
- **blackbox_exporter** (Debian `prometheus-blackbox-exporter`; installed with apt-get
  when missing), started inside the client namespace on 127.0.0.1 with its own config
  file (modules `icmp` and `http_hello`, timeout 1 s), probed through its `/probe`
  endpoint as Prometheus does: one HTTP request per target, every target at once, with
  Prometheus's `X-Prometheus-Scrape-Timeout-Seconds` header (1.5 s, so 1 s remains
  for the probe after the exporter's 0.5 s offset);
- **meshhealth**: the `meshhealth probe` command, as users run it (its figures include
  the interpreter's start-up and imports, printed on their own), and the probe engine
  alone ("meshhealth engine": `run_round` with the pinger in a driver process of
  bench/probe_round.py, timed around the round).

Two runs per prober and protocol:

1. **Burst over the live addresses**: fping `-C N -p 0`, `meshhealth probe --count N
   --interval 0` (N echo requests per address, back to back), the exporter N rounds
   of one `/probe` request per address (its ICMP module sends one echo per request);
   for HTTP one GET per address. Probes per second, CPU per probe.
2. **Round with 50 % dead**: one probe per address (live + dead), timeout 1 s: wall
   time of the whole round, CPU per probe.

CPU is the prober's own user + system time: GNU time's for fping and meshhealth,
/proc/PID/stat for the exporter process (not the HTTP client that plays Prometheus).
RSS is the prober's peak resident set (GNU time's %M; the exporter's VmHWM). GNU time
counts in 10 ms steps: CPU per probe is only meaningful for runs of thousands of
probes. `meshhealth probe` start-up (interpreter and imports) is measured on its own
(one echo to 127.0.0.1) and printed. The engine's CPU and RSS are its driver
process's own (getrusage; the RSS includes the interpreter and its imports).
Everything made (namespaces, processes, temporary files) is removed at the end.

3. **RTT** (`--rtt N`, 0: left out): fping `-C N -p 100` and `meshhealth probe --icmp -C
   N -p 100` over the first 10 live addresses (veth to the target namespace), every RTT
   either one printed; their median and 90th percentile. `--only-rtt` runs this alone
   (no blackbox_exporter needed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `meshhealth` and `tests` importable
    sys.path.insert(0, str(ROOT))

HTTP_PORT = 4240
EXPORTER_PORT = 9115
SCRAPE_TIMEOUT_S = 1.5  # Prometheus's header: the exporter keeps 0.5 s of it for itself
EXPORTER_CONFIG = """\
modules:
  icmp:
    prober: icmp
    timeout: 1s
    icmp:
      preferred_ip_protocol: ip4
  http_hello:
    prober: http
    timeout: 1s
    http:
      preferred_ip_protocol: ip4
      valid_status_codes: [200]
"""
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- drivers: run inside the client namespace, print one JSON object -------------------


def drive_command(argv: list[str]) -> dict[str, Any]:
    """Run one prober command under GNU time: its wall time, CPU and peak RSS.

    (GNU time forks the prober from its own small image, so the peak RSS is the
    prober's; getrusage after a fork from Python would count Python's pages too.)"""
    with tempfile.NamedTemporaryFile(mode="r", prefix="hc-time-", encoding="ascii") as out:
        t0 = time.monotonic()
        done = subprocess.run(
            ["/usr/bin/time", "-o", out.name, "-f", "%U %S %M", *argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        wall_s = time.monotonic() - t0
        user_s, system_s, rss_kb = out.read().split()[-3:]
    return {
        "wall_s": wall_s,
        "cpu_s": float(user_s) + float(system_s),
        "rss_kb": int(rss_kb),
        "exit": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr[-200_000:],
    }


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def _proc_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


async def _exporter_probes(targets: list[str], module: str, rounds: int) -> list[bool]:
    """`rounds` x one /probe request per target, every target of a round at once."""
    import trio

    successes: list[bool] = []

    async def one(target: str) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", EXPORTER_PORT)
        async with stream:
            request = (
                f"GET /probe?module={module}&target={target} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{EXPORTER_PORT}\r\n"
                f"X-Prometheus-Scrape-Timeout-Seconds: {SCRAPE_TIMEOUT_S}\r\n"
                "Connection: close\r\n\r\n"
            )
            await stream.send_all(request.encode())
            chunks = []
            while chunk := await stream.receive_some(65536):
                chunks.append(chunk)
        successes.append(b"\nprobe_success 1" in b"".join(chunks))

    for _ in range(rounds):
        async with trio.open_nursery() as nursery:
            for target in targets:
                nursery.start_soon(one, target)
    return successes


def drive_exporter(args: argparse.Namespace) -> dict[str, Any]:
    import trio

    targets = args.targets.split(",")
    pid = args.exporter_pid
    cpu0, rss0, t0 = _proc_cpu_s(pid), _proc_kb(pid, "VmRSS"), time.monotonic()
    successes = trio.run(_exporter_probes, targets, args.module, args.rounds)
    wall_s = time.monotonic() - t0
    return {
        "wall_s": wall_s,
        "cpu_s": _proc_cpu_s(pid) - cpu0,
        "rss_kb": _proc_kb(pid, "VmHWM"),
        "rss_before_kb": rss0,
        "ok": sum(successes),
        "probes": len(successes),
    }


# --- orchestrator ----------------------------------------------------------------------


def _in_client(netns: str, driver_args: list[str]) -> dict[str, Any]:
    argv = ["ip", "netns", "exec", netns, sys.executable, str(Path(__file__).resolve())]
    done = subprocess.run([*argv, *driver_args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"driver failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _command(netns: str, argv: list[str]) -> dict[str, Any]:
    return _in_client(netns, ["--driver", "command", "--", *argv])


def _ensure_exporter() -> str:
    path = shutil.which("prometheus-blackbox-exporter")
    if path is None:
        print("installing prometheus-blackbox-exporter with apt-get ...", flush=True)
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "prometheus-blackbox-exporter"],
            check=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            stdout=subprocess.DEVNULL,
        )
        path = shutil.which("prometheus-blackbox-exporter")
    assert path is not None
    return path


def _count_replies(fping_stderr: str) -> int:
    replies = 0
    for line in fping_stderr.splitlines():
        if " : " in line:
            replies += sum(1 for word in line.split(" : ", 1)[1].split() if word != "-")
    return replies


def _count_ok_summary(text: str) -> int:
    """Replies counted by `meshhealth probe -q` summary lines (xmt/rcv/%loss = s/r/l%),
    which it writes to stderr as fping does."""
    received = 0
    for line in text.splitlines():
        if "xmt/rcv/%loss = " in line:
            received += int(line.split("xmt/rcv/%loss = ", 1)[1].split("/")[1])
    return received


def _wait_listening(netns: str, port: int, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        done = subprocess.run(
            ["ip", "netns", "exec", netns, "ss", "-Hltn", f"sport = :{port}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.stdout.strip():
            return
        time.sleep(0.05)  # polling with a deadline: the exporter has no readiness signal
    raise RuntimeError(f"blackbox_exporter did not listen on :{port} within {deadline_s} s")


def _exporter(
    netns: str, driver: list[str], module: str, rounds: int, targets: str
) -> dict[str, Any]:
    options = ["--module", module, "--rounds", str(rounds), "--targets", targets]
    return _in_client(netns, [*driver, *options])


def _ours(rows: list[dict[str, Any]], name: str, res: dict[str, Any], probes: int) -> None:
    """A `meshhealth probe` row."""
    rows.append(_row(name, res, probes, _count_ok_summary(res["stderr"])))  # (summaries)


def _engine(netns: str, mode: str, live: list[str], *options: object) -> dict[str, Any]:
    """The probe engine itself (run_round in a driver of bench/probe_round.py, timed
    around the round: no interpreter start-up, no imports)."""
    from bench.probe_round import _driver

    res = _driver(netns, mode, live, "--gc", "tuned", "--max-in-flight", 1024, *options)
    res.setdefault("probes", res.get("paths", 0))
    return res


def _row(name: str, res: dict[str, Any], probes: int, ok: int) -> dict[str, Any]:
    return {
        "prober": name,
        "probes": probes,
        "ok": ok,
        "wall_s": res["wall_s"],
        "rate": probes / res["wall_s"],
        "cpu_us": res["cpu_s"] / probes * 1e6,
        "rss_mb": res["rss_kb"] / 1024,
    }


def orchestrate(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("probe_side_by_side.py: needs root (namespaces, raw sockets)", file=sys.stderr)
        return 2
    from bench.probe_round import _bench_netns_names, _machine, _spawn_responders
    from tests.plugins.netns import NetnsFactory

    if args.only_rtt:
        return rtt_only(args)
    exporter = _ensure_exporter()
    _bench_netns_names()
    factory = NetnsFactory()
    tmp = Path(tempfile.mkdtemp(prefix="hc-side-"))
    meshhealth = [sys.executable, "-m", "meshhealth", "probe"]
    burst_rows: list[dict[str, Any]] = []
    startups: list[dict[str, Any]] = []
    round_rows: list[dict[str, Any]] = []
    loads = [os.getloadavg()[0]]
    rtt: list[str] = []
    try:
        lab = factory.make_lab(live=args.live, dead=args.dead)
        _spawn_responders(factory, lab.target)
        c, live, every = lab.client, lab.live, lab.live + lab.dead
        (tmp / "live.txt").write_text("\n".join(live) + "\n")
        (tmp / "all.txt").write_text("\n".join(every) + "\n")
        config = tmp / "blackbox.yml"
        config.write_text(EXPORTER_CONFIG)
        proc = factory.spawn(
            c,
            exporter,
            f"--config.file={config}",
            f"--web.listen-address=127.0.0.1:{EXPORTER_PORT}",
            "--log.level=warn",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_listening(c, EXPORTER_PORT)
        n = args.burst
        fping = ["fping", "-q", "-t", "1000", "-r", "0", "-i", "0", "-p", "0"]
        exporter_driver = ["--driver", "exporter", "--exporter-pid", str(proc.pid)]
        live_file, all_file = str(tmp / "live.txt"), str(tmp / "all.txt")
        live_urls = ",".join(f"http://{ip}:{HTTP_PORT}/hello" for ip in live)
        all_urls = ",".join(f"http://{ip}:{HTTP_PORT}/hello" for ip in every)
        icmp_burst = [*meshhealth, "--icmp", "-q", "--count", str(n), "--interval", "0"]
        icmp_round = [*meshhealth, "--icmp", "-q", "--count", "1", "--timeout", "1"]
        http = [*meshhealth, "--http", "-q", "--timeout", "1", "--port", str(HTTP_PORT)]
        dead = ["--dead-ips", ",".join(lab.dead), "--timeout", 1]
        for k in range(args.repeat):
            startups.append(_command(c, [*meshhealth, "--icmp", "--count", "1", "127.0.0.1"]))
            # 1. bursts over the live addresses
            res = _command(c, [*fping, "-C", str(n), "-f", live_file])
            replies = _count_replies(res["stderr"])
            burst_rows.append(_row("fping (ICMP)", res, n * len(live), replies))
            res = _command(c, [*icmp_burst, "-f", live_file])
            _ours(burst_rows, "meshhealth probe (ICMP)", res, n * len(live))
            res = _engine(c, "icmp", live, "--paths", len(live), "--count", n, "--interval", 0)
            burst_rows.append(_row("meshhealth engine (ICMP)", res, res["probes"], res["ok"]))
            res = _exporter(c, exporter_driver, "icmp", n, ",".join(live))
            burst_rows.append(_row("blackbox_exporter (ICMP)", res, res["probes"], res["ok"]))
            res = _command(c, [*http, "-f", live_file])
            _ours(burst_rows, "meshhealth probe (HTTP)", res, len(live))
            res = _engine(c, "round", live, "--protocols", "http", "--timeout", 1)
            burst_rows.append(_row("meshhealth engine (HTTP)", res, res["probes"], res["ok"]))
            res = _exporter(c, exporter_driver, "http_hello", 1, live_urls)
            burst_rows.append(_row("blackbox_exporter (HTTP)", res, res["probes"], res["ok"]))
            # 2. one round over live + dead
            res = _command(c, [*fping, "-C", "1", "-f", all_file])
            replies = _count_replies(res["stderr"])
            round_rows.append(_row("fping (ICMP)", res, len(every), replies))
            res = _command(c, [*icmp_round, "-f", all_file])
            _ours(round_rows, "meshhealth probe (ICMP)", res, len(every))
            res = _engine(c, "round", live, *dead, "--protocols", "icmp")
            round_rows.append(_row("meshhealth engine (ICMP)", res, res["probes"], res["ok"]))
            res = _exporter(c, exporter_driver, "icmp", 1, ",".join(every))
            round_rows.append(_row("blackbox_exporter (ICMP)", res, res["probes"], res["ok"]))
            res = _command(c, [*http, "-f", all_file])
            _ours(round_rows, "meshhealth probe (HTTP)", res, len(every))
            res = _engine(c, "round", live, *dead, "--protocols", "http")
            round_rows.append(_row("meshhealth engine (HTTP)", res, res["probes"], res["ok"]))
            res = _exporter(c, exporter_driver, "http_hello", 1, all_urls)
            round_rows.append(_row("blackbox_exporter (HTTP)", res, res["probes"], res["ok"]))
            loads.append(os.getloadavg()[0])
            print(f"run {k + 1}/{args.repeat} done", file=sys.stderr, flush=True)
        rtt = rtt_rows(c, live, args.rtt) if args.rtt else []
    finally:
        factory.close()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"machine: {_machine()}")
    print(
        f"lab: {args.live} live + {args.dead} dead addresses; medians of {args.repeat} runs; "
        f"load average (1 min) during the runs: {' '.join(f'{x:.1f}' for x in loads)}\n"
    )
    startup = {
        "wall_s": _median_of([r["wall_s"] for r in startups]),
        "cpu_s": _median_of([r["cpu_s"] for r in startups]),
    }
    print(
        "meshhealth probe start-up (one echo to 127.0.0.1), medians: "
        f"wall {startup['wall_s']:.3f} s, CPU {startup['cpu_s']:.3f} s\n"
    )

    _print_table(
        f"1. burst over the {args.live} live addresses ({n} echoes per address for ICMP, "
        "one GET per address for HTTP)",
        burst_rows,
    )
    _print_table(
        f"2. one round over {args.live} live + {args.dead} dead addresses, timeout 1 s",
        round_rows,
    )
    if rtt:
        _print_rtt(rtt, args.rtt)
    return 0


def rtt_rows(netns: str, live: list[str], count: int) -> list[str]:
    """Table rows: every RTT fping and `meshhealth probe` print with -C (ms): median,
    90th percentile, replies."""
    targets = live[:10]
    period = ["-p", "100"]
    fping = _command(netns, ["fping", "-q", "-C", str(count), *period, *targets])
    ours = [sys.executable, "-m", "meshhealth", "probe", "--icmp", "-q", "-C", str(count)]
    mine = _command(netns, [*ours, *period, *targets])
    rows = []
    for name, res in (("fping", fping), ("meshhealth probe", mine)):
        rtts = sorted(_rtts_ms(res["stderr"]))
        if not rtts:
            rows.append(f"| {name} | no replies | | |")
            continue
        p90 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.9))]
        rows.append(f"| {name} | {_median_of(rtts):.3f} ms | {p90:.3f} ms | {len(rtts)} |")
    return rows


def _rtts_ms(text: str) -> list[float]:
    """Every RTT of `-C` lines (`ADDR [icmp] : 0.041 - 0.047`), in ms."""
    found: list[float] = []
    for line in text.splitlines():
        if " : " in line:
            found += [float(w) for w in line.split(" : ", 1)[1].split() if w != "-"]
    return found


def _print_rtt(rows: list[str], count: int) -> None:
    print(f"3. RTT: {count} echoes 100 ms apart to each of 10 live addresses, -C")
    print("| prober | median | p90 | replies |")
    print("|---|---|---|---|")
    print("\n".join(rows) + "\n")


def rtt_only(args: argparse.Namespace) -> int:
    from bench.probe_round import _bench_netns_names, _machine
    from tests.plugins.netns import NetnsFactory

    _bench_netns_names()
    factory = NetnsFactory()
    try:
        lab = factory.make_lab(live=10, dead=0)
        rows = rtt_rows(lab.client, lab.live, args.rtt)
    finally:
        factory.close()
    print(f"machine: {_machine()}; load average (1 min): {os.getloadavg()[0]:.1f}\n")
    _print_rtt(rows, args.rtt)
    return 0


def _median_of(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(title)
    print("| prober | probes | OK (median) | wall | probes/s | CPU per probe | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    names = list(dict.fromkeys(row["prober"] for row in rows))
    for name in names:
        mine = [r for r in rows if r["prober"] == name]
        wall, ok = _median_of([r["wall_s"] for r in mine]), _median_of([r["ok"] for r in mine])
        cpu, rss = _median_of([r["cpu_us"] for r in mine]), _median_of([r["rss_mb"] for r in mine])
        print(
            f"| {name} | {mine[0]['probes']:,} | {ok:,.0f} | {wall:.3f} s "
            f"| {mine[0]['probes'] / wall:,.0f} | {cpu:.1f} µs | {rss:.0f} MB |"
        )
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", type=int, default=500, help="addresses that answer")
    parser.add_argument("--dead", type=int, default=500, help="addresses dropped silently")
    parser.add_argument("--burst", type=int, default=20, help="ICMP echoes per live address")
    parser.add_argument("--repeat", type=int, default=3, help="runs; medians are printed")
    parser.add_argument("--rtt", type=int, default=50, help="echoes per address for RTTs")
    parser.add_argument("--only-rtt", action="store_true", help="the RTT comparison alone")
    # internal: drivers run inside the client namespace
    parser.add_argument("--driver", choices=("command", "exporter"), help=argparse.SUPPRESS)
    parser.add_argument("--exporter-pid", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--module", default="icmp", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--targets", default="", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver == "command":
        print(json.dumps(drive_command(args.argv)))
        return 0
    if args.driver == "exporter":
        print(json.dumps(drive_exporter(args)))
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
