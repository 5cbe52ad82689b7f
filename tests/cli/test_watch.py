"""`meshhealth watch`: state and rendering (pure), then the command against real agents:
plain mode with an agent restart, --once, --etcd, and the full-screen view under tmux."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from rich.text import Text

from meshhealth.cli.watch_feed import feed_target
from meshhealth.cli.watch_state import (
    PATH_NAMES,
    PathView,
    WatchState,
    aggregate_paths,
    apply_feed_message,
    apply_health_reports,
)
from meshhealth.cli.watch_view import change_line, frame_text, path_colour, sparkline
from meshhealth.documents.feed import path_changes, path_message
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    build_status_document,
)
from meshhealth.kvstore import open_etcd
from meshhealth.model import (
    HealthReport,
    PathHealth,
    PathKey,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Target,
    TargetHealth,
    TargetType,
    path_label,
)
from meshhealth.probe.stats import StatsBook
from meshhealth.wire import keys
from meshhealth.wire.health import encode_health_report
from tests.agent_cluster import AgentCluster, wait_for
from tests.etcd_helpers import registration
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

T0 = 1_795_000_000.0  # 2026-11-18T11:06:40Z


def snapshot(nodes: list[str]) -> dict[str, Any]:
    status = build_status_document(
        StatusInputs(
            local=LocalNode("lab1", "node1", "10.0.0.1", "10.1.0.1"),
            targets=[
                Target("lab1", n, f"10.0.0.{i + 1}", f"10.1.0.{i + 1}") for i, n in enumerate(nodes)
            ],
            summaries={},
            probe_time=T0,
            probe_interval_s=10.0,
            etcd=EtcdState(up=True),
            round=RoundState(running=False),
            now=T0,
        )
    )
    return {"v": 1, "type": "snapshot", "seq": 0, "status": status}


def path_msg(book: StatsBook, node: str, status: ProbeStatus, at: float) -> dict[str, Any]:
    """The `path` message the agent's feed sends for this result (its window in `book`)."""
    key = PathKey("lab1", node, TargetType.ENDPOINT, Protocol.HTTP)
    rtts = (0.001,) if status is ProbeStatus.OK else ()
    result = ProbeResult(status, at, rtts_s=rtts, received=len(rtts))
    previous = book.add(key, result)
    summary = book.summary(key)
    assert summary is not None
    return dict(path_message(key, "10.1.0.2", summary, path_changes(previous, result), len(book)))


def test_feed_messages_make_changes_history_and_lines() -> None:
    state = WatchState(source="test")
    assert apply_feed_message(state, snapshot(["node1", "node2"]), now=T0) == []  # unknown
    assert set(state.nodes) == {("lab1", "node1"), ("lab1", "node2")}
    book = StatsBook(window=10)
    first = apply_feed_message(state, path_msg(book, "node2", ProbeStatus.OK, T0), now=T0)
    assert [change_line(c) for c in first] == [
        "2026-11-18T11:06:40Z lab1/node2 endpoint/http Not probed yet -> OK"
    ]
    assert apply_feed_message(state, path_msg(book, "node2", ProbeStatus.OK, T0 + 10), now=T0) == []
    down = apply_feed_message(state, path_msg(book, "node2", ProbeStatus.TIMEOUT, T0 + 20), now=T0)
    assert [change_line(c) for c in down] == [
        "2026-11-18T11:07:00Z lab1/node2 endpoint/http OK -> Connection timed out"
    ]
    path = state.nodes[("lab1", "node2")].paths["endpoint/http"]
    assert list(path.history) == [0.001, 0.001, None]
    assert state.health == (0, 2)
    # A reconnect's snapshot does not repeat points; a round drops nodes that left.
    apply_feed_message(state, snapshot(["node1", "node2"]), now=T0)
    assert len(state.nodes[("lab1", "node2")].paths["endpoint/http"].history) == 3
    round_message = {"v": 1, "type": "round", "seq": 9, "probe_time": None, "nodes": []}
    round_message["nodes"] = [{"cluster": "lab1", "name": "node1", "is_local": True}]
    apply_feed_message(state, round_message, now=T0)
    assert set(state.nodes) == {("lab1", "node1")}
    apply_feed_message(state, {"v": 1, "type": "lagging", "reason": "x"}, now=T0)
    assert "dropped" in state.note


def test_a_failing_l4_path_is_a_change_not_an_outage() -> None:
    """node/udp and node/tcp:PORT messages show as changes, but a node whose only failing
    paths are those stays reachable (as in `meshhealth status`)."""
    state = WatchState(source="test")
    apply_feed_message(state, snapshot(["node1", "node2"]), now=T0)
    book = StatsBook(window=10)
    apply_feed_message(state, path_msg(book, "node2", ProbeStatus.OK, T0), now=T0)
    before = state.nodes[("lab1", "node2")].state
    for key in (
        PathKey("lab1", "node2", TargetType.NODE, Protocol.UDP),
        PathKey("lab1", "node2", TargetType.NODE, Protocol.TCP, port=10250),
    ):
        previous = book.add(key, ProbeResult(ProbeStatus.TIMEOUT, T0, sent=4))
        summary = book.summary(key)
        assert summary is not None
        result = ProbeResult(ProbeStatus.TIMEOUT, T0, sent=4)
        message = path_message(key, "10.0.0.2", summary, path_changes(previous, result), 1)
        changes = apply_feed_message(state, dict(message), now=T0)
        assert [c.path for c in changes] == [path_label(key)]
    node2 = state.nodes[("lab1", "node2")]
    assert {"endpoint/http", "node/udp", "node/tcp:10250"} <= set(node2.paths)
    assert before != "unreachable"
    assert node2.state == before  # the failing L4 paths change nothing


def test_a_restarted_agent_forgetting_a_path_is_dated_when_seen() -> None:
    state = WatchState(source="test")
    apply_feed_message(state, snapshot(["node1", "node2"]), now=T0)
    apply_feed_message(state, path_msg(StatsBook(10), "node2", ProbeStatus.OK, T0), now=T0)
    changes = apply_feed_message(state, snapshot(["node1", "node2"]), now=T0 + 30)
    assert [change_line(c) for c in changes] == [
        "2026-11-18T11:07:10Z lab1/node2 endpoint/http OK -> Not probed yet"
    ]


@pytest.mark.parametrize(
    "message", [{"v": 2, "type": "snapshot"}, {"v": 1, "type": "path", "cluster": "c"}]
)
def test_unreadable_messages_are_value_errors(message: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        apply_feed_message(WatchState(source="t"), message, now=T0)


@pytest.mark.parametrize(
    ("points", "line"),
    [
        ([], ""),
        ([1.0, 1.0], "▅▅"),
        ([1.0, 2.0, None, 1.5], "▁█×▅"),
    ],
)
def test_sparkline(points: list[float | None], line: str) -> None:
    assert sparkline(points) == line


@pytest.mark.parametrize(
    ("status", "loss", "age_s", "colour"),
    [
        ("ok", 0.0, 1.0, "green"),
        ("ok", 0.1, 1.0, "yellow"),
        ("ok", 0.0, 100.0, "yellow"),  # stale: past the matrix's bound
        ("timeout", 1.0, 1.0, "red"),
        ("unknown", 0.0, 1.0, "grey50"),
    ],
)
def test_path_colour(status: str, loss: float, age_s: float, colour: str) -> None:
    path = PathView(status=status, text="", loss=loss, last_probed=T0 - age_s)
    assert path_colour(path, now=T0, interval_s=10.0) == colour


@pytest.mark.parametrize(
    ("host", "url", "env", "expected"),
    [
        (None, None, {}, ("unix:///run/meshhealth/health.feed.sock", None)),
        ("unix:///tmp/n1.sock", None, {}, ("unix:///tmp/n1.feed.sock", None)),
        (None, None, {"MESHHEALTH_SOCKET": "/tmp/x.sock"}, ("unix:///tmp/x.feed.sock", None)),
        (None, "ws://127.0.0.1:4241", {}, ("ws://127.0.0.1:4241", 4241)),
    ],
)
def test_feed_target(
    host: str | None, url: str | None, env: dict[str, str], expected: tuple[str, int | None]
) -> None:
    target = feed_target(host, url, env)
    assert (target.label, target.port) == expected
    assert target.resource == "/v1/feed"


@pytest.mark.parametrize("url", ["http://h:1", "ws://h", "h:1"])
def test_feed_target_rejects(url: str) -> None:
    with pytest.raises(ValueError):
        feed_target(None, url, {})


def report(node: str, endpoint_http: ProbeStatus, at: float) -> HealthReport:
    paths = {
        name: PathHealth(ProbeStatus.OK, 0.001, 0.0)
        for name in ("node/icmp", "node/http", "endpoint/icmp")
    }
    paths["endpoint/http"] = PathHealth(endpoint_http, None, 0.5)
    others = [t for t in ("node1", "node2", "node3") if t != node]
    return HealthReport(
        node, "lab1", at, 10.0, tuple(TargetHealth("lab1", t, paths) for t in others)
    )


def test_health_reports_aggregate_per_target_path() -> None:
    reports = [report("node1", ProbeStatus.OK, T0), report("node2", ProbeStatus.TIMEOUT, T0 + 1)]
    views = aggregate_paths(reports)
    node3 = views[("lab1", "node3")]
    assert node3["endpoint/http"].text == "Connection timed out (1/2)"
    assert node3["node/icmp"].text == "OK"
    state = WatchState(source="etcd")
    changes = apply_health_reports(state, reports, now=T0 + 2)
    assert "lab1/node3 endpoint/http Connection timed out (1/2)" in [
        change_line(c).split(" ", 1)[1] for c in changes
    ]
    assert state.health == (1, 3)  # node1 is only reported by node2, which sees it fine


def test_frame_text_shows_header_rows_and_disconnection() -> None:
    state = WatchState(source="unix:///tmp/n1.feed.sock")
    apply_feed_message(state, snapshot(["node1", "node2"]), now=T0)
    book = StatsBook(window=10)
    apply_feed_message(state, path_msg(book, "node2", ProbeStatus.TIMEOUT, T0), now=T0)
    state.connection = "disconnected"
    text = frame_text(state, now=T0 + 5, width=120)
    assert "disconnected, retrying…" in text
    assert "Cluster health: 0/2 reachable" in text
    assert re.search(r"node2 .*timeout", text)
    state.mode = "matrix"
    assert "matrix: loading…; press m for the list" in frame_text(state, now=T0, width=120)
    state.matrix_note = "matrix: a TCP feed carries only what its node sees"
    assert "only what its node sees; press m" in frame_text(state, now=T0, width=120)


def test_the_banner_shows_the_cluster_verdict_and_the_findings() -> None:
    """The agent's status carries its cluster's summary: `watch` shows the verdict of
    every observer and one banner line per finding; a round without findings clears it."""
    from meshhealth.documents.feed import round_message
    from tests import status_stories

    status = build_status_document(status_stories.agent_down_summary())
    state = WatchState(source="unix:///tmp/n1.feed.sock")
    apply_feed_message(state, {"v": 1, "type": "snapshot", "seq": 0, "status": status}, now=T0)
    text = frame_text(state, now=T0, width=200)
    # one label, one meaning: the cluster's verdict as `status` prints it, and this
    # node's own probes labelled apart
    assert (
        "Cluster health: 2/3 reachable (2 observers each), 1 unreachable   "
        "(aggregator lab1/node2, updated" in text
    )
    assert "Direct targets: 1/3 reachable" in text
    assert "Finding:   agent-down lab1/node3 (confidence 0.75): its NodeIP answers" in text
    assert "Cluster health lab2" not in text  # no summary: nothing to claim for it
    healthy = build_status_document(status_stories.healthy())
    apply_feed_message(state, dict(round_message(healthy, 1.0, seq=1)), now=T0 + 10)
    assert "Finding:" not in frame_text(state, now=T0 + 10, width=200)


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_banner_wraps_a_finding_at_words_with_kind_and_culprit_first(width: int) -> None:
    from tests import status_stories

    status = build_status_document(status_stories.agent_down_summary())
    state = WatchState(source="unix:///tmp/n1.feed.sock")
    apply_feed_message(state, {"v": 1, "type": "snapshot", "seq": 0, "status": status}, now=T0)
    lines = frame_text(state, now=T0, width=width).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Finding:"))
    assert lines[start].startswith("Finding:   agent-down lab1/node3 (confidence 0.75):")
    banner = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * len("Finding:   ")):
            break
        banner.append(line)
    assert all(len(line) <= width for line in banner)
    text = " ".join(line.strip() for line in banner)
    # every word whole, in order: no word was broken across lines
    assert " ".join(text.split()) == (
        "Finding: agent-down lab1/node3 (confidence 0.75): its NodeIP answers ICMP but "
        "HTTP to its agent fails from 2 of 2 observers; its report is stale"
    )


def test_the_banner_says_a_cluster_of_one() -> None:
    from tests import status_stories

    status = build_status_document(status_stories.one_node())
    state = WatchState(source="unix:///tmp/n1.feed.sock")
    apply_feed_message(state, {"v": 1, "type": "snapshot", "seq": 0, "status": status}, now=T0)
    text = frame_text(state, now=T0, width=200)
    assert "Cluster health: 1 node, no other node to probe or to observe it" in text
    assert "Cluster health: 0/1" not in text


# --- the command, against real agents -------------------------------------------------


def watch_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshhealth", "watch", *args]


def run_watch(*args: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        watch_argv(*args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO_ROOT,
        check=False,
    )


def wait_healthy(agent: Any, names: list[str]) -> None:
    def fetch() -> str:
        return run_watch("-H", f"unix://{agent.socket}", "--once").stdout

    wait_for(fetch, lambda text: f"{len(names)}/{len(names)} reachable" in text, 20, what="healthy")


@pytest.mark.slow
def test_plain_once_and_reconnect_after_agent_restart(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        n1 = cluster.start("n1")
        cluster.start("n2")
        wait_healthy(n1, ["n1", "n2"])
        once = run_watch("-H", f"unix://{n1.socket}", "--once")
        assert once.returncode == 0, once.stderr
        # this node's own count, labelled apart once the cluster's verdict is there
        assert re.search(r"^(Cluster health|Direct targets): 2/2 reachable", once.stdout, re.M)
        assert re.search(r"● n2 +OK", once.stdout)
        out_path = tmp_path / "plain.txt"
        with open(out_path, "w") as out:
            proc = subprocess.Popen(
                watch_argv("-H", f"unix://{n1.socket}"), stdout=out, cwd=REPO_ROOT
            )
        try:
            wait_for(out_path.read_text, lambda t: "c1/n2 node/http OK" in t, 10, what="plain")
            cluster.stop(n1)
            wait_for(out_path.read_text, lambda t: "disconnected from" in t, 10, what="lost")
            cluster.spawn(n1)
            wait_for(
                out_path.read_text, lambda t: t.count("connected to unix://") == 2, 15, what="back"
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        lines = out_path.read_text().splitlines()
        stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")
        assert [line for line in lines if not stamp.match(line)] == []


def test_once_without_agent_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_watch("-H", f"unix://{tmp_path}/none.sock", "--once")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "none.feed.sock" in done.stderr and "no such file" in done.stderr


async def test_etcd_once_list_and_matrix(etcd_server: EtcdServer) -> None:
    now = time.time()
    async with open_etcd(etcd_server.endpoint) as etcd:
        for node, status in (("node1", ProbeStatus.OK), ("node2", ProbeStatus.TIMEOUT)):
            value = encode_health_report(report(node, status, now))
            await etcd.put(keys.health_key("lab1", node), value)
            for key, value in registration("lab1", node):
                await etcd.put(key, value)
    listing = await trio.run_process(
        watch_argv("--etcd", etcd_server.endpoint, "--once"), capture_stdout=True, cwd=REPO_ROOT
    )
    text = listing.stdout.decode()
    # the aggregator's rule, from every report: node2 fails its targets' endpoints while
    # node1 reaches node2's: node2's failures are its own, node1 has no other observer
    assert (
        "Cluster health: 2/3 reachable (1 observer each), 1 unknown; lab1/node2 cannot "
        "reach out (egress-blocked)" in " ".join(text.split())
    )
    assert "Finding:   egress-blocked lab1/node2" in text
    assert "node3" in text
    matrix = await trio.run_process(
        watch_argv("--etcd", etcd_server.endpoint, "--once", "--view", "matrix"),
        capture_stdout=True,
        cwd=REPO_ROOT,
    )
    text = matrix.stdout.decode()
    assert "matrix" in text
    assert "✗" in text and "●" in text  # node2 -> node3 fails, node1 -> node3 is fine


# --- the full-screen view under tmux ------------------------------------------------------


class Tmux:
    """A private tmux server (`-L mhtest<pid>`), killed by its socket name at the end."""

    def __init__(self) -> None:
        self.name = f"mhtest{os.getpid()}"

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.name, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "w")

    def wait_screen(self, accept: Any, what: str, timeout_s: float = 15.0) -> tuple[str, float]:
        return wait_for(self.screen, accept, timeout_s, what=what, interval_s=0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.name, "kill-server"], capture_output=True, check=False)


def _row(screen: str, node: str) -> str:
    for line in screen.splitlines():
        if re.search(rf"[●◐✗·] {node}\b", line):
            return line
    return ""


@pytest.mark.slow
def test_live_view_under_tmux(tmp_path: Path, etcd_server: EtcdServer) -> None:
    tmux = Tmux()
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        try:
            n1 = cluster.start("n1")
            n2 = cluster.start("n2")
            cluster.start("n3")
            env = f"PATH={os.environ.get('PATH', '')} TERM=xterm-256color"
            tmux(
                "new-session",
                "-d",
                "-s",
                "w",
                "-x",
                "160",
                "-y",
                "40",
                "-c",
                str(REPO_ROOT),
                f"env -i {env} bash --norc --noprofile",
            )
            command = " ".join(watch_argv("-H", f"unix://{n1.socket}"))
            tmux("send-keys", "-t", "w", f"{command}; echo WATCH-EXIT=$?", "Enter")
            tmux.wait_screen(
                lambda s: "3/3 reachable" in s and all(_row(s, n) for n in ("n1", "n2", "n3")),
                "all nodes shown",
                timeout_s=20,
            )
            n2.signal(signal.SIGSTOP)
            fault, failed_s = tmux.wait_screen(
                lambda s: "timeout" in _row(s, "n2"), "n2 failing", timeout_s=1.0 + 0.5 + 3.0
            )
            (tmp_path / "fault-screen.txt").write_text(fault)
            assert "2/3 reachable" in fault
            n2.signal(signal.SIGCONT)
            tmux.wait_screen(lambda s: "3/3 reachable" in s, "n2 recovered", timeout_s=10)
            tmux("send-keys", "-t", "w", "m")  # the agent's matrix: a row per node
            tmux.wait_screen(
                lambda s: (
                    "each row is what that node sees" in s
                    and all(re.search(rf"^ *{n} +● +● +●", s, re.M) for n in ("n1", "n2", "n3"))
                ),
                "the agent's matrix",
                timeout_s=10,
            )
            tmux("send-keys", "-t", "w", "q")
            tmux.wait_screen(lambda s: "WATCH-EXIT=0" in s, "q quits", timeout_s=5)
            tmux(
                "send-keys",
                "-t",
                "w",
                "stty -a | grep -o -- '-*icanon\\|-*echo ' ; echo STTY",
                "Enter",
            )
            screen, _ = tmux.wait_screen(lambda s: "\nSTTY" in s, "stty", timeout_s=5)
            modes = screen.split("STTY", 1)[1]
            assert "-icanon" not in modes and "icanon" in modes  # the terminal is restored
            print(f"\nn2 shown failing {failed_s:.2f}s after SIGSTOP\n{fault}")
        finally:
            tmux.close()


def test_under_subset_probing_the_header_counts_direct_targets() -> None:
    from meshhealth.model import PlanInfo

    state = WatchState(source="test")
    message = snapshot(["node1", "node2"])
    apply_feed_message(state, message, now=T0)
    assert "Cluster health: " in frame_text(state, now=T0, width=120)
    plan = PlanInfo(1, 5, 6, full_mesh=False, full_mesh_max_nodes=16, nodes=99)
    message["status"]["probe_plan"] = {
        "epoch": plan.epoch, "k": plan.k, "rotation_rounds": 6, "full_mesh": False,
        "full_mesh_max_nodes": 16, "nodes": 99, "targets": 5, "subset": plan.subset,
    }  # fmt: skip
    apply_feed_message(state, message, now=T0)
    text = frame_text(state, now=T0, width=120)
    assert "Direct targets: " in text and "Cluster health: " not in text


def test_list_and_matrix_in_natural_order() -> None:
    """node2 before node10 in the list and (built from etcd) in the matrix."""
    from meshhealth.documents.matrix import build_matrix
    from meshhealth.documents.matrix_json import matrix_document

    names = ("node1", "node10", "node2", "node9")
    paths = {name: PathHealth(ProbeStatus.OK, 0.001, 0.0) for name in PATH_NAMES}
    reports = [
        HealthReport(n, "lab1", T0, 10.0, tuple(TargetHealth("lab1", t, paths) for t in names))
        for n in names
    ]
    state = WatchState(source="etcd")
    matrix = matrix_document(build_matrix(reports, now=T0 + 1))
    apply_health_reports(state, reports, now=T0 + 1, matrix=matrix)
    text = frame_text(state, now=T0 + 1, width=200)
    listed = re.findall(r"^ ● (node\d+) ", text, flags=re.MULTILINE)
    assert listed == ["node1", "node2", "node9", "node10"]
    state.mode = "matrix"
    text = frame_text(state, now=T0 + 1, width=200)
    assert re.search(r"source\s+node1\s+node2\s+node9\s+node10", text)
    rows = re.findall(r"^ (node\d+)\s+●", text, flags=re.MULTILINE)
    assert rows == ["node1", "node2", "node9", "node10"]


def test_matrix_view_draws_the_coverage_line_as_a_warning_only_below_plan() -> None:
    from meshhealth.cli.watch_view import matrix_view
    from meshhealth.documents.matrix import build_matrix
    from meshhealth.documents.matrix_json import matrix_document
    from tests import matrix_stories

    for reports, style in (
        (matrix_stories.subset_healthy, "grey50"),
        (matrix_stories.subset, "yellow"),
    ):
        state = WatchState(source="etcd")
        state.matrix = matrix_document(build_matrix(reports(), now=matrix_stories.NOW))
        drawn = [r for r in matrix_view(state) if isinstance(r, Text)]
        coverage = [t for t in drawn if t.plain.startswith("Coverage:")]
        assert len(coverage) == 1
        assert coverage[0].style == style
