"""The live web page in a real browser (Debian's chromium through Playwright).

- loopback agents (no root): the page shows every node, live, a click opens a path, and
  it reconnects when the agent it is served by restarts;
- the netns lab (root; CI runs it): the browser runs inside node1's namespace, a fault
  turns its cells within two intervals, a click on another observer's cell shows that
  observer's own history, and a screenshot is saved (its path is printed);
- a synthetic 1,000-node mesh: the page draws it and lists every node (the frame time
  is measured by bench/web_frame_time.py, not asserted here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from meshhealth import defaults
from meshhealth.documents.matrix import build_matrix
from meshhealth.lab import netns_ops
from meshhealth.lab import plan as P
from meshhealth.lab.build import endpoint_names_taken
from meshhealth.naming import natural_key
from tests import matrix_stories
from tests.agent_cluster import AgentCluster, AgentProcess
from tests.plugins.etcd_server import EtcdServer, running_etcd
from tests.plugins.local_etcd import free_loopback_port
from tests.plugins.netns import require_root
from tests.web_browser import (
    chromium,
    click_cell,
    page_errors,
    synthetic_ip,
    synthetic_web,
    wait_page_ready,
)

CLI = [sys.executable, "-m", "meshhealth"]
VIEWPORT = {"width": 1400, "height": 900}


def cell_state(page: Page, source: str, target: str) -> str | None:
    state: str | None = page.evaluate(
        "([s, t]) => window.meshhealth.cellState(s, t)", [source, target]
    )
    return state


def wait_cells(page: Page, cells: list[tuple[str, str]], want: str, timeout_s: float) -> float:
    """Seconds until every cell reads `want` on the page; fails after `timeout_s`."""
    start = time.monotonic()
    while True:
        seen = {cell: cell_state(page, *cell) for cell in cells}
        if all(state == want for state in seen.values()):
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"cells not {want} within {timeout_s:g}s: {seen}")
        page.wait_for_timeout(100)


def screenshot_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "meshhealth-screenshots"
    path.mkdir(exist_ok=True)
    return path


# --- loopback agents ------------------------------------------------------------------


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[tuple[AgentCluster, list[AgentProcess], int]]:
    with (
        running_etcd(EtcdServer()) as etcd,
        AgentCluster(tmp_path, etcd.endpoint, interval_s=1.0) as cluster,
    ):
        web_port = free_loopback_port()  # one port, each agent on its own NodeIP
        started = [
            cluster.start(name, "--web-listen", f"127.{cluster.octet}.1.{i}:{web_port}")
            for i, name in enumerate(("n1", "n2", "n3"), 1)
        ]
        yield cluster, started, web_port


def test_page_shows_every_node_live_and_reconnects_after_a_restart(
    agents: tuple[AgentCluster, list[AgentProcess], int],
) -> None:
    cluster, (n1, _n2, n3), web_port = agents
    with chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(f"http://{n1.node_ip}:{web_port}/")
        wait_page_ready(page, 3)
        every = [(f"c1/{s}", f"c1/{t}") for s in ("n1", "n2", "n3") for t in ("n1", "n2", "n3")]
        wait_cells(page, every, "reachable", 30)
        page.wait_for_function(
            "() => document.getElementById('health').textContent.startsWith("
            "'Cluster health: 3/3 reachable')"
        )
        # The verdict comes from the cluster's aggregator once it published a summary.
        page.wait_for_function(
            "() => document.getElementById('health').textContent.includes('(aggregator c1/n')",
            timeout=60_000,
        )
        rows = page.locator("#node-table tbody tr")
        assert rows.count() == 3
        assert rows.all_inner_texts()[0].startswith("c1/n1")
        page.fill("#filter", "n3")
        page.wait_for_function(
            "() => document.querySelectorAll('#node-table tbody tr').length === 1"
        )
        assert "c1/n3" in page.inner_text("#node-table tbody")
        page.fill("#filter", "")
        page.wait_for_function("() => window.meshhealth.state.view.cols.length === 3")

        click_cell(page, "c1/n1", "c1/n3")
        detail = page.inner_text("#detail")
        for label in ("Host ICMP", "Host HTTP", "Endpoint ICMP", "Endpoint HTTP", "OK"):
            assert label in detail
        assert n3.node_ip in detail

        # The agent serving the page restarts: the page says so, then is live again.
        cluster.stop(n1)
        page.wait_for_function("() => !window.meshhealth.state.live", timeout=15_000)
        assert "reconnecting" in page.inner_text("#conn")
        cluster.spawn(n1)
        cluster.wait_admin(n1)
        page.wait_for_function("() => window.meshhealth.state.live", timeout=30_000)
        wait_cells(page, every, "reachable", 30)
        assert errors == []


# --- the netns lab ---------------------------------------------------------------------

LAB_INTERVAL_S = 2.0
LAB_TIMEOUT_S = defaults.PROBE_TIMEOUT_S
# The promise for a fault every observer sees: the second failure in a row (two intervals
# and a timeout after the fault), then the suspicion time, which its confirmations keep
# below the ceiling; then the observer's publish debounce and the page's matrix age. The
# 2 s on top are for a loaded CI machine. A cell stuck in `suspect` past the ceiling, or a
# page that stops refreshing, fails it; the time itself is printed, not judged.
LAB_FAULT_SHOWN_S = (
    2 * LAB_INTERVAL_S
    + LAB_TIMEOUT_S
    + defaults.SUSPICION_CEILING_FACTOR * defaults.SUSPICION_FLOOR_INTERVALS * LAB_INTERVAL_S
    + defaults.PUBLISH_DEBOUNCE_S
    + defaults.WEB_MATRIX_MAX_AGE_FRACTION * LAB_INTERVAL_S
    + 2.0
)


def lab(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def web_lab() -> Iterator[P.LabPlan]:
    require_root()
    prefix = f"he{os.getpid() % 100000}"
    plan = P.make_plan(prefix, 4, 1)
    taken = endpoint_names_taken(plan)
    assert not taken, f"{taken[0]} exists: another lab with this prefix is up"
    up = lab("up", "--prefix", prefix, "--nodes", "4", "--interval", f"{LAB_INTERVAL_S:g}")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield plan
    finally:
        down = lab("down", "--prefix", prefix)
        assert down.returncode == 0, down.stderr
        assert [n for n in netns_ops.list_netns() if n.startswith(f"{prefix}-")] == []


@pytest.mark.netns
@pytest.mark.slow
def test_page_in_the_lab_shows_a_fault_and_a_path(web_lab: P.LabPlan) -> None:
    prefix = web_lab.prefix
    node1, node3 = web_lab.node("node1"), web_lab.node("node3")
    status = lab("status", "--prefix", prefix)
    assert node1.web_url in status.stdout and node3.web_url in status.stdout

    names = [n.qualified for n in web_lab.nodes]
    with chromium(netns=node1.netns) as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(node1.web_url)
        wait_page_ready(page, 4)
        every = [(s, t) for s in names for t in names]
        wait_cells(page, every, "reachable", 60)
        assert page.locator("#node-table tbody tr").count() == 4

        # The health endpoint of node3 stops getting traffic: every observer's cell of
        # node3 turns within two intervals (plus the probe timeout of the failing probe).
        fault = lab("fault", "--prefix", prefix, "endpoint-forward-drop", "node3")
        assert fault.returncode == 0, fault.stderr
        try:
            column = [(s, node3.qualified) for s in names if s != node3.qualified]
            took_s = wait_cells(page, column, "unreachable", 30)
            print(
                f"\nfault -> every cell of {node3.qualified} unreachable on the page: {took_s:.1f}s"
            )
            assert took_s <= LAB_FAULT_SHOWN_S

            click_cell(page, node1.qualified, node3.qualified)
            page.wait_for_function(
                "() => document.getElementById('detail-paths').innerText.includes('timed out')"
            )
            detail = page.inner_text("#detail")
            assert "Endpoint ICMP" in detail and "Connection timed out" in detail

            # Another observer's cell: its own agent (same port, its NodeIP) answers with
            # its percentiles and history, not only what it published to etcd.
            click_cell(page, "lab1/node2", node3.qualified)
            page.wait_for_selector("#detail-history canvas")
            assert page.inner_text("#detail-note") == ""
            shot = screenshot_dir() / f"web-page-lab-{prefix}.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
            assert shot.stat().st_size > 10_000
        finally:
            cleared = lab("fault", "--prefix", prefix, "clear")
            assert cleared.returncode == 0, cleared.stderr
        wait_cells(page, every, "reachable", 60)

        # node3 cannot reach out: the headline says the cluster's verdict (4/4: the
        # others reach node3) and names node3 in the findings' words, as `status` does;
        # node3's cells stay failing in the matrix, and its cell detail says why they do
        # not count against the nodes it fails.
        egress = lab("fault", "--prefix", prefix, "egress-drop", "node3")
        assert egress.returncode == 0, egress.stderr
        try:
            page.wait_for_function(
                "() => document.getElementById('health').textContent.includes("
                "'4/4 reachable (3 observers each); lab1/node3 cannot reach out "
                "(egress-blocked)')",
                timeout=90_000,
            )
            click_cell(page, node3.qualified, node1.qualified)
            page.wait_for_function(
                "() => document.getElementById('detail-state').textContent.includes("
                "'from a discounted observer (egress-blocked)')"
            )
        finally:
            cleared = lab("fault", "--prefix", prefix, "clear")
            assert cleared.returncode == 0, cleared.stderr
        page.wait_for_function(
            "() => /^Cluster health: 4\\/4 reachable \\(3 observers each\\)  /"
            ".test(document.getElementById('health').textContent)",
            timeout=90_000,
        )
        assert errors == []


# --- 1,000 nodes ------------------------------------------------------------------------


def test_page_draws_a_thousand_nodes() -> None:
    with synthetic_web(1000) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(url)
        page.wait_for_function(
            "() => window.meshhealth.state.matrix && window.meshhealth.state.renders > 0",
            timeout=60_000,
        )
        assert page.locator("#node-table tbody tr").count() == 1000
        assert cell_state(page, "c1/node0001", "c1/node1000") == "reachable"
        width = page.evaluate("() => window.meshhealth.state.view.cols.length")
        assert width == 1000
        page.fill("#filter", "node09")
        page.wait_for_function("() => window.meshhealth.state.view.cols.length === 100")
        assert page.locator("#node-table tbody tr").count() == 100
        frames = page.evaluate("() => window.meshhealth.frameTimes()")
        print(f"\nrender times at 1,000 nodes (ms): {[round(f, 1) for f in frames]}")
        assert frames
        assert errors == []


# --- natural order ----------------------------------------------------------------------

# An older agent's matrix: columns and rows in text order (node10 before node2).
TEXT_ORDER = tuple(sorted(f"node{i}" for i in range(1, 13)))


def test_page_sorts_nodes_naturally() -> None:
    """The node list and the matrix read node1, node2, ..., node10 even when the agent
    sends text order; the page's comparison agrees with meshhealth.naming."""
    with synthetic_web(len(TEXT_ORDER), names=TEXT_ORDER) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(url)
        page.wait_for_function(
            "() => window.meshhealth.state.matrix && window.meshhealth.state.renders > 0"
        )
        natural = [f"c1/node{i}" for i in range(1, 13)]
        listed = page.eval_on_selector_all(
            "#node-table tbody tr", "rows => rows.map(r => r.dataset.node)"
        )
        assert listed == natural
        drawn = page.evaluate(
            """() => { const m = window.meshhealth.state.matrix, v = window.meshhealth.state.view;
                       const ref = (i) => `${m.nodes[i].cluster}/${m.nodes[i].name}`;
                       return [v.cols.map(ref), v.rows.map((r) => ref(r.node))]; }"""
        )
        assert drawn == [natural, natural]  # columns, rows
        names = [
            "node10",
            "node2",
            "n01",
            "n1",
            "a9b",
            "a10b",
            "node-a",
            "node0",
            "x" + "9" * 20,
            "x1" + "0" * 20,
            "",
        ]
        in_js = page.evaluate(
            "(names) => names.slice().sort(window.meshhealth.naturalCompare)", names
        )
        assert in_js == sorted(names, key=natural_key)
        assert errors == []


# --- the coverage line ------------------------------------------------------------------


MARKERS = """() => [...document.querySelectorAll('#findings li')].map(
    (li) => [li.textContent, getComputedStyle(li, '::marker').content])"""


@pytest.mark.parametrize(("reports", "below_plan"), [("subset_healthy", False), ("subset", True)])
def test_page_marks_the_coverage_line_a_warning_only_below_plan(
    reports: str, below_plan: bool
) -> None:
    matrix = build_matrix(getattr(matrix_stories, reports)(), now=matrix_stories.NOW)
    with synthetic_web(matrix=matrix) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(url)
        page.wait_for_function("() => document.querySelectorAll('#findings li').length > 0")
        shown = dict(page.evaluate(MARKERS))
        coverage = [text for text in shown if text.startswith("Coverage:  subset probing")]
        assert len(coverage) == 1
        assert ("▲" in shown[coverage[0]]) == below_plan, shown
        if below_plan:
            assert "▲" in shown["lab1/node1: 1 observer this epoch (plan: 2)"]
        else:
            assert len(shown) == 1  # nothing else to say of a healthy subset mesh
        assert errors == []


# --- every node's NodeIP ----------------------------------------------------------------


def test_page_lists_the_node_ip_of_every_node() -> None:
    """Subset probing: the status lists the local node's 3 direct targets only; the
    node list still shows every node's NodeIP (the agent follows them all), and the
    filter finds a node by it."""
    with synthetic_web(8, direct=3) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(url)
        page.wait_for_function(
            "() => document.querySelectorAll('#node-table tbody tr').length === 8"
        )
        ips = dict(
            page.eval_on_selector_all(
                "#node-table tbody tr",
                "rows => rows.map(r => [r.dataset.node, r.cells[1].textContent])",
            )
        )
        assert ips == {f"c1/node{i + 1:04d}": synthetic_ip(i) for i in range(8)}
        assert page.evaluate("() => window.meshhealth.state.nodeIPs.has('c1/node0008')") is False
        page.fill("#filter", synthetic_ip(6))  # node0007: not a direct target
        page.wait_for_function(
            "() => document.querySelectorAll('#node-table tbody tr').length === 1"
        )
        assert "c1/node0007" in page.inner_text("#node-table tbody")
        assert errors == []


# --- the findings timeline strip ------------------------------------------------------


def test_page_draws_the_last_day_of_findings_as_a_strip() -> None:
    """One bar per event of the last day, one lane per finding, an open one red and to
    the right edge, one in planned maintenance faded; the evidence (anyone's who can
    write etcd) stays text."""
    import time as clock

    from meshhealth.wire.event import FindingEvent

    now = clock.time()
    events = (
        FindingEvent("c1", "1000000000000-000000000001", "node-down", ("c1/node0002",), 0.9,
                     "nothing answers", now - 6 * 3600, now - 3 * 3600, expected=True),
        FindingEvent("c1", "1000000000000-000000000002", "node-down", ("c1/node0002",), 0.8,
                     "again", now - 3600),
        FindingEvent("c1", "1000000000000-000000000003", "path", ("c1/node0001", "c1/node0003"),
                     0.5, "<img src=x onerror=alert(1)>", now - 2 * 86400, now - 12 * 3600),
    )  # fmt: skip
    with synthetic_web(3, events=events) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(url)
        page.wait_for_selector("#timeline-section:not([hidden])")
        bars = page.eval_on_selector_all(
            "#timeline .bar",
            """bars => bars.map(b => ({open: b.classList.contains('open'), title: b.title,
                 expected: b.classList.contains('expected'),
                 opacity: getComputedStyle(b).opacity,
                 left: parseFloat(b.style.left), width: parseFloat(b.style.width),
                 top: b.style.top}))""",
        )
        assert len(bars) == 3  # all three held during the last day
        path, first, again = bars  # oldest first
        assert path["left"] == 0 and 45 < path["width"] < 55  # from the strip's start
        assert 74 < first["left"] < 76 and 12 < first["width"] < 13
        assert again["open"] and not first["open"] and 95 < again["left"] + again["width"] <= 100.01
        assert first["top"] == again["top"] != path["top"]  # one lane per finding
        assert again["title"].startswith("node-down c1/node0002: ")
        assert "→ open (1h0m" in again["title"] and "confidence 80%" in again["title"]
        # The first one was in planned maintenance all along: faded, and its title says so.
        assert first["expected"] and first["opacity"] == "0.4"
        assert "confidence 90%, expected: in maintenance) — nothing answers" in first["title"]
        assert not again["expected"] and again["opacity"] == "1"
        assert path["title"].endswith("— <img src=x onerror=alert(1)>")  # text, not markup
        assert page.locator("#timeline img").count() == 0
        assert page.inner_text("#timeline-count") == "3 findings, 1 open"
        shot = screenshot_dir() / "web-page-timeline.png"
        page.locator("#summary").screenshot(path=str(shot))
        assert errors == []


# --- planned maintenance ------------------------------------------------------------------


def test_page_says_in_maintenance() -> None:
    """node3 is down for its planned maintenance: the headline counts it apart, its
    finding says expected, and the matrix's note names its window (reason escaped by
    the page's text nodes, never markup)."""
    from meshhealth.diagnosis.cluster_summary import build_summary
    from meshhealth.diagnosis.diagnose import diagnose
    from meshhealth.diagnosis.view import matrix_view
    from meshhealth.documents.cluster_health import finding_document, summary_verdict_document
    from meshhealth.wire.maintenance import MaintenanceWindow

    now = matrix_stories.NOW
    window = MaintenanceWindow("lab1", "node3", now - 60, now + 3600, "<b>reboot</b>", "ops")
    matrix = build_matrix(matrix_stories.node_unreachable_by_all(), now=now, maintenance=[window])
    summary = build_summary(
        matrix, diagnose(matrix_view(matrix)), cluster="lab1", aggregator="node1"
    )
    fields = {
        "cluster_health": [summary_verdict_document(summary, now)],
        "findings": [finding_document(f) for f in summary.findings],
    }
    with synthetic_web(matrix=matrix, status_fields=fields) as url, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        errors = page_errors(page)
        page.goto(url)
        page.wait_for_function(
            "() => document.getElementById('health').textContent.includes("
            "'Cluster health: 2/2 reachable (2 observers each), 1 in maintenance')"
        )
        page.wait_for_function("() => document.querySelectorAll('#findings li').length > 1")
        shown = dict(page.evaluate(MARKERS))
        [finding] = [text for text in shown if text.startswith("node-isolated: lab1/node3")]
        assert "(expected: in maintenance)" in finding
        [note] = [text for text in shown if text.startswith("lab1/node3 in maintenance until")]
        assert note.endswith("by ops: <b>reboot</b>") and "▲" not in shown[note]
        assert errors == []
