"""meshhealth.probe.scheduler: the plan (pure), its timing (MockClock), real rounds.

Real rounds run against loopback responders (127.0.0.x, one shared port) and, marked
netns, against addresses inside namespaces that answer or silently drop.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import pytest
import trio
import trio.testing

from meshhealth import model
from meshhealth.netns import call_in_netns
from meshhealth.probe import scheduler
from meshhealth.probe.icmp import open_pinger
from meshhealth.probe.scheduler import (
    ICMP_DISABLED,
    OVERRAN,
    PlannedProbe,
    enumerate_paths,
    plan_round,
    round_bound_s,
    run_planned,
    run_round,
    spread_offsets,
)
from tests.plugins.netns import NetnsFactory
from tests.task_spawns import SpawnCounter

T = TypeVar("T")
ICMP = model.Protocol.ICMP
HTTP = model.Protocol.HTTP
NODE = model.TargetType.NODE
ENDPOINT = model.TargetType.ENDPOINT


def target(node: str, node_ip: str, health_ip: str | None = None) -> model.Target:
    return model.Target("c1", node, node_ip, health_ip)


# --- the plan (pure) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "protocols", "expected"),
    [
        pytest.param([], scheduler.ALL_PROTOCOLS, [], id="no-targets"),
        pytest.param(
            [target("a", "10.0.0.1")],
            scheduler.ALL_PROTOCOLS,
            [("a", NODE, ICMP, "10.0.0.1"), ("a", NODE, HTTP, "10.0.0.1")],
            id="no-health-ip",
        ),
        pytest.param(
            [target("a", "10.0.0.1", "10.1.0.1")],
            scheduler.ALL_PROTOCOLS,
            [
                ("a", NODE, ICMP, "10.0.0.1"),
                ("a", NODE, HTTP, "10.0.0.1"),
                ("a", ENDPOINT, ICMP, "10.1.0.1"),
                ("a", ENDPOINT, HTTP, "10.1.0.1"),
            ],
            id="four-paths",
        ),
        pytest.param(
            [target("b", "10.0.0.2", "10.1.0.2"), target("a", "10.0.0.1")],
            frozenset({HTTP}),
            [
                ("b", NODE, HTTP, "10.0.0.2"),
                ("b", ENDPOINT, HTTP, "10.1.0.2"),
                ("a", NODE, HTTP, "10.0.0.1"),
            ],
            id="http-only-keeps-target-order",
        ),
        pytest.param(
            [target("a", "10.0.0.1"), target("a", "10.0.0.1")],
            frozenset({ICMP}),
            [("a", NODE, ICMP, "10.0.0.1")],
            id="duplicate-target-once",
        ),
        pytest.param(
            [target("a", "10.0.0.1", "")], frozenset({ICMP}), [("a", NODE, ICMP, "10.0.0.1")]
        ),
    ],
)
def test_enumerate_paths(
    targets: list[model.Target],
    protocols: frozenset[model.Protocol],
    expected: list[tuple[str, model.TargetType, model.Protocol, str]],
) -> None:
    got = enumerate_paths(targets, protocols)
    assert [(k.node, k.target_type, k.protocol, ip) for k, ip in got] == expected
    assert all(k.cluster == "c1" for k, _ in got)


@pytest.mark.parametrize(
    ("n", "spread_s"), [(0, 1.0), (1, 0.0), (1, 2.0), (7, 0.0), (10, 1.0), (1000, 3.0)]
)
@pytest.mark.parametrize("seed", [0, 1, 42])
def test_spread_offsets_cover_window_evenly(n: int, spread_s: float, seed: int) -> None:
    offsets = spread_offsets(n, spread_s, random.Random(seed))
    assert len(offsets) == n
    assert offsets == sorted(offsets)
    assert all(0.0 <= o < spread_s or o == spread_s == 0.0 for o in offsets)
    if spread_s > 0:
        # stratified: offset i lies in its own slice [i, i+1) * spread/n
        slice_s = spread_s / n if n else 0.0
        assert all(i * slice_s <= o < (i + 1) * slice_s + 1e-12 for i, o in enumerate(offsets))


def test_spread_offsets_are_jittered_and_seeded() -> None:
    a = spread_offsets(50, 5.0, random.Random(7))
    b = spread_offsets(50, 5.0, random.Random(7))
    c = spread_offsets(50, 5.0, random.Random(8))
    assert a == b
    assert a != c
    gaps = {round(y - x, 9) for x, y in itertools.pairwise(a)}
    assert len(gaps) > 10  # not a fixed grid


def test_plan_round_shuffles_and_sets_budgets() -> None:
    targets = [target(f"n{i}", f"10.0.0.{i}", f"10.1.0.{i}") for i in range(1, 21)]
    paths = enumerate_paths(targets)
    plans = [
        plan_round(
            paths, spread_s=2.0, rng=random.Random(seed), icmp_budget_s=1.2, http_budget_s=1.0
        )
        for seed in (1, 2)
    ]
    for plan in plans:
        assert sorted((p.path, p.ip) for p in plan) == sorted(paths)
        assert [p.offset_s for p in plan] == sorted(p.offset_s for p in plan)
        assert {p.budget_s for p in plan if p.path.protocol is ICMP} == {1.2}
        assert {p.budget_s for p in plan if p.path.protocol is HTTP} == {1.0}
    assert [p.path for p in plans[0]] != [p.path for p in plans[1]]
    assert [p.path for p in plans[0]] != [k for k, _ in paths]  # shuffled


@pytest.mark.parametrize(
    ("count", "interval_s", "timeout_s", "expected"),
    [(1, 0.1, 1.0, 1.0), (3, 0.1, 1.0, 1.2), (5, 0.5, 2.0, 4.0), (0, 0.1, 1.0, 1.0)],
)
def test_icmp_budget(count: int, interval_s: float, timeout_s: float, expected: float) -> None:
    assert scheduler.icmp_budget_s(count, interval_s, timeout_s) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n_paths", "spread_s", "max_in_flight", "expected"),
    [
        (0, 1.0, 10, 0.0),
        (1, 0.0, 10, 1.2 + scheduler.DEADLINE_MARGIN_S),
        (10, 2.0, 10, 2.0 + 1.2 + scheduler.DEADLINE_MARGIN_S),
        (11, 2.0, 10, 2.0 + 2 * (1.2 + scheduler.DEADLINE_MARGIN_S)),
        (4000, 0.0, 1024, 4 * (1.2 + scheduler.DEADLINE_MARGIN_S)),
    ],
)
def test_round_bound(n_paths: int, spread_s: float, max_in_flight: int, expected: float) -> None:
    got = round_bound_s(n_paths, spread_s=spread_s, max_budget_s=1.2, max_in_flight=max_in_flight)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("timeout_s", "late_s", "expected"),
    [(1.0, 0.0, 1.0), (1.0, 0.2, 0.8), (1.0, -0.1, 1.0), (1.0, 0.5, 0.5), (1.0, 3.0, 0.5)],
)
def test_late_timeout(timeout_s: float, late_s: float, expected: float) -> None:
    assert scheduler.late_timeout_s(timeout_s, late_s) == pytest.approx(expected)


# --- timing of run_planned / run_round (MockClock, no sockets) --------------------------


def planned(node: str, offset_s: float, budget_s: float = 1.0) -> PlannedProbe:
    return PlannedProbe(model.PathKey("c1", node, NODE, HTTP), "10.0.0.1", offset_s, budget_s)


def ok_after(delays: dict[str, float]) -> scheduler.ProbeFn:
    async def probe(p: PlannedProbe, late_s: float) -> model.ProbeResult:
        await trio.sleep(delays.get(p.path.node, 0.0))
        return model.ProbeResult(model.ProbeStatus.OK, 0.0, (0.001,), 1, 1)

    return probe


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_starts_follow_offsets(mock_clock: trio.testing.MockClock) -> None:
    plan = [planned(f"n{i}", offset) for i, offset in enumerate([0.0, 0.25, 0.5, 1.75])]
    t0 = trio.current_time()
    finished: list[tuple[str, float]] = []
    reports = await run_planned(
        plan,
        ok_after({}),
        on_result=lambda r: finished.append((r.path.node, trio.current_time() - t0)),
    )
    assert [r.path.node for r in reports] == ["n0", "n1", "n2", "n3"]
    assert finished == [("n0", 0.0), ("n1", 0.25), ("n2", 0.5), ("n3", 1.75)]


async def test_max_in_flight_bounds_concurrency(mock_clock: trio.testing.MockClock) -> None:
    running = 0
    peak = 0

    async def probe(p: PlannedProbe, late_s: float) -> model.ProbeResult:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.5)
        running -= 1
        return model.ProbeResult(model.ProbeStatus.OK, 0.0, (0.5,), 1, 1)

    plan = [planned(f"n{i}", 0.0) for i in range(10)]
    t0 = trio.current_time()
    reports = await run_planned(plan, probe, max_in_flight=3)
    assert peak == 3
    assert len(reports) == 10
    # ceil(10 / 3) waves of 0.5 s
    assert trio.current_time() - t0 == pytest.approx(2.0)
    assert trio.current_time() - t0 <= round_bound_s(
        10, spread_s=0.0, max_budget_s=0.5, max_in_flight=3
    )


async def test_queueing_for_a_slot_is_not_lateness(mock_clock: trio.testing.MockClock) -> None:
    lateness: list[float] = []

    async def probe(p: PlannedProbe, late_s: float) -> model.ProbeResult:
        lateness.append(late_s)
        await trio.sleep(0.5)
        return model.ProbeResult(model.ProbeStatus.OK, 0.0, (0.5,), 1, 1)

    plan = [planned(f"n{i}", 0.0) for i in range(4)]
    await run_planned(plan, probe, max_in_flight=1)
    assert lateness == [0.0, 0.0, 0.0, 0.0]


async def test_hanging_probe_is_timed_out(mock_clock: trio.testing.MockClock) -> None:
    async def probe(p: PlannedProbe, late_s: float) -> model.ProbeResult:
        if p.path.node == "hangs":
            await trio.sleep_forever()
        return model.ProbeResult(model.ProbeStatus.OK, 0.0, (0.001,), 1, 1)

    plan = [planned("hangs", 0.0, budget_s=1.0), planned("fine", 0.1)]
    t0 = trio.current_time()
    hung, fine = await run_planned(plan, probe)
    assert trio.current_time() - t0 == pytest.approx(1.0 + scheduler.DEADLINE_MARGIN_S)
    assert hung.result.status is model.ProbeStatus.TIMEOUT
    assert hung.result.detail == OVERRAN
    assert fine.result.ok


async def test_run_planned_rejects_zero_slots() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        await run_planned([], ok_after({}), max_in_flight=0)


async def test_round_without_pinger_spreads_icmp_disabled(
    mock_clock: trio.testing.MockClock,
) -> None:
    targets = [target(f"n{i:02}", f"10.0.0.{i}", f"10.1.0.{i}") for i in range(1, 26)]
    t0 = trio.current_time()
    seen: list[float] = []
    report = await run_round(
        targets,
        pinger=None,
        protocols=frozenset({ICMP}),
        spread_s=5.0,
        rng=random.Random(3),
        on_result=lambda r: seen.append(trio.current_time() - t0),
    )
    assert len(report.paths) == 50
    assert all(p.result.status is model.ProbeStatus.ERROR for p in report.paths)
    assert {p.result.detail for p in report.paths} == {ICMP_DISABLED}
    assert {p.result.sent for p in report.paths} == {0}
    # report order is target order, not start order
    assert [p.path.node for p in report.paths[::2]] == [t.node for t in targets]
    # starts spread over [0, 5): one per 0.1 s slice
    assert len(seen) == 50
    assert seen == sorted(seen)
    assert 0.0 <= seen[0] < 0.1
    assert 4.9 <= seen[-1] < 5.0
    assert all(i * 0.1 <= s < (i + 1) * 0.1 + 1e-9 for i, s in enumerate(seen))
    assert report.duration_s == pytest.approx(seen[-1])
    assert report.targets == tuple(targets)


async def test_round_cancelled_under_mock_clock(mock_clock: trio.testing.MockClock) -> None:
    targets = [target(f"n{i}", f"10.0.0.{i}") for i in range(1, 11)]
    seen: list[model.PathReport] = []
    with trio.move_on_after(2.5) as scope:
        await run_round(
            targets,
            pinger=None,
            protocols=frozenset({ICMP}),
            spread_s=10.0,
            rng=random.Random(1),
            on_result=seen.append,
        )
    assert scope.cancelled_caught
    assert 2 <= len(seen) <= 3  # one start per 1 s slice, cancelled at 2.5 s


# --- real rounds against loopback ------------------------------------------------------


async def start_responders(nursery: trio.Nursery, hosts: list[str]) -> int:
    """Responders on every host, all on one free port (the round has one HTTP port)."""
    port: int = await nursery.start(serve_responder_on, hosts[0], 0)
    for host in hosts[1:]:
        await nursery.start(serve_responder_on, host, port)
    return port


async def serve_responder_on(host: str, port: int, *, task_status: trio.TaskStatus[int]) -> None:
    from meshhealth.probe.responder import serve_responder

    await serve_responder(
        host, port, max_connections=64, read_timeout_s=2.0, task_status=task_status
    )


async def test_http_round_on_loopback() -> None:
    # 127.0.0.2/.3 answer; 127.0.0.4 has nothing on the port: refused at once.
    targets = [
        target("up", "127.0.0.2", "127.0.0.3"),
        target("down", "127.0.0.4"),
    ]
    finished: list[model.PathReport] = []
    async with trio.open_nursery() as nursery:
        port = await start_responders(nursery, ["127.0.0.2", "127.0.0.3"])
        report = await run_round(
            targets,
            pinger=None,
            http_port=port,
            timeout_s=2.0,
            protocols=frozenset({HTTP}),
            on_result=finished.append,
        )
        nursery.cancel_scope.cancel()
    got = [(p.path.node, p.path.target_type, p.ip, p.result.status) for p in report.paths]
    assert got == [
        ("up", NODE, "127.0.0.2", model.ProbeStatus.OK),
        ("up", ENDPOINT, "127.0.0.3", model.ProbeStatus.OK),
        ("down", NODE, "127.0.0.4", model.ProbeStatus.REFUSED),
    ]
    assert sorted(finished, key=lambda r: r.ip) == sorted(report.paths, key=lambda r: r.ip)
    assert all(p.result.rtt_s is not None for p in report.paths[:2])
    assert report.duration_s < 2.0


async def test_udp_round_on_loopback() -> None:
    """The UDP echo path of each primary NodeIP, sent from this node's NodeIP (the
    responder answers registered NodeIPs only); none to a HealthIP."""
    from meshhealth.probe.udp_responder import EchoGate, serve_udp_echo

    targets = [target("up", "127.0.0.2", "127.0.0.3"), target("down", "127.0.0.4")]
    async with trio.open_nursery() as nursery:
        gate = EchoGate(trusted={"127.0.0.9"}.__contains__)
        port = await nursery.start(partial(serve_udp_echo, gate=gate), "127.0.0.2", 0)
        report = await run_round(
            targets,
            pinger=None,
            http_port=port,  # nothing listens on TCP there: HTTP is refused
            timeout_s=1.0,
            protocols=frozenset({HTTP}),
            udp_port=port,
            udp_source_ports=3,
            source_ips=["127.0.0.9", "::1"],
        )
        nursery.cancel_scope.cancel()
    udp = [(p.path.node, p.path.target_type, p.ip, p.result.status) for p in report.paths
           if p.path.protocol is model.Protocol.UDP]  # fmt: skip
    assert udp == [
        ("up", NODE, "127.0.0.2", model.ProbeStatus.OK),
        ("down", NODE, "127.0.0.4", model.ProbeStatus.REFUSED),
    ]
    ok = next(
        p.result for p in report.paths if p.ip == "127.0.0.2" and p.path.protocol.value == "udp"
    )
    assert (ok.sent, ok.received) == (3, 3)


async def test_tcp_round_on_loopback() -> None:
    """A TCP connect path per port of each primary NodeIP: open -> ok, closed -> refused."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.2", 0))
        listener.listen(16)
        open_port = listener.getsockname()[1]  # and nothing listens on 127.0.0.4:open_port
        report = await run_round(
            [target("up", "127.0.0.2", "127.0.0.3"), target("down", "127.0.0.4")],
            pinger=None,
            timeout_s=1.0,
            protocols=frozenset(),
            tcp_ports=[open_port],
        )
    got = [(p.path.node, p.path.target_type, p.path.port, p.ip, p.result.status)
           for p in report.paths]  # fmt: skip
    assert got == [
        ("up", NODE, open_port, "127.0.0.2", model.ProbeStatus.OK),
        ("down", NODE, open_port, "127.0.0.4", model.ProbeStatus.REFUSED),
    ]
    assert all(p.path.protocol is model.Protocol.TCP for p in report.paths)


def test_tcp_paths_one_per_port_node_only() -> None:
    both = target("a", "10.0.0.1", "10.1.0.1")
    tcp = model.Protocol.TCP
    got = enumerate_paths([both, both], frozenset({ICMP, tcp}), (10250, 22, 10250))
    assert [(k.target_type, k.protocol, k.port, ip) for k, ip in got] == [
        (NODE, ICMP, 0, "10.0.0.1"),
        (ENDPOINT, ICMP, 0, "10.1.0.1"),
        (NODE, tcp, 10250, "10.0.0.1"),
        (NODE, tcp, 22, "10.0.0.1"),
    ]
    assert enumerate_paths([both], frozenset({ICMP}), (22,)) == got[:2]  # TCP not asked


def test_udp_paths_are_node_only() -> None:
    both = target("a", "10.0.0.1", "10.1.0.1")
    got = enumerate_paths([both], frozenset({model.Protocol.UDP}))
    assert [(k.target_type, k.protocol, ip) for k, ip in got] == [
        (NODE, model.Protocol.UDP, "10.0.0.1")
    ]


async def test_icmp_disabled_and_http_in_one_round() -> None:
    async with trio.open_nursery() as nursery:
        port = await start_responders(nursery, ["127.0.0.5"])
        report = await run_round([target("a", "127.0.0.5")], pinger=None, http_port=port)
        nursery.cancel_scope.cancel()
    icmp, http = report.paths
    assert (icmp.path.protocol, icmp.result.status, icmp.result.detail) == (
        ICMP,
        model.ProbeStatus.ERROR,
        ICMP_DISABLED,
    )
    assert (http.path.protocol, http.result.status) == (HTTP, model.ProbeStatus.OK)


async def test_bad_address_fails_its_path_only() -> None:
    async with trio.open_nursery() as nursery:
        port = await start_responders(nursery, ["127.0.0.6"])
        report = await run_round(
            [target("bad", "not-an-ip"), target("ok", "127.0.0.6")],
            pinger=None,
            http_port=port,
            protocols=frozenset({HTTP}),
        )
        nursery.cancel_scope.cancel()
    bad, other = report.paths
    assert bad.result.status is model.ProbeStatus.ERROR
    assert "not-an-ip" in bad.result.detail
    assert other.result.status is model.ProbeStatus.OK


# --- real rounds in namespaces (live answer, dead are dropped silently) ---------------


class TaskCounter(trio.abc.Instrument):
    """Counts tasks alive (spawned and not yet exited) while installed."""

    def __init__(self) -> None:
        self.alive = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.alive += 1

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.alive -= 1


def run_in_netns(netns: str, fn: Callable[[], Awaitable[T]]) -> T:
    """trio.run(fn) in a thread inside `netns`: every socket it makes (ICMP and HTTP) is
    in that namespace. The test's own thread never changes namespace."""
    return call_in_netns(netns, lambda: trio.run(fn))


def serve_http_in(factory: NetnsFactory, netns: str) -> None:
    """/hello responders on every address of `netns` (port 4240, v4 and v6)."""
    for listen in ("0.0.0.0:4240", "[::]:4240"):  # trio's listeners are IPv6-only
        proc = factory.spawn(
            netns,
            sys.executable,
            "-c",
            "import sys; from meshhealth.cli.responder_cmd import register, run; "
            "import argparse; p = argparse.ArgumentParser(); s = p.add_subparsers(); "
            "register(s); a = p.parse_args(sys.argv[1:]); sys.exit(run(a))",
            "responder",
            "--listen",
            listen,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert b"listening" in proc.stdout.readline()
        proc.stdout.close()  # it prints nothing more


@pytest.mark.netns
def test_round_of_live_and_dead_in_namespaces(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=8, dead=40, live6=2, dead6=10)
    serve_http_in(netns_factory, lab.target)
    live = lab.live + lab.live6
    dead = lab.dead + lab.dead6
    # Live targets get a dead health endpoint and the other way round, so every target
    # type sees both outcomes.
    targets = [target(f"live{i}", ip, dead[i]) for i, ip in enumerate(live)]
    targets += [target(f"dead{i}", ip) for i, ip in enumerate(dead[len(live) :])]
    timeout_s, count, interval_s = 0.5, 2, 0.05
    finished: list[model.PathReport] = []

    async def probe_round() -> tuple[model.RoundReport, float]:
        async with open_pinger() as pinger:
            t0 = trio.current_time()
            report = await run_round(
                targets,
                pinger=pinger,
                timeout_s=timeout_s,
                icmp_count=count,
                icmp_interval_s=interval_s,
                spread_s=0.2,
                on_result=finished.append,
            )
            return report, trio.current_time() - t0

    report, wall_s = run_in_netns(lab.client, probe_round)

    assert len(report.paths) == 2 * (2 * len(live) + len(dead) - len(live))
    for p in report.paths:
        expected = model.ProbeStatus.OK if p.ip in live else model.ProbeStatus.TIMEOUT
        assert p.result.status is expected, (p.ip, p.path, p.result)
        if p.path.protocol is ICMP:
            assert p.result.sent == count
            assert p.result.received == (count if p.ip in live else 0)
    assert len(finished) == len(report.paths)
    # bound: spread + ICMP budget + margin; generous slack for a loaded CI machine
    budget_s = scheduler.icmp_budget_s(count, interval_s, timeout_s)
    assert wall_s < 0.2 + budget_s + scheduler.DEADLINE_MARGIN_S + 0.5
    assert wall_s >= timeout_s  # dead targets were really waited for


@pytest.mark.netns
def test_in_flight_bound_makes_waves(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=1, dead=30)
    targets = [target(f"d{i}", ip) for i, ip in enumerate(lab.dead)]
    peak = 0

    async def probe_round() -> tuple[model.RoundReport, float]:
        nonlocal peak
        async with open_pinger() as pinger:
            t0 = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    nonlocal peak
                    while True:
                        peak = max(peak, pinger.in_flight)
                        await trio.sleep(0.01)

                nursery.start_soon(watch)
                report = await run_round(
                    targets,
                    pinger=pinger,
                    timeout_s=0.3,
                    icmp_count=1,
                    max_in_flight=10,
                    protocols=frozenset({ICMP}),
                )
                nursery.cancel_scope.cancel()
            return report, trio.current_time() - t0

    report, wall_s = run_in_netns(lab.client, probe_round)
    assert {p.result.status for p in report.paths} == {model.ProbeStatus.TIMEOUT}
    assert peak == 10
    # 30 dead paths, 10 at a time: three waves of one timeout each
    bound = round_bound_s(30, spread_s=0.0, max_budget_s=0.3, max_in_flight=10)
    assert 3 * 0.3 <= wall_s < bound + 0.5


@pytest.mark.netns
def test_cancelled_round_leaves_nothing_behind(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=2, dead=20)
    serve_http_in(netns_factory, lab.target)
    targets = [target(f"l{i}", ip) for i, ip in enumerate(lab.live)]
    targets += [target(f"d{i}", ip) for i, ip in enumerate(lab.dead)]
    counter = TaskCounter()

    async def cancel_mid_round() -> tuple[int, int, list[model.PathReport], model.ProbeResult]:
        seen: list[model.PathReport] = []
        async with open_pinger() as pinger:
            # Warm up first: the pinger starts its own long-lived tasks on first use.
            assert (await pinger.ping(lab.live[0], count=1, timeout_s=2.0)).ok
            trio.lowlevel.add_instrument(counter)
            with trio.move_on_after(0.3) as scope:
                await run_round(targets, pinger=pinger, timeout_s=5.0, on_result=seen.append)
            trio.lowlevel.remove_instrument(counter)
            assert scope.cancelled_caught
            in_flight = pinger.in_flight
            # The pinger still works after the cancelled round.
            after = await pinger.ping(lab.live[0], count=1, timeout_s=2.0)
            return counter.alive, in_flight, seen, after

    alive, in_flight, seen, after = run_in_netns(lab.client, cancel_mid_round)
    assert alive == 0  # every task the round started has exited
    assert in_flight == 0  # no echo request left registered in the pinger
    assert {p.ip for p in seen} <= set(lab.live)  # only live ones finished in 0.3 s
    assert len(seen) == 4
    assert after.ok


@pytest.mark.netns
def test_icmp_probes_run_in_batches_not_a_task_each(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=150, dead=150)
    targets = [target(f"l{i}", ip) for i, ip in enumerate(lab.live)]
    targets += [target(f"d{i}", ip) for i, ip in enumerate(lab.dead)]
    spawns = SpawnCounter()
    finished_at: dict[str, float] = {}

    async def probe_round() -> tuple[model.RoundReport, float]:
        async with open_pinger() as pinger:
            pinger.open_socket_for(lab.live[0])  # its receiver task: not the round's
            trio.lowlevel.add_instrument(spawns)
            t0 = trio.current_time()

            def on_result(report: model.PathReport) -> None:
                finished_at[report.ip] = trio.current_time() - t0

            report = await run_round(
                targets,
                pinger=pinger,
                timeout_s=0.4,
                icmp_count=1,
                protocols=frozenset({ICMP}),
                on_result=on_result,
            )
            trio.lowlevel.remove_instrument(spawns)
            return report, trio.current_time() - t0

    report, wall_s = run_in_netns(lab.client, probe_round)
    for p in report.paths:
        expected = model.ProbeStatus.OK if p.ip in lab.live else model.ProbeStatus.TIMEOUT
        assert p.result.status is expected, (p.ip, p.result)
    # 300 probes: one task per dispatch batch (and the round's own), not one per probe
    batches = -(-len(targets) // scheduler.DISPATCH_BATCH)
    assert spawns.spawned <= batches + 2
    # a live probe's result is reported when its reply is in, not when its batch ends
    assert max(finished_at[ip] for ip in lab.live) < 0.4
    assert min(finished_at[ip] for ip in lab.dead) >= 0.4 * scheduler.MIN_TIMEOUT_FRACTION
    assert 0.4 * scheduler.MIN_TIMEOUT_FRACTION <= wall_s < 0.4 + scheduler.DEADLINE_MARGIN_S + 0.5
