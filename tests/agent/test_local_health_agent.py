"""Local health awareness in the agent (meshhealth.agent.local_health_monitor): the score
from a round, the stretched timeout, the degraded mark in the published report and the
status line."""

from __future__ import annotations

from collections.abc import Mapping

from meshhealth.agent.agent_metrics import agent_metrics
from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.local_health_monitor import LocalHealthMonitor, failing_targets
from meshhealth.agent.node_agent import NodeAgent
from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.path_tracer import PathTracer
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.reporting.publisher import WELL, LocalHealthMark, Traces, health_report
from meshhealth.cli.format_status import format_status_text
from meshhealth.documents.status import (
    NO_VERDICTS,
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    Verdicts,
    build_status_document,
)
from meshhealth.metrics import Registry
from meshhealth.model import (
    HealthReport,
    PathKey,
    PathReport,
    PathSummary,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
    TargetType,
)

NOW = 1_795_000_000.0
TARGETS = tuple(Target("c", f"n{i}", f"127.0.0.{i}", None) for i in range(1, 6))


def _round(failing: set[str], at: float = NOW) -> RoundReport:
    reports = []
    for target in TARGETS:
        for protocol in Protocol:
            key = PathKey("c", target.node, TargetType.NODE, protocol)
            ok = target.node not in failing
            result = ProbeResult(
                ProbeStatus.OK if ok else ProbeStatus.TIMEOUT, at, (0.001,) if ok else ()
            )
            reports.append(PathReport(key, target.node_ip, result))
    return RoundReport(at, 1.0, TARGETS, tuple(reports))


def test_failing_targets_leave_this_node_out() -> None:
    assert failing_targets(_round({"n1", "n2"}), ("c", "n1")) == (4, 1)
    assert failing_targets(_round(set()), None) == (5, 0)


def test_the_score_the_stretch_and_the_degraded_time() -> None:
    etcd = {"up": True}
    monitor = LocalHealthMonitor(etcd_up=lambda: etcd["up"], own=("c", "n1"), interval_s=10.0)
    assert monitor.after_round(_round(set()), now=NOW).score == 0
    assert monitor.timeout_s(1.0) == 1.0
    monitor.note_lag(0.6)  # 2 points: degraded
    state = monitor.after_round(_round(set()), now=NOW + 10)
    assert (state.score, state.multiplier, state.degraded_since) == (2, 3, NOW + 10)
    assert state.reasons == ("event loop lagging 0.6 s",)
    assert state.codes == ("loop-lag",)
    assert monitor.timeout_s(1.0) == 3.0
    etcd["up"] = False  # the lag is gone, etcd is down: still degraded, since the start
    state = monitor.after_round(_round({"n2", "n3", "n4", "n5"}), now=NOW + 20)
    assert state.score == 5 and state.degraded_since == NOW + 10
    assert state.reasons == ("4 of its 4 targets failing", "etcd unreachable")
    assert state.codes == ("targets-failing", "etcd-unreachable")
    assert monitor.document()["reason_codes"] == ["targets-failing", "etcd-unreachable"]
    assert monitor.timeout_s(1.0) == 5.0  # 6x, but at most half the interval
    etcd["up"] = True
    state = monitor.after_round(_round(set()), now=NOW + 30)
    assert state.score == 0 and not state.degraded
    doc = monitor.document()
    assert doc == {
        "score": 0, "degraded": False, "degraded_since": None, "reasons": [], "reason_codes": []
    }  # fmt: skip


async def test_fitness_changes_only_when_degraded_flips() -> None:
    """What the aggregator election waits on: `fit` and one change per flip."""
    monitor = LocalHealthMonitor(etcd_up=lambda: True, own=("c", "n1"), interval_s=10.0)
    monitor.after_round(_round(set()), now=NOW)
    assert monitor.fit and monitor.changes == 0
    failing = {"n2", "n3", "n4", "n5"}
    monitor.after_round(_round(failing), now=NOW + 10)
    assert not monitor.fit and monitor.changes == 1
    monitor.after_round(_round(failing), now=NOW + 20)  # still degraded: no change
    assert monitor.changes == 1
    assert await monitor.wait_changed(0) == 1  # a change already seen returns at once
    monitor.after_round(_round(set()), now=NOW + 30)
    assert monitor.fit and monitor.changes == 2


class _Publisher:
    def __init__(self) -> None:
        self.marks: list[LocalHealthMark] = []
        self.reports: list[HealthReport] = []

    def note_round(
        self,
        report: RoundReport,
        summaries: Mapping[PathKey, PathSummary],
        verdicts: Verdicts = NO_VERDICTS,
        local: LocalHealthMark = WELL,
    ) -> None:
        self.marks.append(local)
        self.reports.append(
            health_report(report, summaries, cluster="c", node="n1", interval_s=10.0, local=local)
        )

    def note_verdicts(self, verdicts: Verdicts) -> None:
        pass

    def note_traces(self, traces: Traces) -> None:
        pass


class _Feed:
    def publish_path(self, report: PathReport, previous: ProbeResult | None) -> None:
        pass

    def publish_round(self, report: RoundReport) -> None:
        pass


class _Indirect:
    def note_round(self, report: RoundReport) -> None:
        pass


class _Rollups(_Indirect):
    pass


def test_a_degraded_agents_report_is_marked_and_its_suspicion_waits_longer() -> None:
    verdicts = PathVerdicts(
        interval_s=10.0, failing_observers=lambda cluster, node: 0, clock=lambda: NOW
    )
    results = ProbeResults(LocalNode("c", "n1", "127.0.0.1", None), window=10, verdicts=verdicts)
    registry = Registry()
    publisher = _Publisher()
    agent = NodeAgent(
        results,
        PathHistory(),
        LocalHealthMonitor(etcd_up=lambda: True, own=("c", "n1")),
        metrics=agent_metrics(registry, source_cluster="c", source_node="n1"),
        publisher=publisher,
        indirect=_Indirect(),
        feed=_Feed(),
        summaries=SummaryFollower(lambda: ()),
        rollups=_Rollups(),
        tracer=PathTracer(),
    )
    agent.on_round(_round(set()))
    assert publisher.reports[-1].degraded_since is None
    agent.on_round(_round({"n2", "n3", "n4", "n5"}))  # every target failing at once
    mark = publisher.marks[-1]
    assert mark.score == 3 and mark.degraded_since is not None
    assert publisher.reports[-1].degraded_since == mark.degraded_since
    assert publisher.reports[-1].health_score == 3
    assert publisher.reports[-1].degraded_reasons == ("targets-failing",)
    assert verdicts.params.floor_s == 0.5 * 10.0 * 4  # stretched 4x
    assert "meshhealth_local_health_score 3" in registry.expose()


def test_the_status_says_the_node_is_degraded() -> None:
    monitor = LocalHealthMonitor(etcd_up=lambda: True, own=("c", "n1"))
    monitor.note_lag(0.8)
    monitor.after_round(_round(set()), now=NOW)
    doc = build_status_document(
        StatusInputs(
            local=LocalNode("c", "n1", "127.0.0.1", None),
            targets=TARGETS,
            summaries={},
            probe_time=NOW,
            probe_interval_s=10.0,
            etcd=EtcdState(up=True),
            round=RoundState(running=False),
            now=NOW,
            local_health=monitor.document(),
        )
    )
    assert doc["local_health"] is not None and doc["local_health"]["degraded"]
    assert doc["local_health"].get("reason_codes") == ["loop-lag"]
    text = format_status_text(doc, verbose=False)
    assert (
        "This node is degraded (loop-lag): event loop lagging 0.8 s; suspect own failures first"
        in text
    )
