"""`meshhealth watch`'s sources: every node's reports followed in etcd (list + watch,
invalid values counted and reported), and the matrix read from an agent's admin API."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import cast

import pytest
import trio

from meshhealth.kvstore import Etcd, EventKind, WatchEvent, open_etcd
from meshhealth.matrix_source import HealthReports, InvalidValue
from meshhealth.model import HealthReport, PathHealth, ProbeStatus, TargetHealth
from meshhealth.wire import keys
from meshhealth.wire.health import encode_health_report
from tests.agent_cluster import AgentCluster, wait_for
from tests.cli.test_watch import run_watch, wait_healthy, watch_argv
from tests.etcd_helpers import registration
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

GARBAGE = b"\x81\xa1v\x63"  # msgpack {"v": 99}: a map, but no health report


def report(node: str, status: ProbeStatus = ProbeStatus.OK, at: float | None = None) -> bytes:
    paths = {
        name: PathHealth(status, 0.001 if status is ProbeStatus.OK else None, 0.0)
        for name in ("node/icmp", "node/http", "endpoint/icmp", "endpoint/http")
    }
    targets = tuple(TargetHealth("lab1", t, paths) for t in ("node1", "node2") if t != node)
    when = time.time() if at is None else at
    return encode_health_report(HealthReport(node, "lab1", when, 10.0, targets))


async def register(etcd: Etcd, *nodes: str) -> None:
    for node in nodes:
        for key, value in registration("lab1", node):
            await etcd.put(key, value)


def put(key: str, value: bytes, revision: int) -> WatchEvent:
    return WatchEvent(EventKind.PUT, key, value, revision)


def test_watched_events_keep_the_reports_and_count_each_bad_value_once() -> None:
    told: list[InvalidValue] = []
    reports = HealthReports(cast(Etcd, None), on_invalid=told.append)
    one, two = keys.health_key("lab1", "node1"), keys.health_key("lab1", "node2")
    steps: list[tuple[list[WatchEvent], set[str], int]] = [
        ([put(one, report("node1"), 5)], {"node1"}, 0),
        ([put(two, GARBAGE, 6)], {"node1"}, 1),
        ([put(two, GARBAGE, 6)], {"node1"}, 1),  # the same value again: told once
        ([put(two, GARBAGE, 7)], {"node1"}, 2),  # a new bad value: told again
        ([put(two, report("node2"), 8)], {"node1", "node2"}, 2),
        ([put(one, GARBAGE, 9)], {"node2"}, 3),  # a bad value hides the old report
        ([WatchEvent(EventKind.DELETE, two, b"", 10)], set(), 3),
    ]
    for events, nodes, invalid in steps:
        reports.apply(events)
        assert {r.node for r in reports.reports()} == nodes
        assert reports.invalid_values == invalid == len(told)
    assert str(told[0]).startswith(f"{two}: ")


async def test_follow_lists_then_watches_etcd(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint) as etcd:
        await etcd.put(keys.health_key("lab1", "node1"), report("node1"))
        await etcd.put(keys.health_key("lab1", "bad"), GARBAGE)
        changed = trio.Event()
        told: list[str] = []

        def on_change() -> None:
            nonlocal changed
            changed.set()

        reports = HealthReports(etcd, on_change=on_change, on_invalid=lambda v: told.append(v.key))

        async def next_change() -> set[str]:
            nonlocal changed
            with trio.fail_after(10):
                await changed.wait()
            changed = trio.Event()
            return {r.node for r in reports.reports()}

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reports.follow)
            assert await next_change() == {"node1"}
            assert told == [keys.health_key("lab1", "bad")]
            await etcd.put(keys.health_key("lab1", "node2"), report("node2"))
            assert await next_change() == {"node1", "node2"}
            await etcd.delete(keys.health_key("lab1", "node1"))
            assert await next_change() == {"node2"}
            assert reports.invalid_values == 1 and reports.resyncs == 0
            nursery.cancel_scope.cancel()


def test_etcd_once_reports_an_invalid_entry_in_one_line(etcd_server: EtcdServer) -> None:
    async def seed() -> None:
        async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
            await etcd.put(keys.health_key("lab1", "node1"), report("node1"))
            await etcd.put(keys.health_key("lab1", "node2"), report("node2"))
            await etcd.put(keys.health_key("lab1", "bad"), GARBAGE)
            await register(etcd, "node1", "node2")

    trio.run(seed)
    done = run_watch("--etcd", etcd_server.endpoint, "--once")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"meshhealth watch: skipped invalid health entry {keys.health_key('lab1', 'bad')}: "
    )
    assert "1 invalid entry skipped" in done.stdout
    assert "Cluster health: 2/2 reachable" in done.stdout


def test_etcd_plain_follows_changes_and_says_what_it_skips(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    out_path = tmp_path / "plain.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            watch_argv("--etcd", etcd_server.endpoint, "--plain"), stdout=out, cwd=REPO_ROOT
        )
    try:
        wait_for(out_path.read_text, lambda t: "reading " in t, 10, what="connected")

        async def put_garbage() -> None:
            async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
                await register(etcd, "node1", "node2")
                await etcd.put(keys.health_key("lab1", "node1"), GARBAGE)

        trio.run(put_garbage)
        wait_for(
            out_path.read_text,
            lambda t: "skipping invalid health entry meshhealth/state/health/v1/lab1/node1" in t,
            10,
            what="the empty value reported",
        )

        async def publish() -> None:
            async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
                await etcd.put(keys.health_key("lab1", "node1"), report("node1"))
                await etcd.put(
                    keys.health_key("lab1", "node2"), report("node2", ProbeStatus.TIMEOUT)
                )

        trio.run(publish)
        text, _ = wait_for(
            out_path.read_text,
            lambda t: "lab1/node1 node/icmp Connection timed out" in t,
            10,
            what="a change from a watched report",
        )
        assert "lab1/node2 node/icmp OK" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_matrix_view_comes_from_the_agent(tmp_path: Path, etcd_server: EtcdServer) -> None:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        n1 = cluster.start("n1")
        cluster.start("n2")
        wait_healthy(n1, ["n1", "n2"])

        def matrix() -> str:
            done = run_watch("-H", f"unix://{n1.socket}", "--once", "--view", "matrix")
            assert done.returncode == 0, done.stderr
            return done.stdout

        def both_rows(text: str) -> bool:
            return all(re.search(rf"^ *{n} +● +●$", text, re.M) for n in ("n1", "n2"))

        text, _ = wait_for(matrix, both_rows, 20, what="both rows of the agent's matrix")
        assert "each row is what that node sees of each column" in text
    gone = run_watch("-H", f"unix://{n1.socket}", "--once", "--view", "matrix")
    assert gone.returncode == 2 and gone.stderr.count("\n") == 1


def test_etcd_once_ignores_the_reports_of_unregistered_nodes(etcd_server: EtcdServer) -> None:
    async def seed() -> None:
        async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
            await etcd.put(keys.health_key("lab1", "node1"), report("node1"))
            await etcd.put(keys.health_key("lab1", "node2"), report("node2"))
            await etcd.put(keys.health_key("lab1", "forged"), report("forged"))
            await register(etcd, "node1", "node2")

    trio.run(seed)
    done = run_watch("--etcd", etcd_server.endpoint, "--once")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "meshhealth watch: ignored 1 health reports from unregistered nodes: lab1/forged"
    ]
    assert "Cluster health: 2/2 reachable" in done.stdout
    assert "forged" not in done.stdout


def test_etcd_follow_ignores_a_report_until_its_node_registers(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    out_path = tmp_path / "plain.txt"

    async def seed() -> None:
        async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
            await register(etcd, "node1")
            await etcd.put(keys.health_key("lab1", "node1"), report("node1"))
            await etcd.put(keys.health_key("lab1", "node2"), report("node2", ProbeStatus.TIMEOUT))

    trio.run(seed)
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            watch_argv("--etcd", etcd_server.endpoint, "--plain"), stdout=out, cwd=REPO_ROOT
        )
    try:
        text, _ = wait_for(
            out_path.read_text,
            lambda t: "ignored 1 health reports from unregistered nodes: lab1/node2" in t,
            10,
            what="node2's report ignored",
        )
        assert "Connection timed out" not in text  # node2's failures are not shown

        async def register_node2() -> None:
            async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
                await register(etcd, "node2")

        trio.run(register_node2)
        wait_for(
            out_path.read_text,
            lambda t: "lab1/node1 node/icmp Connection timed out" in t,
            10,
            what="node2's report counted once node2 registered",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
