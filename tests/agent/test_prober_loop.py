"""The round loop: fixed rate, probe-now semantics, errors, cancellation (MockClock)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from meshhealth.agent.prober_loop import ProberLoop, RoundProgress
from meshhealth.model import RoundReport, Target

TARGET = Target("c1", "n1", "127.0.0.1")


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class FakeRounds:
    """Records when rounds start; each round takes `duration_s` of (mock) time."""

    def __init__(self, duration_s: float = 1.0, fail_on: set[int] | None = None) -> None:
        self.duration_s = duration_s
        self.starts: list[float] = []
        self.fail_on = fail_on or set()

    async def __call__(self, targets: Sequence[Target]) -> RoundReport:
        self.starts.append(trio.current_time())
        number = len(self.starts)
        await trio.sleep(self.duration_s)
        if number in self.fail_on:
            raise RuntimeError(f"round {number} broke")
        return RoundReport(
            started_at=float(number), duration_s=self.duration_s, targets=tuple(targets)
        )


async def test_rounds_run_at_a_fixed_rate(autojump_clock: trio.testing.MockClock) -> None:
    rounds = FakeRounds(duration_s=1.0)
    seen: list[RoundReport] = []
    loop = ProberLoop(
        RoundProgress(),
        probe_set=lambda now: [TARGET],
        run_round=rounds,
        interval_s=10.0,
        on_round=seen.append,
    )
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(loop.run)
        await trio.sleep(35)
        nursery.cancel_scope.cancel()
    assert [round(t - start, 6) for t in rounds.starts] == [0, 10, 20, 30]
    assert [r.targets for r in seen] == [(TARGET,)] * 4


async def test_slow_round_is_followed_at_once_not_overlapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rounds = FakeRounds(duration_s=15.0)
    loop = ProberLoop(
        RoundProgress(), probe_set=lambda now: [TARGET], run_round=rounds, interval_s=10.0
    )
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(loop.run)
        await trio.sleep(31)
        nursery.cancel_scope.cancel()
    assert [round(t - start, 6) for t in rounds.starts] == [0, 15, 30]


async def test_probe_now_when_idle_runs_a_round_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rounds = FakeRounds(duration_s=1.0)
    loop = ProberLoop(
        RoundProgress(), probe_set=lambda now: [TARGET], run_round=rounds, interval_s=100.0
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        await trio.sleep(5)  # first round done at t=1, next due at t=100
        asked = trio.current_time()
        report = await loop.probe_now()
        assert trio.current_time() - asked == pytest.approx(1.0)
        nursery.cancel_scope.cancel()
    assert report is not None and report.started_at == 2.0
    assert loop.progress.rounds_finished == 2


async def test_probe_now_during_a_round_waits_for_a_fresh_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rounds = FakeRounds(duration_s=4.0)
    loop = ProberLoop(
        RoundProgress(), probe_set=lambda now: [TARGET], run_round=rounds, interval_s=100.0
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        await trio.sleep(1)  # round 1 runs from 0 to 4
        assert loop.progress.running
        results: list[RoundReport | None] = []

        async def ask() -> None:
            results.append(await loop.probe_now())

        async with trio.open_nursery() as askers:
            for _ in range(3):
                askers.start_soon(ask)
        # all three share round 2 (4 .. 8), none gets round 1's stale result
        assert trio.current_time() == pytest.approx(8.0)
        nursery.cancel_scope.cancel()
    assert [r.started_at for r in results if r] == [2.0, 2.0, 2.0]
    assert len(rounds.starts) == 2


async def test_a_failing_round_is_counted_and_probing_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rounds = FakeRounds(duration_s=1.0, fail_on={1})
    loop = ProberLoop(
        RoundProgress(), probe_set=lambda now: [TARGET], run_round=rounds, interval_s=10.0
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        await trio.sleep(15)
        nursery.cancel_scope.cancel()
    assert loop.progress.round_errors == 1
    assert loop.progress.rounds_finished == 2
    assert loop.progress.last_report is not None and loop.progress.last_report.started_at == 2.0


async def test_cancel_during_a_round_stops_it(autojump_clock: trio.testing.MockClock) -> None:
    rounds = FakeRounds(duration_s=50.0)
    loop = ProberLoop(
        RoundProgress(), probe_set=lambda now: [TARGET], run_round=rounds, interval_s=10.0
    )
    with trio.move_on_after(5) as scope:
        await loop.run()
    assert scope.cancelled_caught
    assert loop.progress.rounds_started == 1 and loop.progress.last_report is None
    assert not loop.progress.running


async def test_probe_set_is_read_each_round(autojump_clock: trio.testing.MockClock) -> None:
    current: list[Target] = [TARGET]
    seen: list[RoundReport] = []
    loop = ProberLoop(
        RoundProgress(),
        probe_set=lambda now: current,
        run_round=FakeRounds(0.5),
        interval_s=10.0,
        on_round=seen.append,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        await trio.sleep(5)
        current = [TARGET, Target("c1", "n2", "127.0.0.2")]
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert [len(r.targets) for r in seen] == [1, 2]


async def test_a_round_follows_the_plan_of_the_epoch_it_starts_in(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The targets are chosen once, from the wall clock at the round's start; a round
    that lasts past an epoch boundary still reports the epoch it started in."""
    from meshhealth.agent.membership.probe_targets import PlanSettings, choose_targets

    nodes = [Target("c1", f"n{i:02d}", f"127.0.1.{i + 1}") for i in range(40)]
    settings = PlanSettings(interval_s=10.0, k=3)  # 60 s epochs
    wall = {"now": 59.5}  # half a second before the first boundary
    asked: list[float] = []

    def probe_set(now: float) -> object:
        asked.append(now)
        return choose_targets(nodes[0], nodes, now, settings)

    seen: list[RoundReport] = []
    loop = ProberLoop(
        RoundProgress(),
        probe_set=probe_set,  # type: ignore[arg-type]
        run_round=FakeRounds(duration_s=2.0),
        interval_s=10.0,
        on_round=seen.append,
        wall_clock=lambda: wall["now"],
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        await trio.sleep(5.0)  # the first round (2 s) is over
        wall["now"] = 69.5
        await trio.sleep(10.0)  # the second round, in epoch 1, is over
        nursery.cancel_scope.cancel()
    assert asked[:2] == [59.5, 69.5]
    first, second = seen[:2]
    assert first.plan is not None and second.plan is not None
    assert (first.plan.epoch, second.plan.epoch) == (0, 1)
    assert first.targets == choose_targets(nodes[0], nodes, 59.9, settings).targets
    assert len(first.targets) == 4 and nodes[0] in first.targets
    assert second.targets == choose_targets(nodes[0], nodes, 60.0, settings).targets
