"""The agent object, its one record of results and the feed hub, without sockets: each
result is recorded once, and the feed builds nothing while nobody watches."""

from __future__ import annotations

import inspect
import json
import time
import typing
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from meshhealth.agent.admin_handler import AgentAdminHandler
from meshhealth.agent.agent_metrics import agent_metrics
from meshhealth.agent.cluster_view.follower import SummaryFollower
from meshhealth.agent.indirect.probes import IndirectProbes
from meshhealth.agent.local_health_monitor import LocalHealthMonitor
from meshhealth.agent.matrix_reader import MatrixReader
from meshhealth.agent.node_agent import NodeAgent
from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.path_tracer import PathTracer
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.reporting.publisher import WELL, LocalHealthMark, Traces
from meshhealth.agent.serving.feed_server import FeedClient, FeedHub
from meshhealth.agent.status_source import StatusSource
from meshhealth.documents.status import (
    NO_VERDICTS,
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    Verdicts,
    build_status_document,
)
from meshhealth.documents.status_schema import StatusDocument
from meshhealth.metrics import Registry
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    PathKey,
    PathReport,
    PathSummary,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Reachability,
    RoundReport,
    Target,
    TargetType,
)

LOCAL = LocalNode("c1", "n1", "127.0.0.1", None)
N1 = Target("c1", "n1", "127.0.0.1")
N2 = Target("c1", "n2", "127.0.0.2")


class IndirectRounds:
    """Indirect probes that only remember the rounds they were told about."""

    def __init__(self) -> None:
        self.rounds: list[RoundReport] = []

    def note_round(self, report: RoundReport) -> None:
        self.rounds.append(report)


class RolledRounds(IndirectRounds):
    """Roll-ups that only remember the rounds they were told about."""


class Rig:
    """An agent with real results, metrics and hub; a publisher and indirect probes that
    only remember."""

    def __init__(self, window: int = 4, clock: Callable[[], float] = time.time) -> None:
        verdicts = PathVerdicts(
            interval_s=1.0, failing_observers=lambda cluster, node: 0, clock=clock
        )
        self.results = ProbeResults(LOCAL, window=window, verdicts=verdicts)
        self.registry = Registry()
        metrics = agent_metrics(self.registry, source_cluster="c1", source_node="n1")
        self.hub = FeedHub(self.results, self.status)
        self.status_calls = 0
        self.published: list[tuple[RoundReport, Mapping[PathKey, PathSummary]]] = []
        self.verdicts_noted: list[Verdicts] = []
        self.indirect = IndirectRounds()
        self.rolled = RolledRounds()
        self.agent = NodeAgent(
            self.results,
            PathHistory(),
            LocalHealthMonitor(etcd_up=lambda: True, own=("c1", "n1"), interval_s=1.0),
            metrics=metrics,
            publisher=self,
            indirect=self.indirect,
            feed=self.hub,
            summaries=SummaryFollower(lambda: ()),
            rollups=self.rolled,
            tracer=PathTracer(),
        )

    def note_round(
        self,
        report: RoundReport,
        summaries: Mapping[PathKey, PathSummary],
        verdicts: Verdicts = NO_VERDICTS,
        local: LocalHealthMark = WELL,
    ) -> None:
        self.published.append((report, summaries))

    def note_verdicts(self, verdicts: Verdicts) -> None:
        self.verdicts_noted.append(verdicts)

    def note_traces(self, traces: Traces) -> None:
        pass

    def status(self) -> StatusDocument:
        self.status_calls += 1
        return build_status_document(
            StatusInputs(
                local=LOCAL,
                targets=[N1, N2],
                summaries=self.results.summaries,
                probe_time=None,
                probe_interval_s=1.0,
                etcd=EtcdState(up=True),
                round=RoundState(running=False),
                now=1000.0,
            )
        )

    def results_of(
        self, targets: tuple[Target, ...], at: float, status: ProbeStatus = ProbeStatus.OK
    ) -> list[PathReport]:
        rtts = (1e-3,) if status is ProbeStatus.OK else ()
        result = ProbeResult(status, at, rtts_s=rtts, received=len(rtts))
        return [
            PathReport(PathKey(t.cluster, t.node, TargetType.NODE, protocol), t.node_ip, result)
            for t in targets
            for protocol in REACHABILITY_PROTOCOLS
        ]

    def round(
        self, targets: tuple[Target, ...], at: float, status: ProbeStatus = ProbeStatus.OK
    ) -> RoundReport:
        """A whole round the way the scheduler reports it: each result, then the round."""
        paths = self.results_of(targets, at, status)
        for path in paths:
            self.agent.on_result(path)
        report = RoundReport(at, 0.1, targets, tuple(paths))
        self.agent.on_round(report)
        return report


def drain(client: FeedClient) -> list[dict[str, Any]]:
    messages = []
    while (text := client.queue.pop()) is not None:
        messages.append(json.loads(text))
    return messages


KEY = PathKey("c1", "n2", TargetType.NODE, Protocol.ICMP)


def test_without_a_watcher_no_feed_message_is_built() -> None:
    rig = Rig()
    for number in range(5):
        rig.round((N1, N2), at=1000.0 + number, status=ProbeStatus.OK)
    assert rig.hub.stats.messages_built == 0
    assert rig.status_calls == 0  # not even the status document for a round message
    # ... while the one record has every result once, and everyone else got the rounds.
    summary = rig.results.summaries[KEY]
    assert summary.samples == 4  # the window, filled once per round (not twice)
    assert len(rig.published) == 5 and len(rig.indirect.rounds) == 5
    assert len(rig.rolled.rounds) == 5
    assert "meshhealth_rounds_total 5" in rig.registry.expose()


def test_each_result_is_recorded_once_as_it_arrives() -> None:
    rig = Rig(window=10)
    paths = rig.results_of((N1, N2), at=1000.0)
    rig.agent.on_result(paths[0])
    assert rig.results.summary(paths[0].path) is not None  # readable at once (the feed)
    assert rig.results.summaries == {}  # status shows the last finished round: none yet
    for path in paths[1:]:
        rig.agent.on_result(path)
    rig.agent.on_round(RoundReport(1000.0, 0.1, (N1, N2), tuple(paths)))
    assert {s.samples for s in rig.results.summaries.values()} == {1}
    # A round reported without on_result (no feed) is recorded at its end, once.
    late = rig.results_of((N1, N2), at=1010.0, status=ProbeStatus.TIMEOUT)
    rig.agent.on_round(RoundReport(1010.0, 0.1, (N1, N2), tuple(late)))
    summary = rig.results.summaries[KEY]
    assert (summary.samples, summary.loss, summary.consecutive_failures) == (2, 0.5, 1)


def test_a_watcher_gets_window_stats_with_the_newest_result_and_changes() -> None:
    rig = Rig()
    rig.round((N1, N2), at=1000.0)
    client = rig.hub.attach("test")
    assert [m["type"] for m in drain(client)] == ["snapshot"]  # between rounds: no paths
    rig.round((N1, N2), at=1010.0, status=ProbeStatus.TIMEOUT)
    messages = drain(client)
    paths = [m for m in messages if m["type"] == "path"]
    assert len(paths) == 4 and messages[-1]["type"] == "round"
    (n2_icmp,) = [m for m in paths if (m["node"], m["protocol"]) == ("n2", "icmp")]
    doc = n2_icmp["path"]
    assert (doc["status"], doc["loss"], doc["samples"]) == ("timeout", 0.5, 2)
    assert n2_icmp["changed"] == ["status", "rtt_bucket"]
    seqs = [m["seq"] for m in messages]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert rig.hub.stats.messages_built == 1 + 4 + 1  # snapshot, paths, round


def test_a_newcomer_mid_round_gets_the_running_rounds_paths() -> None:
    rig = Rig()
    rig.round((N1, N2), at=1000.0)
    running = rig.results_of((N2,), at=1010.0, status=ProbeStatus.TIMEOUT)
    rig.agent.on_result(running[0])  # one result of the next round so far
    client = rig.hub.attach("late")
    messages = drain(client)
    assert [m["type"] for m in messages] == ["snapshot", "path"]
    assert messages[1]["changed"] == [] and messages[1]["path"]["status"] == "timeout"
    # The round ends without n2 (it left): its paths are forgotten; a newcomer now gets
    # the snapshot alone.
    rig.agent.on_round(RoundReport(1010.0, 0.1, (N1,), tuple(running[:1])))
    assert all(key.node == "n1" for key in rig.results.summaries)
    assert [m["type"] for m in drain(rig.hub.attach("later"))] == ["snapshot"]


@pytest.mark.parametrize("part", [NodeAgent, StatusSource, AgentAdminHandler, MatrixReader])
def test_every_part_is_given_at_construction(part: type) -> None:
    """The agent's parts are built in one place with all they need: no argument has a
    default, none may be None (nothing is set on them afterwards)."""
    parameters = list(inspect.signature(part).parameters.values())
    hints = typing.get_type_hints(part.__init__)
    assert parameters
    for parameter in parameters:
        assert parameter.default is inspect.Parameter.empty, parameter
        assert type(None) not in typing.get_args(hints[parameter.name]), parameter


@pytest.mark.parametrize(
    ("part", "sources"),
    [
        (ProbeResults, {"verdicts"}),
        (PathVerdicts, {"failing_observers"}),
        (LocalHealthMonitor, {"etcd_up", "own"}),
        (IndirectProbes, {"read_matrix"}),
    ],
)
def test_the_parts_need_their_sources(part: type, sources: set[str]) -> None:
    """What the agent's parts read from the others is required and never None."""
    hints = typing.get_type_hints(part.__init__)
    assert sources <= set(hints)
    for name in sources:
        assert type(None) not in typing.get_args(hints[name]), name
        assert inspect.signature(part).parameters[name].default is inspect.Parameter.empty


async def test_a_verdict_changed_between_rounds_reaches_the_publisher_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rig = Rig(clock=trio.current_time)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.agent.run)
        rig.round((N1, N2), at=1000.0, status=ProbeStatus.TIMEOUT)
        rig.round((N1, N2), at=1001.0, status=ProbeStatus.TIMEOUT)
        assert rig.verdicts_noted == []  # a round's verdicts go with the round
        # Two failures and no one to confirm (2 nodes): the timer settles the paths
        # when the floor has passed, between rounds.
        await trio.sleep(rig.results.verdicts.params.floor_s)
        await trio.testing.wait_all_tasks_blocked()
        assert rig.verdicts_noted, "the publisher was not told"
        assert rig.verdicts_noted[-1][KEY].verdict is Reachability.UNREACHABLE
        nursery.cancel_scope.cancel()


def test_status_shows_the_verdicts_of_the_finished_round_beside_its_counts() -> None:
    """A result of the running round can turn its path unreachable at once (the feed and
    the suspicion see it), but `status` shows each round's verdicts with that round's
    counts: never `unreachable` beside the `consecutive_failures` of the round before."""
    now = [1000.0]
    rig = Rig(clock=lambda: now[0])

    def shown_icmp() -> tuple[str, int]:
        node = next(n for n in rig.results.status_nodes((N1, N2)).nodes if n["name"] == "n2")
        path = node["host"]["primary_address"]["icmp"]
        return path["state"], path["consecutive_failures"]

    rig.round((N1, N2), at=now[0], status=ProbeStatus.TIMEOUT)
    assert shown_icmp() == ("suspect", 1)
    now[0] += rig.results.verdicts.params.ceiling_s + 1.0  # the suspicion time is up
    second = rig.results_of((N1, N2), at=now[0], status=ProbeStatus.TIMEOUT)
    for path in second:
        rig.agent.on_result(path)
    assert rig.results.verdict_states()[KEY].verdict is Reachability.UNREACHABLE  # at once
    assert shown_icmp() == ("suspect", 1)  # the finished round's verdict and counts
    rig.agent.on_round(RoundReport(now[0], 0.1, (N1, N2), tuple(second)))
    assert shown_icmp() == ("unreachable", 2)
