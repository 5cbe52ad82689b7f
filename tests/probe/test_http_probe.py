"""meshhealth.probe.http against real loopback sockets: our responder and tiny servers."""

from __future__ import annotations

import errno
import functools
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from meshhealth import __version__, model
from meshhealth.probe import http
from meshhealth.probe.http import http_probe
from meshhealth.probe.responder import serve_responder
from tests.plugins.ipv6_loopback import IPV6_LOOPBACK

Status = model.ProbeStatus
Handler = Callable[[trio.SocketStream], Awaitable[None]]


async def start_server(nursery: trio.Nursery, handler: Handler, host: str = "127.0.0.1") -> int:
    """A tiny TCP server on host:<free port> running `handler` per connection."""
    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host=host))
    port: int = listeners[0].socket.getsockname()[1]
    return port


async def read_request_head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def silent(stream: trio.SocketStream) -> None:
    """Read everything, answer nothing; end when the client hangs up."""
    while await stream.receive_some(4096):
        pass


@pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=IPV6_LOOPBACK, id="::1")])
async def test_ok_against_the_responder(nursery: trio.Nursery, host: str) -> None:
    port = await nursery.start(serve_responder, host, 0)
    before = time.time()
    result = await http_probe(host, port, timeout_s=5)
    assert result.status is Status.OK, result
    assert result.text == "OK"
    assert (result.sent, result.received, result.loss) == (1, 1, 0.0)
    assert len(result.rtts_s) == 1
    assert 0 < result.rtts_s[0] < 5
    assert before <= result.started_at <= time.time()


@pytest.mark.parametrize(
    ("host", "expected_host_header"),
    [
        ("127.0.0.1", "127.0.0.1:{port}"),
        pytest.param("::1", "[::1]:{port}", marks=IPV6_LOOPBACK, id="::1"),
    ],
)
async def test_request_is_a_plain_get_with_host_and_close(
    nursery: trio.Nursery, host: str, expected_host_header: str
) -> None:
    heads: list[bytes] = []

    async def capture(stream: trio.SocketStream) -> None:
        heads.append(await read_request_head(stream))
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    port = await start_server(nursery, capture, host)
    result = await http_probe(host, port, timeout_s=5, path="/hello")
    assert result.ok, result
    lines = heads[0].decode().split("\r\n")
    assert lines[0] == "GET /hello HTTP/1.1"
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
    assert headers["host"] == expected_host_header.format(port=port)
    assert headers["user-agent"] == f"meshhealth/{__version__}"
    assert headers["connection"] == "close"


async def test_closed_port_is_refused() -> None:
    # A bound socket that does not listen: the kernel answers SYNs with RST, and the
    # port stays ours for the whole test.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        result = await http_probe("127.0.0.1", port, timeout_s=5)
    assert result.status is Status.REFUSED
    assert result.text == "Connection refused"
    assert (result.rtts_s, result.received, result.loss) == ((), 0, 1.0)


async def test_silent_server_times_out_at_the_deadline(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    port = await start_server(nursery, silent)
    t0 = trio.current_time()
    result = await http_probe("127.0.0.1", port, timeout_s=7.5)
    elapsed_s = trio.current_time() - t0
    assert result.status is Status.TIMEOUT
    assert result.text == "Connection timed out"
    assert result.rtts_s == ()
    assert 7.5 <= elapsed_s < 7.6


async def test_full_backlog_times_out() -> None:
    # A listener that never accepts, with its backlog filled: further SYNs are dropped.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [trio.socket.socket() for _ in range(4)]
        try:
            for filler in fillers:
                with trio.move_on_after(0.2):
                    await filler.connect(("127.0.0.1", port))
            t0 = trio.current_time()
            result = await http_probe("127.0.0.1", port, timeout_s=0.3)
            elapsed_s = trio.current_time() - t0
        finally:
            for filler in fillers:
                filler.close()
    assert result.status is Status.TIMEOUT
    assert 0.3 <= elapsed_s < 2.0


async def rst_at_once(stream: trio.SocketStream) -> None:
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def rst_after_request(stream: trio.SocketStream) -> None:
    await read_request_head(stream)
    await rst_at_once(stream)


async def close_after_request(stream: trio.SocketStream) -> None:
    await read_request_head(stream)
    await stream.aclose()


@pytest.mark.parametrize("handler", [rst_at_once, rst_after_request, close_after_request])
async def test_server_that_hangs_up_is_reset(nursery: trio.Nursery, handler: Handler) -> None:
    port = await start_server(nursery, handler)
    result = await http_probe("127.0.0.1", port, timeout_s=5)
    assert result.status is Status.RESET, result
    assert result.text == "Connection reset"


BIG_BODY = b"x" * (1024 * 1024)


@pytest.mark.parametrize(
    ("reply", "hang_up", "status", "text"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False, Status.OK, "OK"),
        (b"HTTP/1.0 200 OK\r\n\r\nbody until the close", True, Status.OK, "OK"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            False,
            Status.OK,
            "OK",
        ),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            False,
            Status.OK,
            "OK",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BIG_BODY) + BIG_BODY,
            False,
            Status.OK,
            "OK",
        ),
        (
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            False,
            Status.HTTP_ERROR,
            "HTTP 404",
        ),
        (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
            False,
            Status.HTTP_ERROR,
            "HTTP 503",
        ),
        (
            b"HTTP/1.1 301 Moved\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n",
            False,
            Status.HTTP_ERROR,
            "HTTP 301",
        ),
        # Not HTTP at all, and the server keeps the connection open: no waiting for it.
        (b"SSH-2.0-OpenSSH_9.2\r\n", False, Status.INVALID, "Invalid response"),
        (b"\x00\x01\x02\x03\x04\x05", False, Status.INVALID, "Invalid response"),
        (b"HTTP/1.1 two hundred\r\n\r\n", False, Status.INVALID, "Invalid response"),
        (
            b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
            False,
            Status.INVALID,
            "Invalid response",
        ),
        # Cut short: the server hangs up in the middle of the response.
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            True,
            Status.RESET,
            "Connection reset",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Le", True, Status.RESET, "Connection reset"),
        (b"HTT", True, Status.RESET, "Connection reset"),
    ],
)
async def test_replies_are_classified(
    nursery: trio.Nursery, reply: bytes, hang_up: bool, status: Status, text: str
) -> None:
    async def answer(stream: trio.SocketStream) -> None:
        await read_request_head(stream)
        try:
            await stream.send_all(reply)
        except trio.BrokenResourceError:
            return  # the prober stopped reading (body cap): fine
        if hang_up:
            await stream.aclose()
        else:
            await trio.sleep_forever()

    port = await start_server(nursery, answer)
    result = await http_probe("127.0.0.1", port, timeout_s=5)
    assert result.status is status, result
    assert result.text == text
    responded = status in (Status.OK, Status.HTTP_ERROR)
    assert len(result.rtts_s) == (1 if responded else 0)
    assert result.received == (1 if status is Status.OK else 0)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (errno.ECONNREFUSED, Status.REFUSED),
        (errno.ECONNRESET, Status.RESET),
        (errno.EPIPE, Status.RESET),
        (errno.EHOSTUNREACH, Status.UNREACHABLE),
        (errno.ENETUNREACH, Status.UNREACHABLE),
        (errno.ETIMEDOUT, Status.TIMEOUT),
        (errno.EADDRNOTAVAIL, Status.ERROR),
    ],
)
def test_os_errors_are_classified(code: int, status: Status) -> None:
    outcome = http.classify_os_error(OSError(code, os.strerror(code)))
    assert outcome.status is status
    assert outcome.detail == ("" if status is not Status.ERROR else os.strerror(code))


@pytest.mark.parametrize(
    ("ip", "port", "expected"),
    [
        ("10.0.0.1", 4240, "10.0.0.1:4240"),
        ("fd00::1", 4240, "[fd00::1]:4240"),
        ("fe80::1%eth0", 80, "[fe80::1]"),
        ("10.0.0.1", 80, "10.0.0.1"),
    ],
)
def test_host_header(ip: str, port: int, expected: str) -> None:
    import ipaddress

    assert http.host_header(ipaddress.ip_address(ip), port) == expected


async def test_bad_ip_is_a_programmer_error() -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6"):
        await http_probe("not-an-ip", 80)


async def test_every_path_closes_its_socket(nursery: trio.Nursery) -> None:
    silent_port = await start_server(nursery, silent)
    ok_port = await nursery.start(serve_responder, "127.0.0.1", 0)
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        refused_port = bound.getsockname()[1]
        before = open_fds()
        results = []
        for _ in range(10):
            results.append(await http_probe("127.0.0.1", silent_port, timeout_s=0.02))
            results.append(await http_probe("127.0.0.1", refused_port, timeout_s=1))
            results.append(await http_probe("127.0.0.1", ok_port, timeout_s=1))
            with trio.move_on_after(0.01):  # cancelled from outside, mid-probe
                await http_probe("127.0.0.1", silent_port, timeout_s=5)
        assert {r.status for r in results} == {Status.TIMEOUT, Status.REFUSED, Status.OK}
        # The servers' side of the sockets close in their own tasks: give them a moment.
        for _ in range(500):
            if open_fds() <= before:
                break
            await trio.sleep(0.01)
        assert open_fds() <= before


async def test_deadline_covers_the_whole_response(nursery: trio.Nursery) -> None:
    # A server that trickles a valid response never lets a per-read timeout fire; the
    # probe's deadline is for connect + the whole response.
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def trickle(stream: trio.SocketStream) -> None:
        await read_request_head(stream)
        for i in range(len(reply)):
            await stream.send_all(reply[i : i + 1])
            await trio.sleep(0.05)

    port = await start_server(nursery, trickle)
    t0 = trio.current_time()
    result = await http_probe("127.0.0.1", port, timeout_s=0.3)
    assert result.status is Status.TIMEOUT, result
    assert 0.3 <= trio.current_time() - t0 < 1.5
