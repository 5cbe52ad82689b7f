"""`meshhealth probe`: formatting (pure, golden), argument handling, and real runs.

Real runs probe only loopback addresses and addresses inside namespaces the test made.
After an intended change of the text output, regenerate the golden and review the diff:

    MESHHEALTH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/cli/test_probe_cli.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from meshhealth import model
from meshhealth.cli import probe_cmd
from meshhealth.cli.format_probe import (
    SummaryBook,
    format_loss,
    format_probe_json,
    format_probe_text,
    format_summary,
    fping_ms,
    loop_prefix,
    probe_line,
    status_text,
)
from meshhealth.cli.main import build_parser, main
from tests.golden_files import check_golden
from tests.plugins.netns import NetnsFactory
from tests.repo_paths import REPO_ROOT

ICMP = model.Protocol.ICMP
ISO_RE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
HTTP = model.Protocol.HTTP
S = model.ProbeStatus


# --- durations and formatting (pure) ----------------------------------------------------


@pytest.mark.parametrize(
    ("loss", "text"),
    [(0.0, "0%"), (1 / 3, "33%"), (2 / 3, "67%"), (1.0, "100%"), (0.001, "<1%"), (0.999, ">99%")],
)
def test_format_loss(loss: float, text: str) -> None:
    assert format_loss(loss) == text


def result(
    status: model.ProbeStatus,
    *rtts_ms: float,
    sent: int = 1,
    detail: str = "",
) -> model.ProbeResult:
    rtts = tuple(ms / 1000 for ms in rtts_ms)
    return model.ProbeResult(status, 1763805600.0, rtts, sent, len(rtts), detail)


@pytest.mark.parametrize(
    ("protocol", "res", "line"),
    [
        (ICMP, result(S.OK, 0.41, 0.41, 0.41, sent=3), "10.0.0.2  icmp  OK  rtt=410µs loss=0%"),
        (ICMP, result(S.OK, 0.3, 0.5, sent=3), "10.0.0.2  icmp  OK  rtt=400µs loss=33%"),
        (HTTP, result(S.OK, 1.02), "10.0.0.2  http  OK  rtt=1.02ms"),
        (HTTP, result(S.TIMEOUT), "10.0.0.2  http  Connection timed out"),
        (ICMP, result(S.TIMEOUT, sent=3), "10.0.0.2  icmp  Connection timed out"),
        (HTTP, result(S.REFUSED), "10.0.0.2  http  Connection refused"),
        (HTTP, result(S.HTTP_ERROR, 2.0, detail="HTTP 503"), "10.0.0.2  http  HTTP 503  rtt=2ms"),
        (
            ICMP,
            result(S.ERROR, sent=0, detail="ICMP disabled"),
            "10.0.0.2  icmp  Error: ICMP disabled",
        ),
    ],
)
def test_probe_line(protocol: model.Protocol, res: model.ProbeResult, line: str) -> None:
    assert probe_line("10.0.0.2", protocol, res) == line


def test_status_text_keeps_http_code_once() -> None:
    assert status_text(result(S.HTTP_ERROR, 1.0, detail="HTTP 404")) == "HTTP 404"


def golden_paths() -> list[model.PathReport]:
    def path(ip: str, protocol: model.Protocol, res: model.ProbeResult) -> model.PathReport:
        key = model.PathKey("", ip, model.TargetType.NODE, protocol)
        return model.PathReport(key, ip, res)

    return [
        path("10.0.0.2", ICMP, result(S.OK, 0.4, 0.412, 0.425, sent=3)),
        path("10.0.0.2", HTTP, result(S.OK, 1.02)),
        path("10.0.0.9", ICMP, result(S.TIMEOUT, sent=3)),
        path("10.0.0.9", HTTP, result(S.TIMEOUT)),
        path("fd00:99::2", ICMP, result(S.OK, 2.7, sent=3)),
        path("fd00:99::2", HTTP, result(S.REFUSED)),
    ]


def test_text_matches_golden() -> None:
    text = format_probe_text(golden_paths())
    check_golden("probe_text.txt", text)
    assert text.splitlines()[0] == "10.0.0.2    icmp  OK  rtt=412.3µs loss=0%"


def test_text_of_nothing_is_empty() -> None:
    assert format_probe_text([]) == ""


LABELS = {"10.0.0.2": "node-a (10.0.0.2)"}


def test_text_with_names_matches_golden() -> None:
    text = format_probe_text(golden_paths(), LABELS)
    check_golden("probe_text_names.txt", text)
    assert text.splitlines()[0] == "node-a (10.0.0.2)  icmp  OK  rtt=412.3µs loss=0%"


def summary_book() -> SummaryBook:
    book = SummaryBook()
    book.add(golden_paths())
    later = golden_paths()  # a second round: 10.0.0.2 slower, fd00:99::2 answered twice
    later[0] = model.PathReport(later[0].path, later[0].ip, result(S.OK, 12.5, 130, sent=3))
    later[4] = model.PathReport(later[4].path, later[4].ip, result(S.OK, 2.5, 2.9, sent=3))
    book.add(later)
    return book


def test_summary_matches_golden() -> None:
    text = format_summary(summary_book(), LABELS)
    check_golden("probe_summary.txt", text)
    lines = text.splitlines()
    # fping -c: xmt/rcv/%loss, min/avg/max in ms
    assert lines[0] == (
        "node-a (10.0.0.2)  icmp : xmt/rcv/%loss = 6/5/16%, min/avg/max = 0.400/28.75/130.0"
    )
    assert lines[2] == "10.0.0.9           icmp : xmt/rcv/%loss = 6/0/100%"


def test_summary_counts_what_failed() -> None:
    book = summary_book()
    assert book.not_ok == 6  # 10.0.0.9 twice over both protocols, fd00:99::2 http twice
    assert format_summary(SummaryBook()) == ""


def test_per_request_summary_lists_every_request_as_fping_C() -> None:
    """`-C`: each request's RTT in ms in order, `-` where no reply came."""
    book = SummaryBook(per_request=True)
    path = model.PathKey("", "10.0.0.2", model.TargetType.NODE, ICMP)
    answered = model.ProbeResult(
        S.OK, 0.0, (0.0004, 0.0005), sent=3, received=2, request_rtts_s=(0.0004, None, 0.0005)
    )
    book.add([model.PathReport(path, "10.0.0.2", answered)])
    # a result without the per-request list (e.g. HTTP): its replies, then the losses
    book.add([model.PathReport(path, "10.0.0.2", model.ProbeResult(S.TIMEOUT, 0.0, sent=1))])
    assert format_summary(book, per_request=True) == "10.0.0.2  icmp : 0.400 - 0.500 -\n"
    # not asked for (a --loop runs for hours): no list is kept
    plain = SummaryBook()
    plain.add([model.PathReport(path, "10.0.0.2", answered)])
    assert plain.tallies[("10.0.0.2", ICMP)].requests == []


def test_loop_prefix_says_round_and_utc_time() -> None:
    assert loop_prefix(3, 1795000000.4) == "[3 2026-11-18T11:06:40Z] "


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.000032, "0.032"),
        (0.0012345, "1.23"),
        (0.09999, "99.99"),
        (0.1234, "123.4"),
        (2.5, "2500"),
    ],
)
def test_fping_ms(seconds: float, text: str) -> None:
    assert fping_ms(seconds) == text


def test_json_fields() -> None:
    records = json.loads(format_probe_json(golden_paths()))
    assert [(r["ip"], r["protocol"], r["status"]) for r in records] == [
        ("10.0.0.2", "icmp", "ok"),
        ("10.0.0.2", "http", "ok"),
        ("10.0.0.9", "icmp", "timeout"),
        ("10.0.0.9", "http", "timeout"),
        ("fd00:99::2", "icmp", "ok"),
        ("fd00:99::2", "http", "refused"),
    ]
    first = records[0]
    assert set(first) == {
        "ip",
        "protocol",
        "status",
        "text",
        "detail",
        "rtt_s",
        "rtts_s",
        "sent",
        "received",
        "loss",
        "started_at",
        "started_at_unix",
    }
    # times as every document writes them; unix seconds only where the name says so
    assert (first["started_at"], first["started_at_unix"]) == ("2025-11-22T10:00:00Z", 1763805600.0)
    assert first["rtt_s"] == pytest.approx(0.000412333, rel=1e-4)
    assert first["rtts_s"] == [0.0004, 0.000412, 0.000425]
    assert (first["sent"], first["received"], first["loss"]) == (3, 3, 0.0)
    assert records[3]["text"] == "Connection timed out"
    assert records[3]["rtt_s"] is None
    assert records[4]["loss"] == pytest.approx(2 / 3)


# --- arguments (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", []),
        ("10.0.0.1\n10.0.0.2\n", ["10.0.0.1", "10.0.0.2"]),
        ("# hosts\n10.0.0.1 10.0.0.2  # two\n\n  ::1\t", ["10.0.0.1", "10.0.0.2", "::1"]),
    ],
)
def test_parse_target_lines(text: str, words: list[str]) -> None:
    assert probe_cmd.parse_target_lines(text) == words


@pytest.mark.parametrize(
    ("icmp", "http", "expected"),
    [
        (False, False, {ICMP, HTTP}),
        (True, False, {ICMP}),
        (False, True, {HTTP}),
        (True, True, {ICMP, HTTP}),
    ],
)
def test_chosen_protocols(icmp: bool, http: bool, expected: set[model.Protocol]) -> None:
    assert probe_cmd.chosen_protocols(icmp, http) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["probe", "bad_name"],
            "meshhealth probe: invalid target 'bad_name': not an IP address or host name\n",
        ),
        (
            ["probe", "127.0.0.1", "10.0.0.300"],
            "meshhealth probe: invalid target '10.0.0.300': not an IP address or host name\n",
        ),
        (["probe"], "meshhealth probe: no targets given (TARGET... or -f FILE)\n"),
        (
            ["probe", "-f", "/nonexistent/mh-hosts"],
            "meshhealth probe: cannot read /nonexistent/mh-hosts: No such file or directory\n",
        ),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", message)


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "--port", "70000", "127.0.0.1"],
        ["probe", "--timeout", "0", "127.0.0.1"],
        ["probe", "--count", "0", "127.0.0.1"],
        ["probe", "-o", "yaml", "127.0.0.1"],
        ["probe", "--interval", "-1", "127.0.0.1"],
        ["probe", "--loop", "--period", "x", "127.0.0.1"],
    ],
)
def test_bad_options_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    # one line: what is wrong, and where to read more; no usage dump
    assert err.startswith("meshhealth probe: argument ")
    assert err.endswith("(see meshhealth probe --help)\n")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "count", "interval_s", "period_s", "timeout_s", "summaries", "per_request"),
    [
        # defaults: 3 requests 0.1 s apart, 1 s timeout, no summaries
        ([], 3, 0.1, 1.0, 1.0, False, False),
        (["-c", "5"], 5, 0.1, 1.0, 1.0, True, False),
        (["--count", "5"], 5, 0.1, 1.0, 1.0, True, False),
        # fping -p: ms between two requests to one target; -t: timeout in ms
        (["-c", "3", "-p", "100"], 3, 0.1, 0.1, 1.0, True, False),
        (["-p", "250", "-t", "500"], 3, 0.25, 0.25, 0.5, False, False),
        (["-t", "2500"], 3, 0.1, 1.0, 2.5, False, False),
        (["-p", "0", "-c", "100"], 100, 0.0, 0.0, 1.0, True, False),  # a burst
        (["-C", "4"], 4, 0.1, 1.0, 1.0, True, True),
        (["-C", "4", "-c", "4"], 4, 0.1, 1.0, 1.0, True, True),
        (["--loop"], 1, 0.1, 1.0, 1.0, True, False),
        (["-l", "-p", "500"], 1, 0.5, 0.5, 1.0, True, False),
        (["-q"], 3, 0.1, 1.0, 1.0, True, False),
        # the long forms still work, and -p/-t win over them
        (["--interval", "0.2", "--timeout", "3"], 3, 0.2, 1.0, 3.0, False, False),
        (["--timeout", "3", "-t", "100"], 3, 0.1, 1.0, 0.1, False, False),
    ],
)
def test_fping_short_options(  # noqa: PLR0917 (the table's columns)
    argv: list[str],
    count: int,
    interval_s: float,
    period_s: float,
    timeout_s: float,
    summaries: bool,
    per_request: bool,
) -> None:
    args = build_parser(["probe"]).parse_args(["probe", *argv, "127.0.0.1"])
    session = probe_cmd.build_session(args)
    assert (session.count, session.interval_s, session.period_s, session.timeout_s) == (
        count,
        pytest.approx(interval_s),
        pytest.approx(period_s),
        pytest.approx(timeout_s),
    )
    assert (session.summaries, session.per_request) == (summaries, per_request)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-C", "3", "--loop"], "-C lists every request: not with --loop (use -c)"),
        (["-C", "3", "-c", "4"], "-C 3 and --count 4 disagree"),
    ],
)
def test_fping_short_options_that_conflict(argv: list[str], message: str) -> None:
    args = build_parser(["probe"]).parse_args(["probe", *argv, "127.0.0.1"])
    with pytest.raises(ValueError) as exc:
        probe_cmd.build_session(args)
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # an option of a command, given before it: name the command's help
        (
            ["-c", "3", "127.0.0.1"],
            "meshhealth: -c is an option of meshhealth probe: put it after the command "
            "(see meshhealth probe --help)\n",
        ),
        (
            ["-o", "json", "status"],
            "meshhealth: -o is an option of the commands status, matrix, diagnose, events, "
            "report, inspect, probe: put it after the command (see meshhealth COMMAND --help)\n",
        ),
    ],
)
def test_option_before_its_command_names_the_command(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr() == ("", message)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["probe", "--bogus", "127.0.0.1"],
            "meshhealth probe: unrecognized arguments: --bogus (see meshhealth probe --help)\n",
        ),
        (
            ["-x"],
            "meshhealth: unrecognized arguments: -x (see meshhealth --help)\n",
        ),
        (
            ["probe", "-i", "10", "127.0.0.1"],
            "meshhealth probe: argument -i: fping's pause between any two packets is not "
            "supported: a round sends to every target at once; -p MS sets the time between "
            "two requests to one target (see meshhealth probe --help)\n",
        ),
    ],
)
def test_unknown_option_names_the_help_that_has_the_answer(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr() == ("", message)


def test_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    assert "meshhealth probe 10.0.0.2 10.0.0.9" in capsys.readouterr().out


# --- real runs (loopback) ---------------------------------------------------------------


async def run_cli(
    *args: str, stdin: bytes = b"", netns: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    inside = ["ip", "netns", "exec", netns] if netns is not None else []
    return await trio.run_process(
        [*inside, sys.executable, "-m", "meshhealth", "probe", *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def serve_on(host: str, port: int, *, task_status: trio.TaskStatus[int]) -> None:
    from meshhealth.probe.responder import serve_responder

    await serve_responder(
        host, port, max_connections=16, read_timeout_s=2.0, task_status=task_status
    )


async def test_http_probe_of_loopback_from_stdin() -> None:
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(serve_on, "127.0.0.2", 0)
        done = await run_cli(
            "--http", "--port", str(port), "127.0.0.2", "-f", "-", stdin=b"127.0.0.3\n"
        )
        nursery.cancel_scope.cancel()
    assert done.returncode == 1, done.stderr
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("127.0.0.2  http  OK  rtt=")
    assert lines[1] == "127.0.0.3  http  Connection refused"
    assert done.stderr == b""


async def test_all_ok_exits_0_and_json() -> None:
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(serve_on, "127.0.0.2", 0)
        done = await run_cli("--http", "--port", str(port), "-o", "json", "127.0.0.2")
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)
    assert (record["ip"], record["protocol"], record["status"], record["received"]) == (
        "127.0.0.2",
        "http",
        "ok",
        1,
    )
    assert record["rtt_s"] > 0


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: raw ICMP socket")


@needs_root
@pytest.mark.netns
async def test_icmp_and_http_of_loopback(ipv6_loopback: str) -> None:
    """In a namespace of its own: `::1` exists there whatever the host's loopback has."""
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(serve_on, "127.0.0.2", 0)
        args = ["--port", str(port), "--count", "2", "--interval", "0.01", "127.0.0.2", "::1"]
        done = await run_cli(*args, netns=ipv6_loopback)
        nursery.cancel_scope.cancel()
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 1, done.stderr  # nothing listens on [::1]:port
    summary = done.stderr.decode().splitlines()  # --count: a summary line per path, stderr
    assert [line.split()[:3] for line in summary] == [
        ["127.0.0.2", "icmp", ":"],
        ["127.0.0.2", "http", ":"],
        ["::1", "icmp", ":"],
        ["::1", "http", ":"],
    ]
    assert "xmt/rcv/%loss = 2/2/0%, min/avg/max = " in summary[0]
    assert summary[3].endswith("xmt/rcv/%loss = 1/0/100%")
    assert [line.split()[:2] for line in lines] == [
        ["127.0.0.2", "icmp"],
        ["127.0.0.2", "http"],
        ["::1", "icmp"],
        ["::1", "http"],
    ]
    assert "OK  rtt=" in lines[0]
    assert lines[0].endswith("loss=0%")
    assert "OK  rtt=" in lines[1]
    assert "OK  rtt=" in lines[2]
    assert lines[3].endswith("Connection refused")


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_icmp_without_raw_socket_rights_says_so() -> None:
    # Root without CAP_NET_RAW (dropped from the bounding set): no raw socket.
    drop_net_raw = ["setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw"]
    done = subprocess.run(
        [*drop_net_raw, sys.executable, "-m", "meshhealth", "probe", "--icmp", "127.0.0.1"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == probe_cmd.NO_RAW_SOCKET + "\n"


# --- real runs (namespaces) -------------------------------------------------------------


@pytest.mark.netns
def test_probe_in_namespace_live_and_dead(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=3, dead=3, live6=1, dead6=1)
    for listen in ("0.0.0.0:4240", "[::]:4240"):  # trio's listeners are IPv6-only
        responder = netns_factory.spawn(
            lab.target,
            sys.executable,
            "-m",
            "meshhealth",
            "responder",
            "--listen",
            listen,
            stdout=subprocess.PIPE,
        )
        assert responder.stdout is not None
        assert b"listening" in responder.stdout.readline()
        responder.stdout.close()  # it prints nothing more
    targets = lab.live + lab.dead + lab.live6 + lab.dead6
    t0 = time.monotonic()
    done = netns_factory.run(
        lab.client,
        sys.executable,
        "-m",
        "meshhealth",
        "probe",
        "--timeout",
        "0.5",
        "-o",
        "json",
        *targets,
        check=False,
    )
    wall_s = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    records = json.loads(done.stdout)
    got = {(r["ip"], r["protocol"]): r["status"] for r in records}
    live, dead = lab.live + lab.live6, lab.dead + lab.dead6
    expected = {(ip, p): "ok" for ip in live for p in ("icmp", "http")}
    expected |= {(ip, p): "timeout" for ip in dead for p in ("icmp", "http")}
    assert got == expected
    # ICMP budget: 2 * 0.1 s + 0.5 s; plus interpreter start-up (generous).
    assert wall_s < 0.7 + 3.0


@pytest.mark.netns
def test_host_names_resolve_once_to_both_families(netns_factory: NetnsFactory) -> None:
    # The name lives in a hosts file of the client namespace only (`ip netns exec` puts
    # /etc/netns/NS/hosts over /etc/hosts); its resolver points at the namespace's own
    # loopback, so nothing leaves it.
    lab = netns_factory.make_lab(live=1, dead=1, live6=1)
    etc = Path("/etc/netns") / lab.client
    made_root = not etc.parent.exists()
    etc.mkdir(parents=True)
    try:
        (etc / "hosts").write_text(
            f"{lab.live[0]} dual.test\n{lab.live6[0]} dual.test\n{lab.dead[0]} gone.test\n"
        )
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        done = netns_factory.run(
            lab.client,
            sys.executable,
            "-m",
            "meshhealth",
            "probe",
            "--icmp",
            "--count",
            "2",
            "--interval",
            "0",
            "--timeout",
            "0.3",
            "dual.test",
            "gone.test",
            lab.live[0],  # the same address as a name's: probed once
            check=False,
        )
        unknown = netns_factory.run(
            lab.client, sys.executable, "-m", "meshhealth", "probe", "nowhere.test", check=False
        )
    finally:
        shutil.rmtree(etc)
        if made_root:
            etc.parent.rmdir()
    assert done.returncode == 1, done.stderr  # gone.test times out
    lines = done.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines[:3]] == [
        f"dual.test ({lab.live[0]})",
        f"dual.test ({lab.live6[0]})",
        f"gone.test ({lab.dead[0]})",
    ]
    assert lines[0].endswith("OK  rtt=" + lines[0].split("rtt=")[1])
    assert "loss=0%" in lines[1]
    assert "Connection timed out" in lines[2]
    assert len(lines) == 3  # the summaries go to stderr, as fping's
    summary = [" ".join(line.split()) for line in done.stderr.splitlines()]  # padding aside
    assert len(summary) == 3
    assert summary[0].startswith(f"dual.test ({lab.live[0]}) icmp : xmt/rcv/%loss = 2/2/0%")
    assert summary[1].startswith(f"dual.test ({lab.live6[0]}) icmp : xmt/rcv/%loss = 2/2/0%")
    assert summary[2] == f"gone.test ({lab.dead[0]}) icmp : xmt/rcv/%loss = 2/0/100%"
    assert unknown.returncode == 2
    assert unknown.stdout == ""
    assert unknown.stderr.startswith("meshhealth probe: cannot resolve 'nowhere.test': ")
    assert unknown.stderr.count("\n") == 1


@needs_root
def test_loop_prints_rounds_and_a_final_summary_on_sigint() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "meshhealth",
            "probe",
            "--icmp",
            "--loop",
            "--period",
            "0.02",
            "--summary-every",
            "0.05",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        assert proc.stderr is not None
        summaries: list[str] = []
        while not any(" after " in line for line in summaries):  # a periodic summary
            line = proc.stderr.readline()
            assert line, proc.stderr.read()
            summaries.append(line)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    # stdout: the results alone, each line with its round and time (UTC)
    rounds = out.splitlines()
    assert len(rounds) >= 2
    for number, line in enumerate(rounds, start=1):
        assert re.fullmatch(
            rf"\[{number} {ISO_RE}\] 127\.0\.0\.1  icmp  OK  rtt=\S+ loss=0%", line
        ), line
    # stderr: the summaries, as fping's
    assert re.fullmatch(rf"\[{ISO_RE}\] after \d+ rounds\n", summaries[-1])
    final = (summaries + err.splitlines(keepends=True))[-1]
    sent = int(final.split(" = ")[1].split("/")[0])
    assert sent >= len(rounds)
    assert final.startswith(f"127.0.0.1  icmp : xmt/rcv/%loss = {sent}/{sent}/0%, min/avg/max = ")


@needs_root
def test_count_and_vcount_summaries_go_to_stderr() -> None:
    """`-c 3 -p 10`: the result on stdout, fping's summary on stderr; `-C 3` lists the
    three RTTs."""
    for flags, summary in (
        (["-c", "3"], r"127\.0\.0\.1  icmp : xmt/rcv/%loss = 3/3/0%, min/avg/max = [\d./]+\n"),
        (["-C", "3"], r"127\.0\.0\.1  icmp : [\d.]+ [\d.]+ [\d.]+\n"),
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "meshhealth",
                "probe",
                "--icmp",
                *flags,
                "-p",
                "10",
                "127.0.0.1",
            ],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(r"127\.0\.0\.1  icmp  OK  rtt=\S+ loss=0%\n", done.stdout)
        assert re.fullmatch(summary, done.stderr), done.stderr
