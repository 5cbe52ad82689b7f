"""`--log-format json`: one JSON object per line with stable field names, and the events
an operator greps for (findings opened and closed, etcd up and down, the health
endpoint's restarts) with their fields; first the formatter alone, then real agents."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshhealth.log_format import BASE_FIELDS, configure_logging, event_fields
from tests.agent_cluster import AgentCluster, AgentProcess, wait_for
from tests.plugins.etcd_server import EtcdServer


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:], root.level = handlers, level


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_have_the_stable_fields_then_the_events(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("json", level="info", cluster="c1", node="n1", stream=stream)
    log = logging.getLogger("meshhealth.test")
    log.debug("not at info")
    log.info("plain %s", "line \x1b")
    log.warning(
        "finding opened: path c1/a,c1/b",
        extra=event_fields("finding-opened", kind="path", nodes=["c1/a", "c1/b"], msg="no"),
    )
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    plain, event, failed = lines_of(stream)
    assert list(plain) == list(BASE_FIELDS)
    assert plain["msg"] == "plain line \x1b" and plain["level"] == "info"
    assert plain["logger"] == "meshhealth.test" and (plain["cluster"], plain["node"]) == (
        "c1",
        "n1",
    )
    assert plain["ts"].endswith("Z") and len(plain["ts"]) == len("2026-11-27T05:39:16.123Z")
    # event fields follow, and never replace the stable ones
    assert event["event"] == "finding-opened" and event["nodes"] == ["c1/a", "c1/b"]
    assert event["msg"] == "finding opened: path c1/a,c1/b" and event["level"] == "warning"
    assert failed["level"] == "error" and "ValueError: boom" in failed["exc"]


def test_text_lines_stay_as_they_were(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("text", level="debug", cluster="c1", node="n1", stream=stream)
    logging.getLogger("meshhealth.test").info("hello", extra=event_fields("etcd-up", etcd="x"))
    line = stream.getvalue()
    assert line.endswith(" INFO c1/n1 meshhealth.test: hello\n"), line
    assert "etcd-up" not in line


def test_a_bad_log_format_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "meshhealth", "agent", "--log-format", "xml"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "--log-format: invalid choice: 'xml'" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "meshhealth", "agent", "--node-ip", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "MESHHEALTH_LOG_FORMAT": "xml"},
    )
    assert done.returncode == 2
    assert done.stderr == (
        "meshhealth agent: MESHHEALTH_LOG_FORMAT: 'xml' is not one of text, json\n"
    ), done.stderr


def events_in(agent: AgentProcess) -> list[dict[str, Any]]:
    """Every JSON line of the agent's log (all of them must be JSON)."""
    return [json.loads(line) for line in agent.log_text().splitlines() if line.strip()]


def named(agent: AgentProcess, event: str, **fields: object) -> list[dict[str, Any]]:
    return [
        line
        for line in events_in(agent)
        if line.get("event") == event and all(line.get(k) == v for k, v in fields.items())
    ]


def named_anywhere(agents: list[AgentProcess], event: str, **fields: object) -> list[Any]:
    """The lines of `event` in every agent's log: the aggregator claim may move (an agent
    that turns unwell on a loaded machine hands it over), and the timeline with it."""
    return [line for agent in agents for line in named(agent, event, **fields)]


def test_real_agents_log_their_events_as_json(tmp_path: Path, etcd_server: EtcdServer) -> None:
    with AgentCluster(
        tmp_path, etcd_server.endpoint, interval_s=1.0, lease_ttl_s=90,
        extra_args=("--log-format", "json"),
    ) as cluster:  # fmt: skip
        agents = [cluster.start(name, wait=False) for name in ("n1", "n2", "n3")]
        for agent in agents:
            cluster.wait_admin(agent, timeout_s=60)
        for agent in agents:
            wait_for(lambda a=agent: named(a, "endpoint-ready"), bool, 60, what="endpoint up")
            assert named(agent, "etcd-up", etcd=etcd_server.endpoint)
        docs, _ = wait_for(
            lambda: [a.status_json() for a in agents],
            lambda docs: all(
                d["cluster_health"] and d["cluster_health"][0]["source"] == "summary" for d in docs
            ),
            60,
            what="every agent reads the cluster summary",
        )
        assert docs

        # The health endpoint dies: the supervisor says why and that it is back.
        first_agent = agents[0]
        os.kill(first_agent.responder_children()[0], signal.SIGKILL)
        restarting, _ = wait_for(
            lambda: named(first_agent, "endpoint-restarting"), bool, 60, what="endpoint restart"
        )
        assert restarting[0]["restarts"] == 1 and restarting[0]["level"] == "warning"
        assert {"reason", "error", "delay_s"} <= restarting[0].keys()
        wait_for(lambda: named(first_agent, "endpoint-ready", restarts=1), bool, 60, what="back")

        # A node that does not hold the aggregator claim now (a hung holder would keep it
        # for its lease's 90 s) hangs.
        holder = agents[0].status_json()["cluster_health"][0]["aggregator"]
        victim = next(a for a in agents if f"c1/{a.name}" != holder)
        seen = {e["id"] for e in named_anywhere(agents, "finding-opened")}

        # The node hangs: the aggregator logs the finding's opening, then (it or the agent
        # that took the claim over meanwhile) its closing.
        culprit = f"c1/{victim.name}"
        for pid in [*victim.responder_children(), victim.pid]:
            os.kill(pid, signal.SIGSTOP)
        try:
            opened, _ = wait_for(
                lambda: [
                    e
                    for e in named_anywhere(agents, "finding-opened")
                    if culprit in e["nodes"] and e["id"] not in seen
                ],
                bool,
                90,
                what="finding-opened",
            )
        finally:
            for pid in [victim.pid, *victim.responder_children()]:
                os.kill(pid, signal.SIGCONT)
        first = opened[0]
        assert first["msg"].startswith(f"finding opened: {first['kind']} ")
        assert {"id", "kind", "nodes", "confidence", "evidence", "opened_at"} <= first.keys()
        assert first["closed_at"] is None
        closed, _ = wait_for(
            lambda: named_anywhere(agents, "finding-closed", id=first["id"]),
            bool,
            90,
            what="closed",
        )
        assert closed[0]["closed_at"] >= first["opened_at"]
        for agent in agents:
            assert all(set(BASE_FIELDS) <= line.keys() for line in events_in(agent))

        shown = subprocess.run(
            [sys.executable, "-m", "meshhealth", "events", "--etcd", etcd_server.endpoint,
             "--since", "1h"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        print(shown.stdout)
        assert shown.returncode == 0 and culprit in shown.stdout
