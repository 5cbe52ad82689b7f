"""`meshhealth report`: the document (documents/report.py, pure), its text, and the
command reading real roll-ups from a real etcd."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from meshhealth.cli.format_report import format_report_text, percent
from meshhealth.cli.report_cmd import parse_span
from meshhealth.documents.report import ReportDocument, build_report, counted_windows
from meshhealth.timefmt import parse_iso_time
from meshhealth.wire import keys
from meshhealth.wire.rollup import NodeRollups, PathRollup, Window, encode_rollups
from tests.documents.test_document_types import shape_errors
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import free_loopback_port

DAY = parse_iso_time("2026-11-27T00:00:00Z")
H = 3600


def w(start: float, probes: int, failures: int, p95: float | None = 0.002) -> Window:
    if failures == probes:
        return Window(start, probes, failures, None, None, None)
    return Window(start, probes, failures, 0.001, p95, 0.005)


def value(node: str, *paths: PathRollup) -> NodeRollups:
    return NodeRollups("c1", node, DAY + 10 * H, paths)


# n1 sees n3 fail between 03:10 and 03:20; n2 sees n3 fine; both see each other fine.
VALUES = [
    value(
        "n1",
        PathRollup("c1", "n1", "node/icmp", (w(DAY + 3 * H, 60, 60),)),  # itself
        PathRollup("c1", "n2", "node/icmp", (w(DAY + 3 * H, 60, 0),)),
        PathRollup(
            "c1",
            "n3",
            "node/icmp",
            (
                w(DAY + 3 * H, 60, 0),
                w(DAY + 3 * H + 600, 60, 30, 0.5),
                w(DAY + 3 * H + 1200, 60, 0),
            ),
            (w(DAY + 2 * H, 360, 0), w(DAY + 3 * H, 360, 30)),  # 02:00: no 10-min windows
        ),
    ),
    value(
        "n2",
        PathRollup("c1", "n1", "node/icmp", (w(DAY + 3 * H + 600, 60, 0),)),
        PathRollup("c1", "n3", "endpoint/tcp", (w(DAY + 3 * H + 600, 60, 0),)),
    ),
]


def test_an_hour_counts_only_where_its_path_has_no_10_minute_windows() -> None:
    path = VALUES[0].paths[2]
    counted = counted_windows(path, since=DAY)
    assert [(window.start - DAY, seconds) for window, seconds in counted] == [
        (3 * H, 600),
        (3 * H + 600, 600),
        (3 * H + 1200, 600),
        (2 * H, 3600),  # hours after; 03:00 is in the 10-minute windows already
    ]
    assert [seconds for _, seconds in counted_windows(path, since=DAY + 3 * H + 700)] == [
        600,  # 03:10 - 03:20 ends after the start: counted whole
        600,
    ]


def test_least_available_pairs_and_nodes_first() -> None:
    doc = build_report(VALUES, since=DAY, now=DAY + 10 * H, top=10)
    assert not shape_errors(doc, ReportDocument)
    assert (doc["values"], doc["pairs_total"], doc["nodes_total"]) == (2, 5, 3)
    assert doc["since"] == "2026-11-27T00:00:00Z" and doc["until"] == "2026-11-27T10:00:00Z"
    first, second = doc["pairs"][:2]
    assert (first["observer"], first["target"], first["availability"]) == ("c1/n1", "c1/n1", 0.0)
    assert (second["observer"], second["target"], second["path"]) == ("c1/n1", "c1/n3", "node/icmp")
    assert (second["probes"], second["failures"]) == (540, 30)
    assert second["availability"] == pytest.approx(1 - 30 / 540)
    assert second["worst_rtt_p95_s"] == 0.5
    assert second["worst_window"] == {
        "start": "2026-11-27T03:10:00Z",
        "seconds": 600,
        "probes": 60,
        "failures": 30,
        "availability": 0.5,
    }
    nodes = {row["node"]: row for row in doc["nodes"]}
    assert [row["node"] for row in doc["nodes"]] == ["c1/n3", "c1/n1", "c1/n2"]
    # n3 over both observers; its worst window adds up their probes of 03:10.
    assert (nodes["c1/n3"]["observers"], nodes["c1/n3"]["probes"]) == (2, 600)
    assert nodes["c1/n3"]["worst_window"]["probes"] == 120
    assert nodes["c1/n3"]["worst_window"]["failures"] == 30
    # n1's probes of itself say nothing of n1 as a target: only n2's count.
    assert (nodes["c1/n1"]["observers"], nodes["c1/n1"]["failures"]) == (1, 0)


def test_top_and_the_span_cut_the_rows() -> None:
    doc = build_report(VALUES, since=DAY + 3 * H + 1200, now=DAY + 10 * H, top=1)
    assert len(doc["pairs"]) == 1 and len(doc["nodes"]) == 1
    assert doc["pairs_total"] == 1  # only n1 -> n3 has a window ending after 03:20
    late = build_report(VALUES, since=DAY + 5 * H, now=DAY + 10 * H, top=5)
    assert (late["pairs"], late["nodes"]) == ([], [])
    assert "No probes in this span." in format_report_text(late)


def test_text_escapes_what_etcd_holds_and_reads_in_percent() -> None:
    doc = build_report(VALUES, since=DAY, now=DAY + 10 * H, top=10)
    doc["pairs"][1]["target"] = "c1/\x1b[31mevil"
    text = format_report_text(doc)
    assert "\x1b" not in text and "\\x1b[31mevil" in text
    assert "94.444%" in text and "2026-11-27T03:10:00Z +10m0s 50.000% (30/60 failed)" in text
    assert percent(0.999999) == "99.999%" and percent(1.0) == "100.000%"


@pytest.mark.parametrize(
    ("since", "until", "span"),
    [
        ("24h", None, (DAY - 86400, DAY)),
        ("90m", "2026-11-27T03:00:00Z", (DAY + 1.5 * H, DAY + 3 * H)),
        ("7d", None, (DAY - 7 * 86400, DAY)),
        ("2026-11-26T23:00:00Z", None, (DAY - H, DAY)),
    ],
)
def test_the_span_from_the_flags(since: str, until: str | None, span: tuple[float, float]) -> None:
    assert parse_span(since, until, DAY) == span


@pytest.mark.parametrize(("since", "until"), [("yesterday", None), ("1h", "soon"), ("0s", None)])
def test_a_bad_span_names_the_flag(since: str, until: str | None) -> None:
    with pytest.raises(ValueError, match=r"--since|--until"):
        parse_span(since, until, DAY)


def report_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHHEALTH_")}
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", "report", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_report_reads_every_nodes_roll_ups_from_etcd(etcd_server: EtcdServer) -> None:
    import trio

    from meshhealth.kvstore import open_etcd

    async def put() -> None:
        async with open_etcd(etcd_server.endpoint) as etcd:
            for item in VALUES:
                await etcd.put(keys.rollup_key(item.cluster, item.node), encode_rollups(item))
            await etcd.put(keys.rollup_key("c1", "n7"), b"garbage")
            await etcd.put(keys.rollup_key("c2", "n1"), encode_rollups(value("n1")))  # c1's

    trio.run(put)
    since, until = "--since=2026-11-27T00:00:00Z", "--until=2026-11-27T10:00:00Z"
    result = report_cli("--etcd", etcd_server.endpoint, since, until, "-o", "json", "--top", "3")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert not shape_errors(doc, ReportDocument)
    assert doc == json.loads(json.dumps(build_report(VALUES, since=DAY, now=DAY + 10 * H, top=3)))
    skipped = result.stderr.splitlines()
    assert len(skipped) == 2
    assert skipped[0].startswith("meshhealth report: skipped meshhealth/state/rollup/v1/c1/n7: ")
    assert "the key says 'c2'" in skipped[1]

    text = report_cli("--etcd", etcd_server.endpoint, "--cluster", "c1", since, until)
    assert text.returncode == 0 and "n7" in text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == ("Roll-ups of 2 nodes, 2026-11-27T00:00:00Z .. 2026-11-27T10:00:00Z")
    assert lines[2] == "Least available pairs (5 of 5):"
    assert lines[3].split() == [
        "OBSERVER", "TARGET", "PATH", "AVAILABILITY", "PROBES", "WORST", "P95", "WORST", "WINDOW"
    ]  # fmt: skip
    assert lines[5].split()[:6] == ["c1/n1", "c1/n3", "node/icmp", "94.444%", "540", "500ms"]
    assert "Least available nodes, as targets (3 of 3):" in lines


def test_report_without_etcd_is_one_line_exit_2() -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"
    result = report_cli("--etcd", url, "--timeout", "2")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("meshhealth report: ") and len(result.stderr.splitlines()) == 1


def test_report_usage_errors_are_one_line_exit_2() -> None:
    result = report_cli("--since", "yesterday")
    assert result.returncode == 2
    assert result.stderr == (
        "meshhealth report: --since: invalid time 'yesterday': use a duration back from now "
        "(2h, 30m) or an ISO 8601 time (2026-11-27T03:12Z)\n"
    )
