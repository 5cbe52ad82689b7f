"""The health endpoint's one-thread /hello server (no trio), on real loopback sockets.

The server runs in a worker thread of the test; the clients are trio streams.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest
import trio

from meshhealth import defaults, http_server
from meshhealth.probe import hello_reply
from meshhealth.probe.hello_server import HelloServer, open_listener
from meshhealth.probe.http import http_probe
from tests.repo_paths import REPO_ROOT


@asynccontextmanager
async def running_server(
    host: str = "127.0.0.1",
    *,
    max_connections: int = defaults.RESPONDER_MAX_CONNECTIONS,
    read_timeout_s: float = defaults.RESPONDER_READ_TIMEOUT_S,
) -> AsyncIterator[int]:
    listener = open_listener(host, 0)
    stop_read, stop_write = socket.socketpair()
    server = HelloServer(
        listener,
        node_name="n1",
        max_connections=max_connections,
        read_timeout_s=read_timeout_s,
        stop_fds=(stop_read.fileno(),),
    )
    stop_fd = stop_read.fileno()
    returned: list[int] = []
    with listener, stop_read, stop_write:
        async with trio.open_nursery() as nursery:

            async def serve() -> None:
                returned.append(await trio.to_thread.run_sync(server.serve_forever))

            nursery.start_soon(serve)
            try:
                yield listener.getsockname()[1]
            finally:
                stop_write.send(b"x")
    assert returned == [stop_fd]


async def exchange(port: int, request: bytes, *, wait_s: float = 5) -> bytes:
    """Send raw bytes, read until the server closes (or resets, or `wait_s` pass)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    data = b""
    async with stream:
        with trio.move_on_after(wait_s):
            try:
                await stream.send_all(request)
                while chunk := await stream.receive_some(65536):
                    data += chunk
            except trio.BrokenResourceError:
                pass
    return data


GET = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"


def test_server_header_is_the_agents() -> None:
    assert hello_reply.SERVER_HEADER == http_server.SERVER_HEADER


async def test_answers_like_the_agents_responder() -> None:
    async with running_server() as port:
        data = await exchange(
            port, GET + b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
    first, second = data.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"200 OK\r\n")
    assert hello_reply.hello_body("n1") in first
    assert second.startswith(b"404 ")
    assert b"Connection: close" in second


async def test_the_prober_reads_it() -> None:
    async with running_server() as port:
        result = await http_probe("127.0.0.1", port, timeout_s=5)
    assert result.ok, result


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"200"),
        (b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", b"405"),
        (b"garbage\r\n\r\n", b"400"),
        (b"GET /hello HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 10_000, b"431"),
        (
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
            + b"b" * (defaults.RESPONDER_MAX_BODY_BYTES + 1),
            b"413",
        ),
    ],
)
async def test_status_codes(request_bytes: bytes, status: bytes) -> None:
    async with running_server() as port:
        data = await exchange(port, request_bytes)
    assert data.startswith(b"HTTP/1.1 " + status), data[:80]
    if request_bytes.startswith(b"HEAD"):
        head, _, body = data.partition(b"\r\n\r\n")
        assert body == b""
        assert b"Content-Length: " + str(len(hello_reply.hello_body("n1"))).encode() in head


async def test_slow_client_is_dropped_and_others_are_served() -> None:
    async with running_server(read_timeout_s=0.3) as port:
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        async with slow:
            await slow.send_all(b"GET /hel")
            assert (await exchange(port, GET, wait_s=0.2)).startswith(b"HTTP/1.1 200")
            with trio.fail_after(5):  # the server closes it after its 0.3 s cycle
                with suppress(trio.BrokenResourceError):
                    assert await slow.receive_some(100) == b""


async def test_connection_cap() -> None:
    async with running_server(max_connections=1) as port:
        held = await trio.open_tcp_stream("127.0.0.1", port)
        async with held:
            await held.send_all(GET)  # answered: the server holds it for keep-alive
            assert (await held.receive_some(65536)).startswith(b"HTTP/1.1 200")
            assert await exchange(port, GET) == b""  # accepted and closed at once
        with trio.fail_after(5):  # the slot comes back (polled: no event to wait on)
            answer = b""
            while not answer.startswith(b"HTTP/1.1 200"):
                answer = await exchange(port, GET, wait_s=0.2)


def test_idle_server_has_no_timeout() -> None:
    listener = open_listener("127.0.0.1", 0)
    with listener:
        assert HelloServer(listener)._timeout_s() is None


def test_bad_host_and_bind_errors() -> None:
    with pytest.raises(ValueError):
        open_listener("localhost", 0)
    with open_listener("127.0.0.1", 0) as taken, pytest.raises(OSError):
        open_listener("127.0.0.1", taken.getsockname()[1])


def _exited(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (it no longer runs)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def test_exit_with_parent() -> None:
    """The agent starts its endpoint with --exit-with-parent: a SIGKILLed parent leaves
    no responder behind (a pidfd tells it; no polling)."""
    responder = [
        sys.executable,
        "-m",
        "meshhealth",
        "responder",
        "--listen",
        "127.0.0.1:0",
        "--passive",
        "--exit-with-parent",
    ]
    # The parent starts the responder, says its PID once it listens, waits to be killed.
    parent_code = (
        "import subprocess, time\n"
        f"p = subprocess.Popen({responder!r}, stdout=subprocess.PIPE)\n"
        "assert b'listening' in p.stdout.readline()\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    try:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()
        deadline = time.monotonic() + 20
        while not _exited(pid):  # polled with a deadline: no event for another's child
            assert time.monotonic() < deadline, f"responder {pid} outlived its parent"
            time.sleep(0.05)
    finally:
        if not _exited(pid):
            os.kill(pid, signal.SIGKILL)
