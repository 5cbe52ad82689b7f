"""The agent's round loop: a round every interval, or at once when someone asks.

It owns no sockets: it is given a function that runs one round (the scheduler, bound to
the pinger and options) and a function that chooses a round's targets from the wall
clock time the round starts at (the probe plan's epoch: ProbeTargets.for_round), so it
is tested with trio's MockClock and plain coroutines. The plan a round followed goes
into its report (`RoundReport.plan`).

How far the rounds are (`RoundProgress`: started, finished, running, the last report) is
an object of its own, given to the loop: the status document reads it, and the status
is built before the loop, whose rounds feed it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import trio

from meshhealth.agent.membership.probe_targets import RoundTargets
from meshhealth.model import RoundReport, Target

log = logging.getLogger(__name__)

RunRound = Callable[[Sequence[Target]], Awaitable[RoundReport]]
# The round's targets, from the unix time it starts at: a plan's choice, or a plain list.
ProbeSet = Callable[[float], RoundTargets | Sequence[Target]]


@dataclass(slots=True)
class RoundProgress:
    """How far the loop is; written by the loop only."""

    rounds_started: int = 0
    rounds_finished: int = 0  # failed rounds included
    round_errors: int = 0
    running: bool = False
    last_report: RoundReport | None = None  # of the last round that did not fail


class ProberLoop:
    """Runs rounds at a fixed rate; `probe_now()` runs one now and returns its report.

    A round that is already running when `probe_now()` is called does not count: the
    caller gets a round that *started* after its request (it may have changed the
    network a moment ago). Requests that arrive together share one round.
    """

    def __init__(
        self,
        progress: RoundProgress,
        *,
        probe_set: ProbeSet,
        run_round: RunRound,
        interval_s: float,
        on_round: Callable[[RoundReport], None] = lambda report: None,
        wall_clock: Callable[[], float] = time.time,
        on_lag: Callable[[float], None] = lambda lag_s: None,
    ) -> None:
        self._probe_set = probe_set
        self._wall_clock = wall_clock
        self._run_round = run_round
        self.interval_s = interval_s
        self._on_round = on_round
        self._on_lag = on_lag  # how late the loop woke up for a round (local health)
        self._wake = trio.Event()
        self._round_finished = trio.Event()
        self.progress = progress
        self._wanted = 0  # the round number some probe_now() caller waits for

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Loop until cancelled. The first round starts at once."""
        task_status.started()
        next_due = trio.current_time()
        while True:
            with trio.move_on_at(next_due) as waited:
                await self._wake.wait()
            if waited.cancelled_caught:  # woke up for the due time: how late?
                self._on_lag(max(0.0, trio.current_time() - next_due))
            self._wake = trio.Event()
            started = trio.current_time()
            await self._one_round()
            next_due = started + self.interval_s
            if self._wanted > self.progress.rounds_started:
                next_due = -math.inf  # someone asked during the round: go again now

    async def _one_round(self) -> None:
        self.progress.rounds_started += 1
        self.progress.running = True
        try:
            # The targets are chosen once, at the start: a round that runs across an
            # epoch boundary probes (and reports) the epoch it started in.
            chosen = self._probe_set(self._wall_clock())
            if isinstance(chosen, RoundTargets):
                report = await self._run_round(list(chosen.targets))
                report = dataclasses.replace(report, plan=chosen.plan)
            else:
                report = await self._run_round(list(chosen))
        except Exception:  # a bug in a round must not stop probing; it is logged and counted
            self.progress.round_errors += 1
            log.exception("probe round %d failed", self.progress.rounds_started)
        else:
            self.progress.last_report = report
            self._on_round(report)
        finally:
            self.progress.running = False
            self.progress.rounds_finished += 1
            finished, self._round_finished = self._round_finished, trio.Event()
            finished.set()

    async def probe_now(self) -> RoundReport | None:
        """Ask for a round now and wait until it is done; returns its report."""
        wanted = self.progress.rounds_started + 1
        self._wanted = max(self._wanted, wanted)
        self._wake.set()
        while self.progress.rounds_finished < wanted:
            await self._round_finished.wait()
        return self.progress.last_report
