"""The agent's traces (agent/path_tracer.py): a NodeIP ICMP path newly unreachable gets
one trace, within the limits, off the round; where it stopped is kept while the path
stays unreachable and reaches the health report (publisher.health_report)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from meshhealth.agent.path_tracer import PathTracer, TraceLimiter, trace_stop
from meshhealth.agent.reporting.publisher import change_signature, health_report
from meshhealth.documents.status import Verdicts
from meshhealth.model import PathKey, Protocol, RoundReport, Target, TargetType, TraceStop
from tests.plugins.netns import require_root

NOW = 1_700_000_000.0
T2 = Target("c", "n2", "10.0.0.2")
T3 = Target("c", "n3", "10.0.0.3")
ROUND = RoundReport(NOW, 0.1, (T2, T3))


@dataclass(frozen=True)
class Verdict:
    verdict: str
    since: float | None = NOW


def verdicts(**states: str) -> Verdicts:
    """node name -> its NodeIP ICMP path's verdict."""
    return {
        PathKey("c", node, TargetType.NODE, Protocol.ICMP): Verdict(state)
        for node, state in states.items()
    }


@pytest.mark.parametrize(
    ("times", "allowed"),
    [
        ([("n2", 0.0), ("n2", 299.0), ("n2", 300.0)], [True, False, True]),  # per target
        ([(f"n{i}", float(i)) for i in range(7)], [True] * 6 + [False]),  # 6 a minute
        ([(f"n{i}", float(i)) for i in range(6)] + [("n9", 60.0)], [True] * 7),  # a minute on
        ([("n2", 0.0), ("n3", 1.0), ("n2", 2.0)], [True, True, False]),
    ],
)
def test_limiter(times: list[tuple[str, float]], allowed: list[bool]) -> None:
    limiter = TraceLimiter(per_target_s=300.0, per_minute=6)
    assert [limiter.allow(("c", node), NOW + t) for node, t in times] == allowed


async def test_an_unreachable_path_is_traced_once_kept_and_dropped_when_it_recovers() -> None:
    traced: list[str] = []
    release = trio.Event()

    async def fake(ip: str) -> TraceStop:
        traced.append(ip)
        await release.wait()
        return TraceStop("10.77.0.254", 1, NOW)

    tracer = PathTracer(tracer=fake, clock=lambda: NOW)
    async with trio.open_nursery() as nursery:
        await nursery.start(tracer.run)
        tracer.note_round(ROUND, verdicts(n2="suspect", n3="ok"))
        await trio.testing.wait_all_tasks_blocked()
        assert traced == []  # suspect is not unreachable
        tracer.note_round(ROUND, verdicts(n2="unreachable", n3="ok"))
        await trio.testing.wait_all_tasks_blocked()
        assert traced == ["10.0.0.2"]
        # the round never waits for the trace; another round queues no second trace
        tracer.note_round(ROUND, verdicts(n2="unreachable", n3="ok"))
        release.set()
        version, stops = await tracer.changed(0)
        assert stops == {("c", "n2"): TraceStop("10.77.0.254", 1, NOW)}
        tracer.note_round(ROUND, verdicts(n2="unreachable", n3="ok"))
        await trio.testing.wait_all_tasks_blocked()
        assert traced == ["10.0.0.2"] and tracer.traces == 1
        tracer.note_round(ROUND, verdicts(n2="ok", n3="ok"))  # recovered: dropped
        version, stops = await tracer.changed(version)
        assert stops == {}
        nursery.cancel_scope.cancel()


async def test_a_trace_that_ends_after_recovery_is_not_kept_and_a_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = trio.Event()

    async def fake(ip: str) -> TraceStop:
        await release.wait()
        if ip == "10.0.0.3":
            raise OSError("Network is unreachable")
        return TraceStop(None, 0, NOW)

    tracer = PathTracer(tracer=fake, clock=lambda: NOW)
    async with trio.open_nursery() as nursery:
        await nursery.start(tracer.run)
        tracer.note_round(ROUND, verdicts(n2="unreachable", n3="unreachable"))
        tracer.note_round(ROUND, verdicts(n2="ok", n3="unreachable"))
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert tracer.traces == 2
        assert tracer.stops() == {}
        assert "trace to c/n3 (10.0.0.3) failed: Network is unreachable" in caplog.text
        nursery.cancel_scope.cancel()


def test_the_report_carries_the_stops_and_a_new_one_is_a_change() -> None:
    stop = TraceStop("10.77.0.254", 1, NOW)
    plain = health_report(ROUND, {}, cluster="c", node="n1", interval_s=10.0)
    traced = health_report(
        ROUND, {}, cluster="c", node="n1", interval_s=10.0, traces={("c", "n3"): stop}
    )
    assert [t.trace for t in plain.targets] == [None, None]
    assert [t.trace for t in traced.targets] == [None, stop]
    assert change_signature(traced) != change_signature(plain)


async def test_a_real_trace_to_loopback_stops_at_the_target() -> None:
    require_root()
    stop = await trace_stop("127.0.0.1")
    assert (stop.address, stop.hop) == ("127.0.0.1", 1)
