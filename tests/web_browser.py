"""Debian's chromium driven by Playwright, for the web page's tests and benchmark.

    with chromium() as browser:                   # headless, this network namespace
        page = browser.new_page()
    with chromium(netns="he1-lab1-node1") as browser:   # inside a lab node's namespace
        ...
    with synthetic_web(1000) as url:              # a real web server on 127.0.0.1 with
        ...                                       # a made-up 1,000-node mesh behind it

Playwright's own browser downloads are never used: `executable_path` is Debian's
/usr/bin/chromium (scripts/setup.sh installs it). To run the browser inside a network
namespace, it is started through a small wrapper script that execs `ip netns exec NS
chromium ...`; Playwright talks to it over pipes, so the namespace does not matter for
control, only for what the page can reach. The browser is closed (by Playwright, which
owns its processes) however the block ends.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import trio
from playwright.sync_api import Browser, Page, sync_playwright

from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.serving.feed_server import FeedHub
from meshhealth.agent.serving.web_server import WebData, serve_web
from meshhealth.documents.matrix import Cell, Matrix, Row
from meshhealth.documents.status import LocalNode
from meshhealth.model import Target
from meshhealth.wire.event import FindingEvent

CHROMIUM = "/usr/bin/chromium"


def chromium_path() -> str:
    path = shutil.which("chromium") or CHROMIUM
    assert Path(path).exists(), "chromium is not installed: run scripts/setup.sh"
    return path


@contextlib.contextmanager
def chromium(netns: str | None = None) -> Iterator[Browser]:
    """A headless chromium (in network namespace `netns` when given)."""
    with tempfile.TemporaryDirectory(prefix="mh-chromium-") as tmp:
        executable = chromium_path()
        if netns is not None:
            wrapper = Path(tmp) / "chromium-in-netns"
            wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {netns} {executable} "$@"\n')
            wrapper.chmod(0o755)
            executable = str(wrapper)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
            )
            try:
                yield browser
            finally:
                browser.close()


# What the browser itself logs while an agent is away (a restart test makes it so).
_NETWORK_ERRORS = ("net::ERR_", "Failed to load resource")


def page_errors(page: Page) -> list[str]:
    """Collects the page's uncaught errors and console errors other than the browser's
    own network messages (a test asserts none): script errors, CSP violations."""
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error" and not any(n in message.text for n in _NETWORK_ERRORS):
            errors.append(f"console: {message.text}")

    page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))
    page.on("console", on_console)
    return errors


def wait_page_ready(page: Page, nodes: int, timeout_ms: float = 30_000) -> None:
    """Until the page has drawn a matrix of `nodes` columns and is live on the feed."""
    page.wait_for_function(
        """(n) => { const m = window.meshhealth && window.meshhealth.state.matrix;
                    return m && m.nodes.length === n && window.meshhealth.state.live
                      && window.meshhealth.state.renders > 0; }""",
        arg=nodes,
        timeout=timeout_ms,
    )


def click_cell(page: Page, source: str, target: str) -> None:
    center = page.evaluate("([s, t]) => window.meshhealth.cellCenter(s, t)", [source, target])
    assert center is not None, f"no cell {source} -> {target} on the page"
    box = page.locator("#matrix").bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + center["x"], box["y"] + center["y"])
    page.wait_for_selector("#detail:not([hidden])")
    page.wait_for_function(
        "(t) => document.getElementById('detail-title').textContent === t",
        arg=f"{source} → {target}",
    )


# --- a synthetic mesh behind a real web server ----------------------------------------


def synthetic_matrix(
    nodes: int,
    clusters: int = 1,
    *,
    down: tuple[int, ...] = (),
    names: tuple[str, ...] | None = None,
) -> Matrix:
    """`nodes` nodes per cluster (named `names`, in that order, when given), every cell
    reachable except the columns of `down`. Cells are shared per (column, state): a
    million cells cost a few MB, not a GB."""
    names = names or tuple(f"node{i + 1:04d}" for i in range(nodes))
    refs = tuple((f"c{k + 1}", name) for k in range(clusters) for name in names)
    ok = [Cell(ref, "reachable") for ref in refs]
    bad = [Cell(ref, "unreachable") for ref in refs]
    cells = tuple(bad[i] if i in down else ok[i] for i in range(len(refs)))
    rows = tuple(Row(ref, 1_800_000_000.0, 10.0, 1.0, False, cells) for ref in refs)
    return Matrix(generated_at=1_800_000_000.0, columns=refs, rows=rows, unavailable={}, lines=())


def synthetic_ip(index: int) -> str:
    """The NodeIP of the synthetic mesh's node of column `index`."""
    return f"10.{index // 250}.{index % 250}.1"


def synthetic_status(matrix: Matrix, direct: int | None = None) -> dict[str, Any]:
    """The local node's status: every node is a target, or the first `direct` only (the
    direct targets of subset probing)."""
    ok = {"status": "ok", "text": "OK", "loss": 0.0, "latency_s": 0.0004}
    nodes = [
        {
            "cluster": cluster,
            "name": name,
            "state": "reachable",
            "host": {"primary_address": {"ip": synthetic_ip(i), "icmp": ok, "http": ok}},
            "health_endpoint": None,
        }
        for i, (cluster, name) in enumerate(matrix.columns[:direct])
    ]
    local = matrix.columns[0]
    return {
        "local": {"cluster": local[0], "name": local[1], "node_ip": "10.0.0.1", "health_ip": None},
        "probe_time": "2027-01-15T08:00:00Z",
        "probe_interval_s": 10.0,
        "etcd": {"up": True},
        "summary": {
            "reachable": len(nodes),
            "unreachable": 0,
            "suspect": 0,
            "unknown": 0,
            "total": len(nodes),
        },
        "nodes": nodes,
    }


@contextlib.contextmanager
def synthetic_web(
    nodes: int = 0,
    clusters: int = 1,
    *,
    names: tuple[str, ...] | None = None,
    matrix: Matrix | None = None,
    direct: int | None = None,
    events: Sequence[FindingEvent] = (),
    status_fields: dict[str, Any] | None = None,
) -> Iterator[str]:
    """The real web server (meshhealth.agent.serving.web_server) on 127.0.0.1, in a
    thread of its own, with `matrix` or a synthetic one (see synthetic_matrix); the
    status lists the first `direct` nodes (all by default), the agent follows them all
    (synthetic_ip); the findings timeline is `events`; `status_fields` are added to the
    status (its cluster verdicts and findings); yields the page's URL."""
    matrix = matrix or synthetic_matrix(nodes, clusters, names=names)
    status = {**synthetic_status(matrix, direct), **(status_fields or {})}
    followed = tuple(Target(c, n, synthetic_ip(i)) for i, (c, n) in enumerate(matrix.columns))

    async def read_matrix() -> Matrix:
        return matrix

    async def read_events() -> Sequence[FindingEvent]:
        return events

    data = WebData(
        local=matrix.columns[0],
        interval_s=10.0,
        status=lambda: status,
        read_matrix=read_matrix,
        read_events=read_events,
        history=PathHistory(),
        feed=FeedHub(
            ProbeResults(
                LocalNode(*matrix.columns[0], "10.0.0.1", None),
                window=30,
                verdicts=PathVerdicts(interval_s=10.0, failing_observers=lambda cluster, node: 0),
            ),
            lambda: status,
        ),
        nodes=lambda: followed,
        node_ips=("127.0.0.1",),
    )
    ports: queue.Queue[int | BaseException] = queue.Queue()
    stop: list[trio.lowlevel.TrioToken | trio.CancelScope] = []

    async def main() -> None:
        with trio.CancelScope() as scope:
            stop.extend((trio.lowlevel.current_trio_token(), scope))
            async with trio.open_nursery() as nursery:
                ports.put(await nursery.start(serve_web, "127.0.0.1", 0, data))

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as error:  # reported to the waiting test
            ports.put(error)

    thread = threading.Thread(target=run, name="synthetic-web", daemon=True)
    thread.start()
    got = ports.get(timeout=30)
    if isinstance(got, BaseException):
        raise got
    try:
        yield f"http://127.0.0.1:{got}/"
    finally:
        token, scope = stop
        token.run_sync_soon(scope.cancel)  # type: ignore[union-attr]
        thread.join(timeout=10)
