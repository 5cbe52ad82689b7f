"""The agent's one record of probe results: each result is added once, as it arrives.

    results = ProbeResults(local, window=30, verdicts=verdicts)
    previous = results.add(path_report)        # as each probe ends (the round's on_result)
    gone = results.finish_round(round_report)  # once the round is over
    results.status_nodes(targets)              # the status document's `nodes`, cached
    results.summary(key)                       # one path now, the running round included

Two readers, two moments: `status` shows the state after the last finished round (the
summaries and the status `nodes` are built once per round, too costly per request:
docs/performance.md, "Agent admin API"); the live feed reads one path at a time as
results come. Each result also goes to the path's suspicion verdict (`verdicts`) at
once, but `status` shows the verdicts as they were when the round finished, or when one
changed between rounds (`take_verdicts`: a confirmation, the timer): never a verdict
that a result of the running round made beside the counts of the round before
(`unreachable` after two failures, next to `consecutive_failures: 1`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.documents.status import (
    NO_VERDICTS,
    IndirectNotes,
    LocalNode,
    NodesCache,
    NodesPart,
    Verdicts,
)
from meshhealth.model import PathKey, PathReport, PathSummary, ProbeResult, RoundReport, Target
from meshhealth.probe.stats import StatsBook


class ProbeResults:
    """One StatsBook fed result by result, and what was read from it after each round."""

    def __init__(self, local: LocalNode, *, window: int, verdicts: PathVerdicts) -> None:
        self.book = StatsBook(window)
        self.verdicts = verdicts
        self.summaries: dict[PathKey, PathSummary] = {}
        self.running_round: dict[PathKey, PathReport] = {}
        self.indirect: IndirectNotes = {}
        self.shown_verdicts: Verdicts = NO_VERDICTS  # what `status` shows (see above)
        self._nodes = NodesCache(local)

    def add(self, report: PathReport) -> ProbeResult | None:
        """Record one path result; returns the path's previous newest result."""
        self.running_round[report.path] = report
        self.verdicts.observe(report.path, ok=report.result.ok)
        return self.book.add(report.path, report.result)

    def finish_round(self, report: RoundReport) -> list[PathKey]:
        """The round is over: forget nodes that left, take the summaries, build the
        status `nodes`. Returns the paths forgotten.

        Results of the round that did not come through `add` (a round run without an
        `on_result`) are added here, so every result is in the book exactly once."""
        for path_report in report.paths:
            if self.running_round.get(path_report.path) is not path_report:
                self.book.add(path_report.path, path_report.result)
                self.verdicts.observe(path_report.path, ok=path_report.result.ok)
        self.running_round = {}
        gone = self.book.retain_targets(report.targets)
        self.verdicts.finish_round(report.targets)
        self.summaries = self.book.summaries()
        self.shown_verdicts = self.verdicts.snapshot()
        self.status_nodes(report.targets)  # before any reader
        return gone

    def set_indirect(self, notes: IndirectNotes) -> None:
        """New indirect-probe findings (a new mapping each time): the next status has
        them."""
        self.indirect = notes

    def verdict_states(self) -> Verdicts:
        """Every path's verdict now."""
        return self.verdicts.snapshot()

    def take_verdicts(self, changed: Iterable[PathKey]) -> Verdicts:
        """The `changed` paths' verdicts (changed between rounds) are shown from now on;
        what a running round's results did to others waits for its end."""
        now = self.verdicts.snapshot()
        shown = dict(self.shown_verdicts)
        for key in changed:
            if key in now:
                shown[key] = now[key]
        self.shown_verdicts = MappingProxyType(shown)
        return self.shown_verdicts

    def summary(self, key: PathKey) -> PathSummary | None:
        """One path's summary now, including a result of the running round."""
        return self.book.summary(key)

    def status_nodes(self, targets: Sequence[Target]) -> NodesPart:
        """The status document's `nodes` for `targets` and the last round's summaries
        (built once per round or probe-set change, see NodesCache)."""
        return self._nodes.get(targets, self.summaries, self.indirect, self.shown_verdicts)
