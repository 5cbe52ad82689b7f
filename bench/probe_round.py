"""Benchmark of the probe engine against namespaces it builds (not a test).

    sudo .venv/bin/python bench/probe_round.py [--live 500 --dead 500 --timeout 1]

Builds a client namespace and a target namespace joined by a veth (tests/plugins/netns.py
make_lab): `--live` addresses answer in the target (and a `/hello` responder listens
there), `--dead` addresses are routed there and silently dropped by nft. Then, inside
the client namespace (a driver process run with `ip netns exec`), it measures:

1. Rounds over live + dead targets, 50 % dead: wall time / probe timeout. Once with
   ICMP count=1 + HTTP, once with the default ICMP (3 requests, 100 ms apart) + HTTP.
2. ICMP throughput: `--probes` echo probes (count=1) over the live addresses through
   `run_round` (and the bare pinger, to show the scheduler's share): probes per second
   and CPU seconds per 1,000 probes (getrusage of the probing process).
3. The same echo requests through `fping` (same targets, same number of requests), its
   wall and CPU time (RUSAGE_CHILDREN), and our ratios to it.

Everything it made (namespaces, processes) is removed at the end, also on failure.
`--profile` prints a cProfile of the throughput run (where the CPU goes).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `meshhealth` and `tests` importable
    sys.path.insert(0, str(ROOT))

HTTP_PORT = 4240


# --- driver: runs inside the client namespace, prints one JSON object -----------------


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def _drive_round(args: argparse.Namespace) -> dict[str, Any]:
    import trio

    from meshhealth import model
    from meshhealth.probe.icmp import open_pinger
    from meshhealth.probe.scheduler import run_round

    live, dead = args.live_ips.split(","), args.dead_ips.split(",")
    targets = [model.Target("bench", f"live{i}", ip) for i, ip in enumerate(live)]
    targets += [model.Target("bench", f"dead{i}", ip) for i, ip in enumerate(dead)]
    async with open_pinger() as pinger:
        cpu0, t0 = _cpu_s(resource.RUSAGE_SELF), trio.current_time()
        report = await run_round(
            targets,
            pinger=pinger,
            http_port=HTTP_PORT,
            timeout_s=args.timeout,
            spread_s=args.spread,
            icmp_count=args.count,
            icmp_interval_s=args.interval,
            max_in_flight=args.max_in_flight,
            protocols=frozenset(model.Protocol(p) for p in args.protocols.split(",")),
        )
        wall_s = trio.current_time() - t0
        cpu_s = _cpu_s(resource.RUSAGE_SELF) - cpu0
    wrong = [
        f"{p.ip} {p.path.protocol}: {p.result.status}"
        for p in report.paths
        if p.result.ok != p.path.node.startswith("live")
    ]
    return {
        "paths": len(report.paths),
        "max_in_flight": args.max_in_flight,
        "ok": sum(p.result.ok for p in report.paths),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "wrong": wrong[:10],
        "wrong_count": len(wrong),
    }


async def _drive_icmp(args: argparse.Namespace) -> dict[str, Any]:
    """`--paths` ICMP paths (cycling over the live addresses), `--count` requests each."""
    import trio

    from meshhealth import model
    from meshhealth.probe.icmp import open_pinger
    from meshhealth.probe.scheduler import run_round

    live = args.live_ips.split(",")
    n = args.paths
    runs = []
    async with open_pinger() as pinger:
        # warm-up (first packets, code paths)
        await pinger.ping(live[0], count=1, timeout_s=args.timeout)
        for _ in range(args.repeat):
            # Rounds are an interval apart in the agent: let the previous run's probe
            # state (timers that outlive early replies) expire first, as it would there.
            await trio.sleep(args.timeout + 0.1)
            cpu0, t0 = _cpu_s(resource.RUSAGE_SELF), trio.current_time()
            if args.bare:
                ok = 0
                limiter = trio.CapacityLimiter(args.max_in_flight)

                async def one(ip: str, limiter: trio.CapacityLimiter) -> None:
                    nonlocal ok
                    async with limiter:
                        result = await pinger.ping(
                            ip, count=args.count, interval_s=args.interval, timeout_s=args.timeout
                        )
                    ok += result.received

                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(one, live[i % len(live)], limiter)
            else:
                targets = [model.Target("bench", f"n{i}", live[i % len(live)]) for i in range(n)]
                report = await run_round(
                    targets,
                    pinger=pinger,
                    timeout_s=args.timeout,
                    icmp_count=args.count,
                    icmp_interval_s=args.interval,
                    max_in_flight=args.max_in_flight,
                    protocols=frozenset({model.Protocol.ICMP}),
                )
                ok = sum(p.result.received for p in report.paths)
            wall_s = trio.current_time() - t0
            cpu_s = _cpu_s(resource.RUSAGE_SELF) - cpu0
            rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            run = {"probes": n * args.count, "ok": ok, "wall_s": wall_s, "cpu_s": cpu_s}
            runs.append({**run, "rss_kb": rss_kb})
    return _median_run(runs)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median wall time, plus every run's wall time."""
    ordered = sorted(runs, key=lambda run: float(run["wall_s"]))
    median = dict(ordered[len(ordered) // 2])
    median["walls"] = [run["wall_s"] for run in runs]
    return median


def _drive_fping(args: argparse.Namespace) -> dict[str, Any]:
    """fping over the live addresses, `--count` requests each."""
    live = args.live_ips.split(",")
    argv = ["fping", "-q", "-C", str(args.count), "-t", str(round(args.timeout * 1000))]
    argv += ["-p", str(args.fping_period_ms), "-i", str(args.fping_interval_ms), "-r", "0"]
    runs = []
    for _ in range(args.repeat):
        cpu0, t0 = _cpu_s(resource.RUSAGE_CHILDREN), time.monotonic()
        done = subprocess.run([*argv, *live], capture_output=True, text=True, check=False)
        wall_s = time.monotonic() - t0
        cpu_s = _cpu_s(resource.RUSAGE_CHILDREN) - cpu0
        replies = 0
        for line in done.stderr.splitlines():
            if " : " in line:
                replies += sum(1 for word in line.split(" : ", 1)[1].split() if word != "-")
        runs.append(
            {
                "argv": " ".join(argv) + f" <{len(live)} addresses>",
                "probes": args.count * len(live),
                "ok": replies,
                "wall_s": wall_s,
                "cpu_s": cpu_s,
                "exit": done.returncode,
            }
        )
    return _median_run(runs)


def driver_main(args: argparse.Namespace) -> None:
    import trio

    if args.gc == "tuned":
        from meshhealth.gc_tuning import tune_gc_for_probing

        tune_gc_for_probing()

    if args.driver == "responder":
        trio.run(_serve_responders)
        return
    if args.driver == "fping":
        out = _drive_fping(args)
    elif args.driver == "round":
        out = trio.run(_drive_round, args)
    elif args.profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        out = profiler.runcall(trio.run, _drive_icmp, args)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        out["profile"] = text.getvalue()
    else:
        out = trio.run(_drive_icmp, args)
    print(json.dumps(out))


# --- orchestrator: builds the namespaces, runs the drivers, prints the figures --------


def _driver(
    netns: str, mode: str, live: list[str], *options: object, script: Path | None = None
) -> dict[str, Any]:
    script = script or Path(__file__).resolve()
    argv = ["ip", "netns", "exec", netns, sys.executable, str(script)]
    argv += ["--driver", mode, "--live-ips", ",".join(live), *map(str, options)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"driver {mode} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _machine() -> str:
    model_name = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model_name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores, {model_name}, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


async def _serve_responders() -> None:
    """Driver mode: /hello responders on every IPv4 and IPv6 address of the namespace."""
    import trio

    from meshhealth.probe.responder import serve_responder

    async with trio.open_nursery() as nursery:
        for host in ("0.0.0.0", "::"):  # trio's IPv6 listeners are IPv6-only
            await nursery.start(
                functools.partial(
                    serve_responder, host, HTTP_PORT, max_connections=4096, read_timeout_s=5.0
                )
            )
        print("listening", flush=True)


def _spawn_responders(factory: Any, netns: str) -> None:
    proc = factory.spawn(
        netns,
        sys.executable,
        str(Path(__file__).resolve()),
        "--driver",
        "responder",
        stdout=subprocess.PIPE,
    )
    line = proc.stdout.readline()
    proc.stdout.close()  # it prints nothing more
    if b"listening" not in line:
        raise RuntimeError(f"responders did not start: {line!r}")


def _rate_line(name: str, res: dict[str, Any]) -> str:
    rate = res["probes"] / res["wall_s"]
    per_k = res["cpu_s"] / res["probes"] * 1000
    return (
        f"   {name:30} {res['probes']:6} requests in {res['wall_s']:.3f} s = {rate:7.0f}/s, "
        f"CPU {res['cpu_s']:.3f} s = {per_k:.4f} s per 1,000 ({res['ok']} replies; "
        f"walls of {len(res['walls'])} runs: {' '.join(f'{w:.3f}' for w in res['walls'])})"
    )


def _bench_netns_names() -> None:
    """Namespaces made by this bench are called hc<pid>n<k> (the lab prefix of the
    probe benches), not the test suite's mh<pid>n<k>."""
    from tests.plugins import netns as netns_plugin

    counter = iter(range(1, 1_000_000))
    netns_plugin._next_name = lambda: f"hc{os.getpid()}n{next(counter)}"  # type: ignore[attr-defined]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def compare(args: argparse.Namespace, factory: Any, lab: Any) -> None:
    """Before/after: this checkout's drivers and those of `--compare-with DIR` (another
    checkout of meshhealth), run alternately in the same lab, with fping in between."""
    before = Path(args.compare_with).resolve() / "bench" / "probe_round.py"
    t = args.timeout
    common = ["--timeout", t, "--max-in-flight", args.max_in_flight, "--gc", args.gc]
    common += ["--repeat", args.repeat]
    burst = max(args.probes // args.live, 1)
    c, live = lab.client, lab.live
    dead = ["--dead-ips", ",".join(lab.dead)]
    wide = ["--max-in-flight", max(2 * (args.live + args.dead), args.max_in_flight)]
    cases: list[tuple[str, list[object]]] = [
        ("burst", ["icmp", "--paths", args.probes]),
        ("round ICMP count=1", ["round", *dead, "--protocols", "icmp"]),
        ("round ICMP count=1 + HTTP", ["round", *dead, *wide]),
        ("round ICMP count=3 + HTTP, 1024 in flight", ["round", *dead, "--count", 3]),
        ("live round count=3", ["icmp", "--paths", len(live), "--count", 3]),
    ]
    figures: dict[tuple[str, str], list[dict[str, Any]]] = {}
    loads = [os.getloadavg()[0]]
    for k in range(args.alternations):
        order = [("after", None), ("before", before)]
        if k % 2:
            order.reverse()
        for who, script in order:
            for name, (mode, *options) in cases:
                res = _driver(c, str(mode), live, *common, *options, script=script)
                figures.setdefault((name, who), []).append(res)
        fping = _driver(c, "fping", live, *common, "--count", burst, "--fping-period-ms", 0)
        figures.setdefault(("burst", "fping"), []).append(fping)
        loads.append(os.getloadavg()[0])
    print(
        f"before/after: {args.alternations} alternations, each figure the median of them "
        f"(each run itself the median of {args.repeat}); load average (1 min) during the "
        f"runs: {' '.join(f'{x:.1f}' for x in loads)}"
    )
    print(f"   before = {args.compare_with}\n")
    for name, _ in cases:
        for who in ("before", "after", "fping"):
            runs = figures.get((name, who))
            if not runs:
                continue
            if "probes" in runs[0]:
                per_echo_us = [r["cpu_s"] / r["probes"] * 1e6 for r in runs]
                rates = [r["probes"] / r["wall_s"] for r in runs]
                wall = _median([r["wall_s"] for r in runs])
                each = " ".join(f"{x:.2f}" for x in per_echo_us)
                print(
                    f"   {name:42} {who:6}: CPU {_median(per_echo_us):6.2f} us/echo "
                    f"(runs {each}), {_median(rates):8.0f} echoes/s, wall {wall:.3f} s"
                )
            else:
                walls = [r["wall_s"] for r in runs]
                wrong = sum(r["wrong_count"] for r in runs)
                each = " ".join(f"{w:.3f}" for w in walls)
                print(
                    f"   {name:42} {who:6}: wall {_median(walls):.3f} s = "
                    f"{_median(walls) / t:.3f} x timeout (runs {each}; {wrong} wrong)"
                )


def orchestrate(args: argparse.Namespace) -> int:
    from tests.plugins.netns import NetnsFactory

    if os.geteuid() != 0:
        print("probe_round.py: needs root (creates network namespaces)", file=sys.stderr)
        return 2
    _bench_netns_names()
    if args.compare_with:
        factory = NetnsFactory()
        try:
            lab = factory.make_lab(live=args.live, dead=args.dead)
            _spawn_responders(factory, lab.target)
            print(f"machine: {_machine()}")
            compare(args, factory, lab)
        finally:
            factory.close()
        return 0
    t = args.timeout
    common = ["--timeout", t, "--max-in-flight", args.max_in_flight, "--gc", args.gc]
    common += ["--repeat", args.repeat]
    burst = max(args.probes // args.live, 1)  # fping requests per address, same total
    factory = NetnsFactory()
    try:
        t_build = time.monotonic()
        lab = factory.make_lab(live=args.live, dead=args.dead)
        _spawn_responders(factory, lab.target)
        build_s = time.monotonic() - t_build
        print(f"machine: {_machine()}")
        print(
            f"lab: {len(lab.live)} live + {len(lab.dead)} dead addresses, "
            f"{lab.client} -> {lab.target} (built in {build_s:.1f} s); GC: {args.gc}\n"
        )
        c, live = lab.client, lab.live
        dead = ["--dead-ips", ",".join(lab.dead)]
        wide = ["--max-in-flight", max(2 * (args.live + args.dead), args.max_in_flight)]
        rounds = [
            # (name, spread_s, probe budget, result)
            (
                "ICMP count=1",
                0.0,
                t,
                _driver(c, "round", live, *common, *dead, "--protocols", "icmp"),
            ),
            ("ICMP count=1 + HTTP", 0.0, t, _driver(c, "round", live, *common, *dead, *wide)),
            (
                "ICMP count=3/100ms + HTTP",
                0.0,
                t + 0.2,
                _driver(c, "round", live, *common, *dead, *wide, "--count", 3),
            ),
            (
                "ICMP count=1 + HTTP, spread 1 s",
                1.0,
                t,
                _driver(c, "round", live, *common, *dead, *wide, "--spread", 1),
            ),
            (
                f"ICMP count=3 + HTTP, {args.max_in_flight} in flight",
                0.0,
                t + 0.2,
                _driver(c, "round", live, *common, *dead, "--count", 3),
            ),
        ]
        throughput = {
            "ours": _driver(c, "icmp", live, *common, "--paths", args.probes),
            "ours_default_gc": _driver(
                c, "icmp", live, *common, "--paths", args.probes, "--gc", "default"
            ),
            "bare": _driver(c, "icmp", live, *common, "--paths", args.probes, "--bare"),
            "fping": _driver(c, "fping", live, *common, "--count", burst, "--fping-period-ms", 0),
        }
        live_round = {
            "ours": _driver(c, "icmp", live, *common, "--paths", len(live), "--count", 3),
            "fping": _driver(c, "fping", live, *common, "--count", 3, "--fping-period-ms", 100),
        }
        profile = (
            _driver(c, "icmp", live, *common, "--paths", args.probes, "--profile")
            if args.profile
            else None
        )
    finally:
        factory.close()

    print(f"1. rounds over live + dead targets, 50 % dead (timeout {t:g} s, every path)")
    for name, spread_s, budget, res in rounds:
        ratio = (res["wall_s"] - spread_s) / t
        print(
            f"   {name:36} {res['paths']:5} paths, {res['max_in_flight']:4} in flight: "
            f"wall {res['wall_s']:.3f} s = {spread_s:g} s spread + {ratio:.3f} x timeout "
            f"(probe budget {budget:g} s; {res['ok']} OK, {res['wrong_count']} wrong)"
        )
        for line in res["wrong"]:
            print(f"      wrong: {line}")

    print(f"\n2. ICMP throughput: {args.probes} probes (count=1) over the live addresses")
    ours, fping = throughput["ours"], throughput["fping"]
    print(_rate_line(f"run_round (GC {args.gc})", ours))
    print(_rate_line("run_round (GC default)", throughput["ours_default_gc"]))
    print(_rate_line("naive: 20,000 tasks + limiter", throughput["bare"]))
    print(_rate_line("fping", fping))
    print(f"   fping: {fping['argv']} (exit {fping['exit']})")
    burst_wall = ours["wall_s"] / fping["wall_s"]
    burst_cpu = ours["cpu_s"] / max(fping["cpu_s"], 1e-9)
    print(f"   run_round / fping: wall {burst_wall:.2f} x, CPU {burst_cpu:.2f} x")

    print("\n3. one round over the live addresses, default ICMP (3 requests, 100 ms apart)")
    ours_r, fping_r = live_round["ours"], live_round["fping"]
    print(_rate_line("run_round", ours_r))
    print(_rate_line("fping", fping_r))
    print(f"   fping: {fping_r['argv']} (exit {fping_r['exit']})")
    round_wall = ours_r["wall_s"] / fping_r["wall_s"]
    round_cpu = ours_r["cpu_s"] / max(fping_r["cpu_s"], 1e-9)
    print(f"   run_round / fping: wall {round_wall:.2f} x, CPU {round_cpu:.2f} x")

    fast, both, spread = rounds[0][3], rounds[1][3], rounds[3][3]
    rate = ours["probes"] / ours["wall_s"]
    print("\ntargets:")
    checks = [
        ("50%-dead round, ICMP <= 1.1 x timeout", fast["wall_s"] <= 1.1 * t, fast["wall_s"] / t),
        (
            "50%-dead round, ICMP + HTTP <= 1.1 x timeout",
            both["wall_s"] <= 1.1 * t,
            both["wall_s"] / t,
        ),
        (
            "50%-dead round, 1 s spread <= spread + 1.1 x timeout",
            spread["wall_s"] <= 1.0 + 1.1 * t,
            (spread["wall_s"] - 1.0) / t,
        ),
        (">= 20,000 ICMP probes/s on one core", rate >= 20_000, rate),
        ("wall <= 1.5 x fping's, round of section 3", round_wall <= 1.5, round_wall),
        ("wall <= 1.5 x fping's, throughput burst of section 2", burst_wall <= 1.5, burst_wall),
    ]
    for label, passed, figure in checks:
        print(f"   [{'met' if passed else 'MISSED'}] {label}: {figure:.2f}")
    if profile is not None:
        print("\ncProfile of the run_round throughput run (tottime):")
        print(profile["profile"])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", type=int, default=500, help="addresses that answer")
    parser.add_argument("--dead", type=int, default=500, help="addresses dropped silently")
    parser.add_argument("--timeout", type=float, default=1.0, help="probe timeout (s)")
    parser.add_argument("--probes", type=int, default=20_000, help="ICMP probes for throughput")
    parser.add_argument("--max-in-flight", type=int, default=1024)
    parser.add_argument(
        "--gc",
        choices=("tuned", "default"),
        default="tuned",
        help="tuned: meshhealth.gc_tuning as the agent and `meshhealth probe` run it",
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per throughput figure")
    parser.add_argument("--profile", action="store_true", help="cProfile the throughput run")
    parser.add_argument(
        "--compare-with",
        metavar="DIR",
        help="before/after: run DIR's drivers (another checkout) alternately with ours",
    )
    parser.add_argument("--alternations", type=int, default=3, help="with --compare-with")
    # internal: the driver that runs inside the client namespace
    parser.add_argument(
        "--driver", choices=("round", "icmp", "fping", "responder"), help=argparse.SUPPRESS
    )
    parser.add_argument("--live-ips", default="", help=argparse.SUPPRESS)
    parser.add_argument("--dead-ips", default="", help=argparse.SUPPRESS)
    parser.add_argument("--paths", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, default=0.1, help=argparse.SUPPRESS)
    parser.add_argument("--spread", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--protocols", default="icmp,http", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fping-period-ms", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--fping-interval-ms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver_main(args)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
