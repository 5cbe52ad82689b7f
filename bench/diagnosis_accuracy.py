"""How often `meshhealth diagnose` names the right culprit, how fast, and how often it
cries wolf, on a real netns lab; side by side with the newest-probe rule.

Run as root:  .venv/bin/python bench/diagnosis_accuracy.py [--runs 5] [--minutes 10]
                  [--nodes 8] [--interval 2] [--prefix mhacc]

Builds a lab with its own prefix (default `mhacc`) and always removes it. A sampler runs
inside node1's namespace and, once a second, reads the matrix from the lab's etcd once
and prints what diagnosis finds in it and what the newest-probe rule (cilium-health's:
a path is unreachable when its newest probe failed) says about the same matrix.

1. Every fault kind, --runs times (the culprit rotates over the nodes): wait until there
   are no findings, inject the fault, sample until the top finding has the expected kind
   and culprit (or --deadline passes), clear, wait until healthy again. Prints the share
   of runs whose first top finding was right, the share right within the deadline, and
   the time from fault to the right finding (median, max).
2. --minutes healthy, then --minutes with one starved agent (`lab fault starve`): false
   findings (episodes: a finding that appears; with the starved agent, one that names
   only other nodes) and samples with any, against the newest-probe rule's unreachable
   paths (cells) over the same samples.

Prints figures; asserts nothing (not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from meshhealth import defaults
from meshhealth.lab import plan as P

CLI = [sys.executable, "-m", "meshhealth"]

# (fault kind, its arguments for culprit node i of n, expected finding kinds, culprits)
Case = tuple[str, list[str], tuple[str, ...], list[str]]


def cases(run: int, n: int, has_df: bool) -> list[Case]:
    def node(k: int) -> str:
        return f"node{(k + run) % n + 1}"

    def q(name: str) -> str:
        return f"lab1/{name}"

    half = [node(k) for k in range(n // 2 - 1)]  # a minority group
    out: list[Case] = [
        ("egress-drop", [node(1)], ("egress-blocked",), [q(node(1))]),
        ("ingress-drop", [node(2)], ("ingress-blocked",), [q(node(2))]),
        ("path-drop", [node(3), node(4)], ("path",), [q(node(3)), q(node(4))]),
        ("partition", [",".join(half)], ("partition",), sorted(q(h) for h in half)),
        ("partition", [node(5)], ("node-isolated",), [q(node(5))]),
        ("endpoint-forward-drop", [node(6)], ("endpoint-down",), [q(node(6))]),
        ("kill-agent", [node(7)], ("agent-down",), [q(node(7))]),
        ("starve", [node(3)], ("agent-down", "observer-degraded"), [q(node(3))]),
    ]
    if has_df:
        out.append(("mtu", [node(2), "1400"], ("mtu-blackhole",), [q(node(2))]))
    return out


SAMPLER = r"""
import json, sys, time
import trio
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.view import matrix_view
from meshhealth.kvstore import open_etcd
from meshhealth.matrix_source import MatrixSource, read_matrix
from meshhealth.model import ProbeStatus

async def main(url, every_s):
    async with open_etcd([url], request_timeout_s=2.0, liveness=False) as etcd:
        while True:
            start = time.monotonic()
            try:
                matrix, _ = await read_matrix([MatrixSource(None, etcd)], now=time.time())
                found = diagnose(matrix_view(matrix))
                cells = [
                    ["/".join(row.source), "/".join(cell.target)]
                    for row in matrix.rows if row.probe_time is not None and not row.stale
                    for cell in row.cells
                    if any(p.status not in (ProbeStatus.OK, ProbeStatus.UNKNOWN)
                           for p in cell.paths.values())
                ]
                doc = {"t": matrix.generated_at,
                       "findings": [{"kind": f.kind.value, "nodes": ["/".join(x) for x in f.nodes]}
                                    for f in found],
                       "newest_probe": cells}
                print(json.dumps(doc), flush=True)
            except Exception as exc:
                print(json.dumps({"t": time.time(), "error": str(exc)}), flush=True)
            await trio.sleep(max(0.0, every_s - (time.monotonic() - start)))

trio.run(main, sys.argv[1], float(sys.argv[2]))
"""


@dataclass
class Sampler:
    proc: subprocess.Popen[str]

    def samples(self, until: float) -> Iterator[dict[str, Any]]:
        """Samples until the monotonic deadline `until` (one a second)."""
        assert self.proc.stdout is not None
        while time.monotonic() < until:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("sampler exited")
            doc: dict[str, Any] = json.loads(line)
            if "error" not in doc:
                yield doc


def lab(prefix: str, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        [*CLI, "lab", args[0], "--prefix", prefix, *args[1:]],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"lab {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def wait_healthy(sampler: Sampler, timeout_s: float) -> bool:
    """Until a matrix read after this call has no findings."""
    since = time.time()
    for doc in sampler.samples(time.monotonic() + timeout_s):
        if doc["t"] > since and not doc["findings"]:
            return True
    return False


@dataclass
class KindResult:
    first_right: int = 0
    settled_right: int = 0
    right: int = 0
    runs: int = 0
    times_s: list[float] = field(default_factory=list)
    firsts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    first_right: bool  # the first top finding after the fault
    settled_right: bool  # the top finding `settle_s` after the fault
    found_s: float | None  # fault -> the first sample whose top finding is right
    first: str


def run_case(
    prefix: str, sampler: Sampler, case: Case, deadline_s: float, settle_s: float
) -> Outcome:
    kind, args, want, culprits = case
    t0 = time.time()
    lab(prefix, "fault", kind, *args)
    first: str | None = None
    first_ok = False
    settled_ok: bool | None = None
    found_s: float | None = None
    try:
        for doc in sampler.samples(time.monotonic() + deadline_s):
            if doc["t"] < t0:
                continue
            top = doc["findings"][0] if doc["findings"] else None
            ok = top is not None and top["kind"] in want
            ok = ok and top is not None and sorted(top["nodes"]) == sorted(culprits)
            if top is not None and first is None:
                first = f"{top['kind']} {','.join(top['nodes'])}"
                first_ok = ok
            if ok and found_s is None:
                found_s = doc["t"] - t0
            if doc["t"] >= t0 + settle_s and settled_ok is None:
                settled_ok = ok
            if found_s is not None and settled_ok is not None:
                break
    finally:
        lab(prefix, "fault", "clear")
    return Outcome(first_ok, bool(settled_ok), found_s, first or "none")


@dataclass
class Noise:
    samples: int = 0
    diag_samples: int = 0  # samples with a (false) finding
    diag_episodes: int = 0
    rule_samples: int = 0  # samples with an unreachable path (newest-probe rule)
    rule_episodes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


def watch_noise(sampler: Sampler, minutes: float, starved: str | None) -> Noise:
    noise = Noise()
    prev_f: set[str] = set()
    prev_c: set[str] = set()

    def innocent(nodes: list[str]) -> bool:
        return starved is None or starved not in nodes

    for doc in sampler.samples(time.monotonic() + minutes * 60):
        noise.samples += 1
        found = {
            f"{f['kind']} {','.join(f['nodes'])}" for f in doc["findings"] if innocent(f["nodes"])
        }
        cells = {"->".join(c) for c in doc["newest_probe"] if innocent(c)}
        noise.diag_samples += bool(found)
        noise.rule_samples += bool(cells)
        noise.diag_episodes += len(found - prev_f)
        noise.rule_episodes += len(cells - prev_c)
        for f in found - prev_f:
            kind = f.split()[0]
            noise.kinds[kind] = noise.kinds.get(kind, 0) + 1
        prev_f, prev_c = found, cells
    return noise


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--deadline", type=float, default=60.0, help="s to wait for the finding")
    ap.add_argument("--settle", type=float, help="s after the fault to judge the top finding")
    ap.add_argument("--prefix", default="mhacc")
    ap.add_argument("--skip-noise", action="store_true")
    a = ap.parse_args()
    from meshhealth.diagnosis.view import PATH_KINDS

    has_df = "node/icmp-df" in PATH_KINDS
    # every observer has probed and published at least twice by then
    settle_s = a.settle if a.settle is not None else 3 * a.interval + defaults.PROBE_TIMEOUT_S + 2
    plan = P.make_plan(a.prefix, a.nodes, 1)
    load = os.getloadavg()[0]
    print(f"lab {a.prefix}: {a.nodes} nodes, interval {a.interval:g}s, load {load:.1f}", flush=True)
    lab(a.prefix, "up", "--nodes", str(a.nodes), "--interval", f"{a.interval:g}")
    node1 = plan.nodes[0]
    sampler_proc = subprocess.Popen(
        ["ip", "netns", "exec", node1.netns, sys.executable, "-c", SAMPLER,
         plan.clusters[0].etcd_url, "1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    sampler = Sampler(sampler_proc)
    results: dict[str, KindResult] = {}
    try:
        for run in range(a.runs):
            for case in cases(run, a.nodes, has_df):
                label = (
                    case[0] if case[0] != "partition" or "," in case[1][0] else "partition 1 node"
                )
                res = results.setdefault(label, KindResult())
                recover_s = 30.0 if case[0] != "kill-agent" else 90.0
                if not wait_healthy(sampler, recover_s):
                    print(f"  {label}: lab not healthy before run {run + 1}", flush=True)
                out = run_case(a.prefix, sampler, case, a.deadline, settle_s)
                took = out.found_s
                res.runs += 1
                res.first_right += out.first_right
                res.settled_right += out.settled_right
                res.right += took is not None
                res.firsts.append(out.first)
                if took is not None:
                    res.times_s.append(took)
                print(
                    f"  run {run + 1} {label} {' '.join(case[1])}: first {out.first}; "
                    f"at +{settle_s:g}s {'right' if out.settled_right else 'WRONG'}; "
                    f"{f'right after {took:.1f}s' if took is not None else 'never right'}; "
                    f"load {os.getloadavg()[0]:.0f}",
                    flush=True,
                )
        print(
            f"\n| fault | expected finding | top finding right at +{settle_s:g} s | "
            f"right within {a.deadline:g} s | first finding right | "
            "fault to right finding, median (max) |"
        )
        print("|---|---|---|---|---|---|")
        for case in cases(0, a.nodes, has_df):
            label = case[0] if case[0] != "partition" or "," in case[1][0] else "partition 1 node"
            r = results.get(label)
            if r is None:
                continue
            times = (
                f"{statistics.median(r.times_s):.1f} s ({max(r.times_s):.1f} s)"
                if r.times_s
                else "-"
            )
            print(
                f"| `{label}` | {' or '.join(case[2])} | {r.settled_right}/{r.runs} | "
                f"{r.right}/{r.runs} | {r.first_right}/{r.runs} | {times} |"
            )
        if not has_df:
            print("(mtu: no node/icmp-df probe in this build; not measured)")
        if not a.skip_noise:
            wait_healthy(sampler, 60.0)
            calm = watch_noise(sampler, a.minutes, None)
            starved = plan.nodes[-1].qualified
            lab(a.prefix, "fault", "starve", starved)
            try:
                busy = watch_noise(sampler, a.minutes, starved)
            finally:
                lab(a.prefix, "fault", "clear")
            load = os.getloadavg()[0]
            print(
                f"\nfalse findings over {a.minutes:g} min (one sample a second), load {load:.0f}:"
            )
            print(
                "| condition | samples | diagnose: false findings (samples with one) | "
                "newest-probe rule: unreachable paths (samples with one) |"
            )
            print("|---|---|---|---|")
            for name, n in (("healthy", calm), (f"one starved agent ({starved})", busy)):
                print(
                    f"| {name} | {n.samples} | {n.diag_episodes} ({n.diag_samples}) "
                    f"{n.kinds or ''} | {n.rule_episodes} ({n.rule_samples}) |"
                )
    finally:
        sampler_proc.terminate()
        sampler_proc.wait(timeout=10)
        lab(a.prefix, "down", check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
