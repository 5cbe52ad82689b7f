"""The round sink: what happens to each probe result and to each finished round.

    sink = RoundSink(results, metrics, publisher, feed)
    await run_round(targets, ..., on_result=sink.on_result)   # each result, as it ends
    sink.on_round(report)                                     # the round is over

Each result goes into the one record of results (ProbeResults) and, when someone
watches, onto the live feed. Each finished round updates, in this order: the record
(nodes that left are forgotten, the summaries taken), the metrics (round duration,
RTTs, the status gauges), the publisher (it decides whether etcd needs a write) and
the feed (the `round` message, built from the status document, which has the round by
then). With a PathHistory, the round also goes into its one-minute summaries (the web
page's sparklines). With indirect probes, the round's failed paths are handed to them
(meshhealth.agent.indirect_probes: they ask peers to probe those targets now). Paths
whose suspicion verdict changes between rounds (`on_verdicts`, called by
meshhealth.agent.path_verdicts) update the status and the metrics at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from meshhealth.agent.agent_metrics import AgentMetrics
from meshhealth.agent.local_health_monitor import LocalHealthMonitor
from meshhealth.agent.membership.publisher import WELL, LocalHealthMark
from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.documents.status import Verdicts
from meshhealth.model import PathKey, PathReport, PathSummary, ProbeResult, RoundReport

log = logging.getLogger("meshhealth.agent")


class RoundPublisher(Protocol):
    """What the sink needs of the publisher (meshhealth.agent.membership.publisher)."""

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


class RoundFeed(Protocol):
    """What the sink needs of the live feed (meshhealth.agent.serving.feed_server)."""

    def publish_path(self, report: PathReport, previous: ProbeResult | None) -> None:
        """One path result (already recorded) and the path's result before it."""

    def publish_round(self, report: RoundReport) -> None:
        """A finished round, after the record has it."""


class RoundIndirect(Protocol):
    """What the sink needs of indirect probes (meshhealth.agent.indirect_probes)."""

    def note_round(self, report: RoundReport) -> None:
        """Queue a check of the round's failed paths; forget those that are OK again."""


class RoundSink:
    """Takes the prober's results and rounds to the record, metrics, etcd and the feed."""

    def __init__(
        self,
        results: ProbeResults,
        metrics: AgentMetrics,
        publisher: RoundPublisher,
        feed: RoundFeed,
        history: PathHistory | None = None,
        *,
        indirect: RoundIndirect | None = None,
    ) -> None:
        self.results = results
        self.metrics = metrics
        self.publisher = publisher
        self.feed = feed
        self.history = history
        self.indirect = indirect
        self.last_round: RoundReport | None = None
        self.local_health: LocalHealthMonitor | None = None  # the agent's own health

    def on_result(self, report: PathReport) -> None:
        """One path result, as its probe ends (never blocks)."""
        previous = self.results.add(report)
        self.feed.publish_path(report, previous)

    def on_round(self, report: RoundReport) -> None:
        """A finished round (never blocks)."""
        self.last_round = report
        local = WELL
        if self.local_health is not None:
            state = self.local_health.after_round(report, now=time.time())
            local = LocalHealthMark(state.score, state.degraded_since, state.codes)
            if self.results.verdicts is not None:
                self.results.verdicts.set_multiplier(state.multiplier)
            self.metrics.local_health_score.set(state.score)
        gone = self.results.finish_round(report)
        if gone:
            log.info("forgot %d paths of nodes that left", len(gone))
        summaries = self.results.summaries
        self.metrics.observe_round(report)
        self.metrics.sync_connectivity(report.targets, summaries, self.results.verdict_states())
        self.publisher.note_round(report, summaries, self.results.verdict_states(), local)
        if self.indirect is not None:
            self.indirect.note_round(report)
        if self.history is not None:
            self.history.record_round(report)
            self.history.retain_targets(report.targets)
        log.debug(
            "round of %d paths to %d nodes took %.3fs, %d failing",
            len(report.paths),
            len(report.targets),
            report.duration_s,
            sum(1 for p in report.paths if not p.result.ok),
        )
        self.feed.publish_round(report)

    def on_verdicts(self, changed: Sequence[PathKey]) -> None:
        """Paths whose suspicion verdict changed between rounds (a confirmation, the
        timer): the status `nodes` and the metrics follow at once (never blocks); etcd
        gets the new state with the next round."""
        report = self.last_round
        if report is None:
            return
        log.info("%d paths changed verdict between rounds", len(changed))
        self.results.status_nodes(report.targets)
        verdicts = self.results.verdict_states()
        self.metrics.sync_connectivity(report.targets, self.results.summaries, verdicts)
        self.publisher.note_verdicts(verdicts)
