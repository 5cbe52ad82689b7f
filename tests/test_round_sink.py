"""The round sink, the one record of results and the feed hub, without sockets: each
result is recorded once, and the feed builds nothing while nobody watches."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from meshhealth.agent.agent_metrics import agent_metrics
from meshhealth.agent.membership.publisher import WELL, LocalHealthMark
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.round_sink import RoundSink
from meshhealth.agent.serving.feed_server import FeedClient, FeedHub
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
    RoundReport,
    Target,
    TargetType,
)

LOCAL = LocalNode("c1", "n1", "127.0.0.1", None)
N1 = Target("c1", "n1", "127.0.0.1")
N2 = Target("c1", "n2", "127.0.0.2")


class Rig:
    """A sink with real results, metrics and hub; a publisher that only remembers."""

    def __init__(self, window: int = 4) -> None:
        self.results = ProbeResults(LOCAL, window=window)
        self.registry = Registry()
        metrics = agent_metrics(self.registry, source_cluster="c1", source_node="n1")
        self.hub = FeedHub(self.results, self.status)
        self.status_calls = 0
        self.published: list[tuple[RoundReport, Mapping[PathKey, PathSummary]]] = []
        self.sink = RoundSink(self.results, metrics, self, self.hub)

    def note_round(
        self,
        report: RoundReport,
        summaries: Mapping[PathKey, PathSummary],
        verdicts: Verdicts = NO_VERDICTS,
        local: LocalHealthMark = WELL,
    ) -> None:
        self.published.append((report, summaries))

    def note_verdicts(self, verdicts: Verdicts) -> None:
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
            self.sink.on_result(path)
        report = RoundReport(at, 0.1, targets, tuple(paths))
        self.sink.on_round(report)
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
    assert len(rig.published) == 5
    assert "meshhealth_rounds_total 5" in rig.registry.expose()


def test_each_result_is_recorded_once_as_it_arrives() -> None:
    rig = Rig(window=10)
    paths = rig.results_of((N1, N2), at=1000.0)
    rig.sink.on_result(paths[0])
    assert rig.results.summary(paths[0].path) is not None  # readable at once (the feed)
    assert rig.results.summaries == {}  # status shows the last finished round: none yet
    for path in paths[1:]:
        rig.sink.on_result(path)
    rig.sink.on_round(RoundReport(1000.0, 0.1, (N1, N2), tuple(paths)))
    assert {s.samples for s in rig.results.summaries.values()} == {1}
    # A round reported without on_result (no feed) is recorded at its end, once.
    late = rig.results_of((N1, N2), at=1010.0, status=ProbeStatus.TIMEOUT)
    rig.sink.on_round(RoundReport(1010.0, 0.1, (N1, N2), tuple(late)))
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
    rig.sink.on_result(running[0])  # one result of the next round so far
    client = rig.hub.attach("late")
    messages = drain(client)
    assert [m["type"] for m in messages] == ["snapshot", "path"]
    assert messages[1]["changed"] == [] and messages[1]["path"]["status"] == "timeout"
    # The round ends without n2 (it left): its paths are forgotten; a newcomer now gets
    # the snapshot alone.
    rig.sink.on_round(RoundReport(1010.0, 0.1, (N1,), tuple(running[:1])))
    assert all(key.node == "n1" for key in rig.results.summaries)
    assert [m["type"] for m in drain(rig.hub.attach("later"))] == ["snapshot"]
