"""The admin API over a real unix socket, with a small in-memory agent behind it."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from meshhealth.admin_client import AdminUnavailable, admin_request, socket_path_from_host
from meshhealth.agent.prober_loop import ProberLoop, RoundProgress
from meshhealth.agent.serving.admin_api import serve_admin_api
from meshhealth.agent.serving.unix_socket import AdminSocketError
from meshhealth.cli import main
from meshhealth.documents.status import build_status_document
from meshhealth.model import RoundReport, Target
from tests import status_stories

TIMEOUT_S = 5.0


@dataclass
class FakeAgent:
    """A real (in-memory) AdminHandler around the agent's ProberLoop, whose rounds wait
    for the test to release them (`hold_rounds`) or end at once."""

    hold_rounds: bool = True
    release: trio.Event = field(default_factory=trio.Event)  # lets the running round end
    fail_status: bool = False
    round_began: trio.Event = field(default_factory=trio.Event)  # set and replaced
    loop: ProberLoop = field(init=False)

    def __post_init__(self) -> None:
        self.loop = ProberLoop(
            RoundProgress(), probe_set=lambda now: [], run_round=self._round, interval_s=3600.0
        )

    async def _round(self, targets: Sequence[Target]) -> RoundReport:
        self.round_began.set()
        self.round_began = trio.Event()
        if self.hold_rounds:
            await self.release.wait()
            self.release = trio.Event()
        return RoundReport(started_at=0.0, duration_s=0.0, targets=tuple(targets))

    async def wait_round_running(self, number: int) -> None:
        """Wait (with a deadline) until round `number` (1, 2, ...) is running."""
        with trio.fail_after(TIMEOUT_S):
            while not (self.loop.progress.rounds_started == number and self.loop.progress.running):
                await self.round_began.wait()

    async def finish_round(self) -> None:
        """Release the running round and let the loop go on until it waits again."""
        self.release.set()
        await trio.testing.wait_all_tasks_blocked()

    def healthz(self) -> dict[str, Any]:
        return {"status": "ok", "rounds": self.loop.progress.rounds_finished}

    def status(self) -> dict[str, Any]:
        if self.fail_status:
            raise RuntimeError("boom")
        doc = build_status_document(status_stories.healthy())
        doc["round"]["completed"] = self.loop.progress.rounds_finished
        doc["round"]["running"] = self.loop.progress.running
        return doc

    async def probe_now(self) -> dict[str, Any]:
        await self.loop.probe_now()
        return self.status()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short: a unix socket path must fit in 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="mh", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Served:
    path: str
    agent: FakeAgent
    nursery: trio.Nursery


@pytest.fixture
async def served(socket_dir: Path) -> AsyncIterator[Served]:
    agent = FakeAgent()
    path = str(socket_dir / "run" / "health.sock")
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.loop.run)  # round 1 starts at once and is held
        await nursery.start(
            lambda task_status: serve_admin_api(
                path,
                agent,
                probe_timeout_s=2.0,
                read_timeout_s=0.5,
                max_connections=4,
                task_status=task_status,
            )
        )
        yield Served(path, agent, nursery)
        nursery.cancel_scope.cancel()


async def _raw(path: str, data: bytes) -> bytes:
    """Send raw bytes, read until the server closes."""
    stream = await trio.open_unix_socket(path)
    async with stream:
        await stream.send_all(data)
        chunks = []
        with trio.fail_after(TIMEOUT_S):
            while chunk := await stream.receive_some(65536):
                chunks.append(chunk)
    return b"".join(chunks)


async def test_get_status_and_healthz(served: Served) -> None:
    code, doc = await admin_request(served.path, "GET", "/v1/status", timeout_s=TIMEOUT_S)
    assert code == 200
    assert doc["v"] == 1
    assert doc["summary"]["total"] == 3
    code, doc = await admin_request(served.path, "GET", "/v1/healthz", timeout_s=TIMEOUT_S)
    assert (code, doc) == (200, {"status": "ok", "rounds": 0})


async def test_socket_file_mode_parent_dir_and_removal(socket_dir: Path) -> None:
    path = socket_dir / "new" / "dir" / "health.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admin_api, str(path), FakeAgent())
        info = path.lstat()
        assert stat.S_ISSOCK(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o660
        nursery.cancel_scope.cancel()
    assert not path.exists()


@pytest.mark.parametrize(
    ("method", "target", "code", "error_part"),
    [
        ("GET", "/v1/nope", 404, "no such endpoint: /v1/nope"),
        ("POST", "/v1/status", 405, "method POST not allowed on /v1/status (allowed: GET)"),
        ("GET", "/v1/status/probe", 405, "allowed: PUT"),
        ("DELETE", "/v1/healthz", 405, "allowed: GET"),
    ],
)
async def test_errors_are_json(
    served: Served, method: str, target: str, code: int, error_part: str
) -> None:
    got_code, doc = await admin_request(served.path, method, target, timeout_s=TIMEOUT_S)
    assert got_code == code
    assert error_part in doc["error"]


async def test_405_has_allow_header(served: Served) -> None:
    answer = await _raw(served.path, b"POST /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405 ")
    assert b"\r\nAllow: GET\r\n" in answer


async def test_malformed_request_gets_400_and_close(served: Served) -> None:
    answer = await _raw(served.path, b"THIS IS NOT HTTP\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b'{"error": "malformed request' in answer


async def test_body_too_large_gets_413(served: Served) -> None:
    body = b"x" * (65 * 1024)
    head = b"PUT /v1/status/probe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    answer = await _raw(served.path, head + body)
    assert answer.startswith(b"HTTP/1.1 413 ")


async def test_handler_error_is_500_and_server_goes_on(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    served.agent.fail_status = True
    code, doc = await admin_request(served.path, "GET", "/v1/status", timeout_s=TIMEOUT_S)
    assert code == 500
    assert "internal error" in doc["error"]
    assert "boom" in caplog.text
    code, _ = await admin_request(served.path, "GET", "/v1/healthz", timeout_s=TIMEOUT_S)
    assert code == 200


async def test_keep_alive_serves_several_requests(served: Served) -> None:
    stream = await trio.open_unix_socket(served.path)
    async with stream:
        request = b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        await stream.send_all(request + request)
        data = b""
        with trio.fail_after(TIMEOUT_S):
            while data.count(b"HTTP/1.1 200 ") < 2:
                data += await stream.receive_some(65536)
    assert data.count(b'"status": "ok"') == 2


async def test_probe_waits_for_a_fresh_round_and_status_never_blocks(served: Served) -> None:
    agent = served.agent
    await agent.wait_round_running(1)  # the loop's first round, held
    results: list[tuple[int, dict[str, Any]]] = []

    async def probe() -> None:
        results.append(
            await admin_request(served.path, "PUT", "/v1/status/probe", timeout_s=TIMEOUT_S)
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(probe)
        await trio.testing.wait_all_tasks_blocked()
        # A round is running: GET answers at once with the last state.
        with trio.fail_after(1.0):
            code, doc = await admin_request(served.path, "GET", "/v1/status", timeout_s=1.0)
        assert (code, doc["round"]["running"], doc["round"]["completed"]) == (200, True, 0)
        # Round 1 started before the request: not fresh enough, the answer waits for 2.
        await agent.finish_round()
        await agent.wait_round_running(2)
        assert results == []
        await agent.finish_round()
    assert results[0][0] == 200
    assert results[0][1]["round"]["completed"] == 2


async def test_probe_deadline_gives_504_and_the_round_goes_on(served: Served) -> None:
    agent = served.agent
    code, doc = await admin_request(served.path, "PUT", "/v1/status/probe", timeout_s=TIMEOUT_S)
    assert code == 504
    assert "did not finish within 2s" in doc["error"]
    assert agent.loop.progress.running  # the round was not cancelled with the request
    await agent.finish_round()  # round 1; round 2 (asked for) starts
    await agent.finish_round()
    code, doc = await admin_request(served.path, "GET", "/v1/healthz", timeout_s=TIMEOUT_S)
    assert (code, doc["rounds"]) == (200, 2)


async def test_client_gone_during_probe_does_not_break_the_agent(served: Served) -> None:
    agent = served.agent
    stream = await trio.open_unix_socket(served.path)
    await stream.send_all(b"PUT /v1/status/probe HTTP/1.1\r\nHost: x\r\n\r\n")
    await trio.testing.wait_all_tasks_blocked()
    await stream.aclose()
    await agent.finish_round()
    await agent.wait_round_running(2)
    await agent.finish_round()
    code, doc = await admin_request(served.path, "GET", "/v1/status", timeout_s=TIMEOUT_S)
    assert (code, doc["round"]["completed"], doc["round"]["running"]) == (200, 2, False)


async def test_slow_client_is_dropped_after_read_timeout(served: Served) -> None:
    stream = await trio.open_unix_socket(served.path)
    async with stream:
        await stream.send_all(b"GET /v1/sta")  # and nothing more
        with trio.fail_after(TIMEOUT_S):
            assert await stream.receive_some(100) == b""  # closed by the server (0.5 s)


async def test_connections_are_bounded(served: Served) -> None:
    idle = [await trio.open_unix_socket(served.path) for _ in range(4)]
    try:
        await trio.testing.wait_all_tasks_blocked()
        extra = await trio.open_unix_socket(served.path)
        async with extra:
            with trio.fail_after(TIMEOUT_S):
                try:
                    await extra.send_all(b"GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert await extra.receive_some(100) == b""
                except trio.BrokenResourceError:
                    pass  # closed before our request arrived: just as good
    finally:
        for stream in idle:
            await stream.aclose()
    # Idle slots freed: served again.
    code, _ = await admin_request(served.path, "GET", "/v1/healthz", timeout_s=TIMEOUT_S)
    assert code == 200


async def test_live_socket_is_refused(served: Served) -> None:
    with pytest.raises(AdminSocketError) as info:
        await serve_admin_api(served.path, FakeAgent())
    assert str(info.value) == f"another agent is serving {served.path}: refusing to start"
    # The first server still serves.
    code, _ = await admin_request(served.path, "GET", "/v1/healthz", timeout_s=TIMEOUT_S)
    assert code == 200


async def test_stale_socket_is_replaced(socket_dir: Path) -> None:
    path = str(socket_dir / "health.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays; nobody listens: a crashed agent's leftover
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admin_api, path, FakeAgent())
        code, _ = await admin_request(path, "GET", "/v1/healthz", timeout_s=TIMEOUT_S)
        assert code == 200
        nursery.cancel_scope.cancel()


async def test_a_regular_file_is_not_removed(socket_dir: Path) -> None:
    path = socket_dir / "health.sock"
    path.write_text("precious")
    with pytest.raises(AdminSocketError, match="exists and is not a socket: refusing to start"):
        await serve_admin_api(str(path), FakeAgent())
    assert path.read_text() == "precious"


async def test_unusable_parent_dir_is_one_line(socket_dir: Path) -> None:
    (socket_dir / "file").write_text("")
    with pytest.raises(AdminSocketError) as info:
        await serve_admin_api(str(socket_dir / "file" / "health.sock"), FakeAgent())
    assert str(info.value) == f"cannot create {socket_dir}/file: File exists"


async def test_client_no_such_file(socket_dir: Path) -> None:
    path = str(socket_dir / "missing.sock")
    with pytest.raises(AdminUnavailable) as info:
        await admin_request(path, "GET", "/v1/status", timeout_s=TIMEOUT_S)
    assert str(info.value) == (
        f"cannot reach the meshhealth agent at {path}: no such file (is `meshhealth agent` "
        "running? check `systemctl status meshhealth` / the lab)"
    )


async def test_client_stale_socket(socket_dir: Path) -> None:
    path = str(socket_dir / "stale.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    with pytest.raises(AdminUnavailable, match="connection refused: a stale socket"):
        await admin_request(path, "GET", "/v1/status", timeout_s=TIMEOUT_S)


async def test_client_timeout(socket_dir: Path) -> None:
    path = str(socket_dir / "mute.sock")
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        mute.bind(path)
        mute.listen(4)  # accepts into the backlog, never answers
        with pytest.raises(AdminUnavailable, match=r"no answer within 0.3s"):
            await admin_request(path, "GET", "/v1/status", timeout_s=0.3)
    finally:
        mute.close()


@pytest.mark.parametrize(
    ("host", "path"),
    [
        ("unix:///run/x.sock", "/run/x.sock"),
        ("/run/y.sock", "/run/y.sock"),
        ("rel.sock", "rel.sock"),
    ],
)
def test_socket_path_from_host(host: str, path: str) -> None:
    assert socket_path_from_host(host) == path


@pytest.mark.parametrize("host", ["tcp://127.0.0.1:1", "unix://", ""])
def test_socket_path_from_host_rejects(host: str) -> None:
    with pytest.raises(ValueError):
        socket_path_from_host(host)


# `meshhealth status` in a child process, with only the status command registered (the
# registration in meshhealth.cli.main is checked by test_status_command_is_registered).
_STATUS_MAIN = """
import argparse, sys
from meshhealth.cli import status_cmd
parser = argparse.ArgumentParser(prog="meshhealth")
status_cmd.register(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def test_status_command_is_registered() -> None:
    assert "status_cmd" in main.COMMAND_MODULES


async def _cli(*args: str) -> trio.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    env.pop("MESHHEALTH_SOCKET", None)
    return await trio.run_process(
        [sys.executable, "-c", _STATUS_MAIN, "status", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )


async def test_cli_status_text_json_and_probe(served: Served) -> None:
    result = await _cli("-H", f"unix://{served.path}")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert text.startswith("Probe time:   2026-11-22T10:00:00Z\n")
    assert "Cluster health:   3/3 reachable   (this node's own probes: " in text

    result = await _cli("-H", f"unix://{served.path}", "-o", "json")
    assert result.returncode == 0
    assert b'"summary": {' in result.stdout

    served.agent.hold_rounds = False
    await served.agent.finish_round()  # round 1; from now on rounds end at once
    result = await _cli("-H", served.path, "--probe", "--verbose")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "  Name " in text
    assert served.agent.loop.progress.rounds_finished == 2


async def test_cli_exit_2_with_one_line_when_no_agent(socket_dir: Path) -> None:
    path = str(socket_dir / "none.sock")
    result = await _cli("-H", f"unix://{path}")
    assert result.returncode == 2
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert lines == [
        f"meshhealth status: cannot reach the meshhealth agent at {path}: no such file "
        "(is `meshhealth agent` running? check `systemctl status meshhealth` / the lab)"
    ]
