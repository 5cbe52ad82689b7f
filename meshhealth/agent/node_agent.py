"""The agent's own rounds: where each probe result and each finished round go, and
the state they leave.

    agent = NodeAgent(results, history, health, metrics=..., publisher=..., indirect=...,
                      feed=..., summaries=..., rollups=..., tracer=...)
    await run_round(targets, ..., on_result=agent.on_result)  # each result, as it ends
    agent.on_round(report)                                    # the round is over
    await nursery.start(agent.run)      # between rounds: the verdicts' timer, changes

It holds what this agent learns from its own probes (the one record of results with
each path's verdict, the history, its own health), every part given at construction.
`on_round` updates the parts in a fixed order (own health first: the suspicion time
stretches with it; the feed last: its message is built from the status document);
between rounds (`run`) a changed verdict or a new cluster summary updates the metrics
and the publisher at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

import trio

from meshhealth.agent.agent_metrics import AgentMetrics
from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.local_health_monitor import LocalHealthMonitor
from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.path_tracer import PathTracer
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.reporting.publisher import LocalHealthMark, Traces
from meshhealth.documents.status import Verdicts
from meshhealth.model import PathKey, PathReport, PathSummary, ProbeResult, RoundReport

log = logging.getLogger("meshhealth.agent")


class RoundPublisher(Protocol):
    """What the agent needs of the publisher (meshhealth.agent.reporting.publisher)."""

    def note_round(
        self,
        report: RoundReport,
        summaries: Mapping[PathKey, PathSummary],
        verdicts: Verdicts = ...,
        local: LocalHealthMark = ...,
    ) -> None:
        """Remember the round; the publisher's task writes when its policy says so."""

    def note_verdicts(self, verdicts: Verdicts) -> None:
        """Paths' verdicts changed between rounds."""

    def note_traces(self, traces: Traces) -> None:
        """Where this agent's traces stopped changed."""


class RoundRollups(Protocol):
    """What the agent needs of the roll-ups (meshhealth.agent.reporting.rollup_publisher)."""

    def note_round(self, report: RoundReport) -> None:
        """Add the round's results; the roll-ups' task writes when a window closed."""


class RoundFeed(Protocol):
    """What the agent needs of the live feed (meshhealth.agent.serving.feed_server)."""

    def publish_path(self, report: PathReport, previous: ProbeResult | None) -> None:
        """One path result (already recorded) and the path's result before it."""

    def publish_round(self, report: RoundReport) -> None:
        """A finished round, after the record has it."""


class RoundIndirect(Protocol):
    """What the agent needs of indirect probes (meshhealth.agent.indirect.probes)."""

    def note_round(self, report: RoundReport) -> None:
        """Queue a check of the round's failed paths; forget those that are OK again."""


class NodeAgent:
    """This agent's results, verdicts, history and own health (see the module doc)."""

    def __init__(
        self,
        results: ProbeResults,
        history: PathHistory,
        health: LocalHealthMonitor,
        *,
        metrics: AgentMetrics,
        publisher: RoundPublisher,
        indirect: RoundIndirect,
        feed: RoundFeed,
        summaries: SummaryFollower,
        rollups: RoundRollups,
        tracer: PathTracer,
    ) -> None:
        self.results = results
        self.history = history
        self.health = health
        self.metrics = metrics
        self.publisher = publisher
        self.indirect = indirect
        self.feed = feed
        self.summaries = summaries
        self.rollups = rollups
        self.tracer = tracer
        self.last_round: RoundReport | None = None

    @property
    def verdicts(self) -> PathVerdicts:
        """Each own path's suspicion verdict (fed through the record)."""
        return self.results.verdicts

    def on_result(self, report: PathReport) -> None:
        """One path result, as its probe ends (never blocks)."""
        previous = self.results.add(report)
        self.feed.publish_path(report, previous)

    def on_round(self, report: RoundReport) -> None:
        """A finished round (never blocks)."""
        self.last_round = report
        state = self.health.after_round(report, now=time.time())
        local = LocalHealthMark(state.score, state.degraded_since, state.codes)
        self.verdicts.set_multiplier(state.multiplier)
        self.metrics.local_health_score.set(state.score)
        gone = self.results.finish_round(report)
        if gone:
            log.info("forgot %d paths of nodes that left", len(gone))
        summaries = self.results.summaries
        self.metrics.observe_round(report)
        self.metrics.sync_connectivity(report.targets, summaries, self.results.verdict_states())
        self.publisher.note_round(report, summaries, self.results.verdict_states(), local)
        self.indirect.note_round(report)
        self.history.record_round(report)
        self.history.retain_targets(report.targets)
        self.rollups.note_round(report)
        self.tracer.note_round(report, self.results.verdict_states())
        log.debug(
            "round of %d paths to %d nodes took %.3fs, %d failing",
            len(report.paths),
            len(report.targets),
            report.duration_s,
            sum(1 for p in report.paths if not p.result.ok),
        )
        self.feed.publish_round(report)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Between rounds, until cancelled: the verdicts' timer, and what follows a
        change of verdict or of the cluster summaries."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.verdicts.run)
            await nursery.start(self.tracer.run)
            nursery.start_soon(self._follow_traces)
            nursery.start_soon(self._follow_summaries)
            nursery.start_soon(self._follow_verdicts)
            task_status.started()

    async def _follow_summaries(self) -> None:
        """A summary arrived, changed or went: its metrics, and the other observers'
        failures as confirmations of suspect paths."""
        seen = 0
        while True:
            seen = await self.summaries.wait_changed(seen)
            self.metrics.sync_summaries(self.summaries.summaries())
            self.verdicts.confirm_from_observers()

    async def _follow_traces(self) -> None:
        """Where a trace stopped, or a trace forgotten: the publisher follows (etcd gets
        it with its next write)."""
        seen = 0
        while True:
            seen, stops = await self.tracer.changed(seen)
            self.publisher.note_traces(stops)

    async def _follow_verdicts(self) -> None:
        """Paths whose verdict changed between rounds (a confirmation, the timer): the
        status `nodes` and the metrics follow at once; etcd gets the new state with the
        next round."""
        while True:
            changed = await self.verdicts.changed_between_rounds()
            report = self.last_round
            if report is None:
                continue
            log.info("%d paths changed verdict between rounds", len(changed))
            verdicts = self.results.take_verdicts(changed)
            self.results.status_nodes(report.targets)
            self.metrics.sync_connectivity(report.targets, self.results.summaries, verdicts)
            self.publisher.note_verdicts(verdicts)
