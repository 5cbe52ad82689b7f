"""The /hello responder and `meshhealth responder`, on real loopback sockets."""

from __future__ import annotations

import argparse
import functools
import json
import re
import signal
import socket
import subprocess
import sys

import pytest
import trio

from meshhealth import __version__, defaults, model
from meshhealth.addresses import format_address, parse_listen
from meshhealth.cli import responder_cmd
from meshhealth.probe import hello_reply
from meshhealth.probe.http import http_probe
from meshhealth.probe.responder import ResponderStats, serve_responder
from tests.plugins.ipv6_loopback import IPV6_LOOPBACK
from tests.repo_paths import REPO_ROOT


async def start_responder(
    nursery: trio.Nursery,
    stats: ResponderStats,
    host: str = "127.0.0.1",
    *,
    max_connections: int = defaults.RESPONDER_MAX_CONNECTIONS,
    read_timeout_s: float = defaults.RESPONDER_READ_TIMEOUT_S,
    node_name: str = "",
) -> int:
    serve = functools.partial(
        serve_responder,
        host,
        0,
        stats=stats,
        max_connections=max_connections,
        read_timeout_s=read_timeout_s,
        node_name=node_name,
    )
    port: int = await nursery.start(serve)
    return port


async def exchange(port: int, request: bytes, host: str = "127.0.0.1") -> bytes:
    """Send raw bytes, read until the server closes (or resets, or 5 s pass)."""
    stream = await trio.open_tcp_stream(host, port)
    data = b""
    async with stream:
        with trio.move_on_after(5):
            try:
                await stream.send_all(request)
                while chunk := await stream.receive_some(65536):
                    data += chunk
            except trio.BrokenResourceError:
                pass  # a connection closed at once (server full): what we got is the answer
    return data


def status_codes(raw: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"(?:^|\n)HTTP/1\.1 (\d{3}) ", raw)]


# --- pure parts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        (b"GET", b"/hello", 200),
        (b"HEAD", b"/hello", 200),
        (b"GET", b"/hello?probe=1", 200),
        (b"POST", b"/hello", 405),
        (b"DELETE", b"/hello", 405),
        (b"GET", b"/", 404),
        (b"GET", b"/hello/", 404),
        (b"POST", b"/other", 404),
        (b"GET", b"*", 404),
    ],
)
def test_route(method: bytes, target: bytes, status: int) -> None:
    reply = hello_reply.route(method, target, "node1")
    assert reply.status_code == status
    headers = dict(reply.headers)
    assert headers["Content-Length"] == str(len(reply.body))
    assert reply.head_only == (method == b"HEAD")
    if status == 405:
        assert headers["Allow"] == "GET, HEAD"


def test_hello_body_says_who_answers() -> None:
    doc = json.loads(hello_reply.hello_body("node7"))
    assert doc == {"status": "ok", "node": "node7", "version": __version__}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1", ("127.0.0.1", defaults.HTTP_PORT)),
        ("127.0.0.1:4241", ("127.0.0.1", 4241)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:4240", ("::1", 4240)),
        ("[::1]", ("::1", defaults.HTTP_PORT)),
        ("::1", ("::1", defaults.HTTP_PORT)),
        ("fd00::0:1", ("fd00::1", defaults.HTTP_PORT)),
    ],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not an IP address"),
        ("node1:4240", "not an IP address"),
        ("127.0.0.1:", "not a port number"),
        ("127.0.0.1:http", "not a port number"),
        ("127.0.0.1:65536", "not a port number"),
        ("127.0.0.1:-1", "not a port number"),
        ("[::1", "missing ']'"),
        ("[::1]4240", "expected ':PORT'"),
        ("[127.0.0.1]:4240", "brackets are for IPv6"),
        ("::1:4240:", "not an IP address"),
    ],
)
def test_parse_listen_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_listen(text)


@pytest.mark.parametrize(
    ("ip", "port", "text"), [("127.0.0.1", 1, "127.0.0.1:1"), ("::1", 2, "[::1]:2")]
)
def test_format_address(ip: str, port: int, text: str) -> None:
    assert format_address(ip, port) == text


# --- the server ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "codes", "must_contain"),
    [
        (b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", [200], b'"node":"n1"'),
        (b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", [404], b"not found"),
        (
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
            [405],
            b"Allow: GET, HEAD",
        ),
        (b"this is not http\r\n\r\n", [400], b"Connection: close"),
        (b"GET /hello HTTP/1.1\r\n\r\n", [400], b"error 400"),  # HTTP/1.1 without Host
        (
            b"GET /hello HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20_000 + b"\r\n\r\n",
            [431],
            b"error 431",
        ),
        (
            b"POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 100_000,
            [413],
            b"error 413",
        ),
        # Keep-alive: several requests on one connection, the last one closes it.
        (
            b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            [200, 404, 200],
            b"",
        ),
    ],
)
async def test_answers(
    nursery: trio.Nursery, request_bytes: bytes, codes: list[int], must_contain: bytes
) -> None:
    stats = ResponderStats()
    port = await start_responder(nursery, stats, node_name="n1")
    raw = await exchange(port, request_bytes)
    assert status_codes(raw) == codes
    assert must_contain in raw
    for code in set(codes):
        assert stats.responses_by_status[code] == codes.count(code)


async def test_head_has_headers_and_no_body(nursery: trio.Nursery) -> None:
    port = await start_responder(nursery, ResponderStats())
    raw = await exchange(port, b"HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Type: application/json" in head
    assert b"Content-Length: " in head
    assert body == b""


@pytest.mark.netns
@pytest.mark.usefixtures("ipv6_loopback")
async def test_ipv6(nursery: trio.Nursery) -> None:
    stats = ResponderStats()
    port = await start_responder(nursery, stats, host="::1")
    result = await http_probe("::1", port, timeout_s=5)
    assert result.ok, result
    assert stats.responses_by_status[200] == 1


async def test_slowloris_is_dropped_and_others_are_served(nursery: trio.Nursery) -> None:
    stats = ResponderStats()
    read_timeout_s = 0.5
    port = await start_responder(nursery, stats, read_timeout_s=read_timeout_s)
    request = b"GET /hello HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\n\r\n"
    dropped_after_s: float | None = None
    served_meanwhile: list[model.ProbeResult] = []
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        t0 = trio.current_time()
        for i in range(len(request)):  # one byte every 0.1 s: 5 s for the whole request
            try:
                await stream.send_all(request[i : i + 1])
            except trio.BrokenResourceError:
                dropped_after_s = trio.current_time() - t0
                break
            if i == 2:  # the slow client is connected and talking: a normal client now
                served_meanwhile.append(await http_probe("127.0.0.1", port, timeout_s=2))
            with trio.move_on_after(0.1):
                if await stream.receive_some(4096) == b"":
                    dropped_after_s = trio.current_time() - t0
                    break
    assert dropped_after_s is not None, "slow client was never dropped"
    assert read_timeout_s <= dropped_after_s < read_timeout_s + 1.5
    assert [r.status for r in served_meanwhile] == [model.ProbeStatus.OK]
    assert stats.read_timeouts == 1
    assert stats.responses_by_status[200] == 1


async def wait_until(predicate: object, timeout_s: float = 5) -> None:
    assert callable(predicate)
    with trio.fail_after(timeout_s):
        while not predicate():  # noqa: ASYNC110 - polling a counter of another task
            await trio.sleep(0.01)


async def test_connection_cap(nursery: trio.Nursery) -> None:
    stats = ResponderStats()
    max_connections = 4
    port = await start_responder(
        nursery, stats, max_connections=max_connections, read_timeout_s=1.0
    )
    idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(max_connections)]
    try:
        await wait_until(lambda: stats.active_connections == max_connections)
        # Full: a new connection is accepted and closed at once; the prober sees a reset
        # well before its deadline instead of waiting in the backlog.
        t0 = trio.current_time()
        full = await http_probe("127.0.0.1", port, timeout_s=5)
        assert full.status is model.ProbeStatus.RESET, full
        assert trio.current_time() - t0 < 1.0
        assert stats.connections_rejected >= 1
        assert stats.active_connections == max_connections
        # The idle ones run out of time and free their slots; then probes pass again.
        await wait_until(lambda: stats.read_timeouts == max_connections)
        result = await http_probe("127.0.0.1", port, timeout_s=5)
        assert result.ok, result
    finally:
        for stream in idle:
            await stream.aclose()


async def test_malformed_flood(nursery: trio.Nursery) -> None:
    stats = ResponderStats()
    port = await start_responder(nursery, stats, max_connections=64)
    flood = 200
    answers: list[bytes] = []

    async def garbage(i: int) -> None:
        answers.append(await exchange(port, b"\x16\x03\x01 garbage %d\r\n\r\n" % i))

    async with trio.open_nursery() as clients:
        for i in range(flood):
            clients.start_soon(garbage, i)
    # Each got a 400, or (when more than max_connections were in flight) was closed at once.
    assert len(answers) == flood
    assert all(status_codes(a) in ([400], []) for a in answers)
    assert stats.responses_by_status[400] == stats.protocol_errors
    assert stats.protocol_errors + stats.connections_rejected == flood
    assert stats.protocol_errors >= 64
    result = await http_probe("127.0.0.1", port, timeout_s=5)
    assert result.ok, result
    await wait_until(lambda: stats.active_connections == 0)


async def test_cancellation_closes_listener_and_connections() -> None:
    stats = ResponderStats()
    async with trio.open_nursery() as nursery:
        port = await start_responder(nursery, stats)
        client = await trio.open_tcp_stream("127.0.0.1", port)
        await wait_until(lambda: stats.active_connections == 1)
        nursery.cancel_scope.cancel()
    async with client:
        with trio.fail_after(5):
            assert await client.receive_some(10) == b""  # the server side was closed
    refused = await http_probe("127.0.0.1", port, timeout_s=5)
    assert refused.status is model.ProbeStatus.REFUSED
    # The port is free again: a new responder binds it.
    async with trio.open_nursery() as nursery:
        again = await nursery.start(serve_responder, "127.0.0.1", port)
        assert again == port
        assert (await http_probe("127.0.0.1", port, timeout_s=5)).ok
        nursery.cancel_scope.cancel()


async def test_bind_errors_are_raised_before_started() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        async with trio.open_nursery() as nursery:
            with pytest.raises(OSError, match="in use"):
                await nursery.start(serve_responder, "127.0.0.1", port)


async def test_bad_host_is_a_programmer_error() -> None:
    with pytest.raises(ValueError, match="does not appear"):
        await serve_responder("localhost", 0)


# --- the command -----------------------------------------------------------------------


def run_command(argv: list[str]) -> int:
    """Parse with this command's own parser (as meshhealth.cli.main does) and run it."""
    parser = argparse.ArgumentParser(prog="meshhealth")
    responder_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ("nonsense", "bad --listen: not an IP address: 'nonsense'"),
        ("127.0.0.1:99999", "bad --listen: not a port number"),
        # TEST-NET-1: not an address of this host; bind fails, nothing is sent.
        ("192.0.2.1:4240", "cannot listen on 192.0.2.1:4240: cannot assign requested address"),
    ],
)
def test_command_usage_errors(
    listen: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_command(["responder", "--listen", listen]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err


def test_command_address_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert run_command(["responder", "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"meshhealth responder: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )


@pytest.mark.parametrize(
    ("listen", "host", "sig"),
    [
        ("127.0.0.1:0", "127.0.0.1", signal.SIGTERM),
        pytest.param("[::1]:0", "::1", signal.SIGINT, marks=IPV6_LOOPBACK, id="::1"),
    ],
)
async def test_command_serves_until_signalled(
    listen: str, host: str, sig: signal.Signals, request: pytest.FixtureRequest
) -> None:
    argv = [sys.executable, "-m", "meshhealth", "responder", "--listen", listen, "--passive"]
    if ":" in host:  # the process joins the test's namespace (`ip netns exec` keeps the PID)
        argv = ["ip", "netns", "exec", request.getfixturevalue("ipv6_loopback"), *argv]
    proc = await trio.lowlevel.open_process(
        argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(20):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(1)
                assert chunk, "responder exited before listening"
                line += chunk
        text = line.decode().strip()
        prefix = f"responder listening on {format_address(host, 0)[:-1]}"
        assert text.startswith(prefix), text
        assert text.endswith(" (passive)")
        port = int(text[len(prefix) :].split()[0])
        result = await http_probe(host, port, timeout_s=5)
        assert result.ok, result
        proc.send_signal(sig)
        with trio.fail_after(10):
            code = await proc.wait()
        assert code == 0
        assert proc.stderr is not None
        assert await proc.stderr.receive_some(65536) == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.move_on_after(5):
                await proc.wait()


# --- one outsider cannot take every slot (per-source caps, slots kept for peers) ---------


@pytest.mark.parametrize(
    ("active", "from_source", "trusted", "refused"),
    [
        (0, 0, False, None),
        (10, 3, False, "per-source"),  # this address holds 3 already
        (10, 3, True, "per-source"),  # a registered node too: it needs far fewer
        (16, 0, False, "reserved"),  # the last 4 of 20 are kept for registered nodes
        (16, 0, True, None),
        (20, 0, True, "full"),
        (15, 2, False, None),
    ],
)
def test_admission(active: int, from_source: int, trusted: bool, refused: str | None) -> None:
    from meshhealth.http_server import admission

    assert (
        admission(
            active, from_source, trusted=trusted, max_connections=20, per_source=3, reserved=4
        )
        == refused
    )


def _connect_from(source: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.settimeout(5)
    return sock


def _served(sock: socket.socket) -> bool:
    """Whether the server answers a probe on this connection (a refused one is closed)."""
    try:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        return sock.recv(4096).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


async def test_an_outsider_cannot_hold_every_slot() -> None:
    """max 8, 3 per address, the last 3 for registered nodes: one outsider gets 3
    connections, outsiders together 5, and a registered node still gets its probe in."""
    stats = ResponderStats()
    registered = "127.0.0.9"
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            functools.partial(
                serve_responder,
                "127.0.0.1",
                0,
                max_connections=8,
                per_source=3,
                reserved=3,
                trusted=lambda address: address == registered,
                stats=stats,
                read_timeout_s=30.0,
            )
        )

        def scenario() -> None:
            held = [_connect_from("127.0.0.2", port) for _ in range(4)]
            held += [_connect_from("127.0.0.3", port) for _ in range(3)]
            try:
                # 127.0.0.2: 3 served, the 4th closed; 127.0.0.3: 2 more fill the 5
                # slots for outsiders, its 3rd is closed
                served = [_served(sock) for sock in held]
                assert served == [True, True, True, False, True, True, False]
                peer = _connect_from(registered, port)
                try:
                    assert _served(peer)  # a reserved slot
                finally:
                    peer.close()
            finally:
                for sock in held:
                    sock.close()

        await trio.to_thread.run_sync(scenario)
        assert (stats.refused_per_source, stats.refused_reserved) == (1, 1)
        nursery.cancel_scope.cancel()
