"""The TCP connect probe against real loopback sockets: an open port, a closed port
(refused), a port that never answers (timeout, in a namespace that drops SYNs)."""

from __future__ import annotations

import contextlib
import socket

import pytest
import trio

from meshhealth import model
from meshhealth.probe.tcp_connect import tcp_connect_probe
from tests.plugins.ipv6_loopback import IPV6_LOOPBACK

Status = model.ProbeStatus


@pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=IPV6_LOOPBACK, id="::1")])
async def test_an_open_port_is_ok_and_timed(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind((host, 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        result = await tcp_connect_probe(host, port, timeout_s=5)
        accepted, _ = listener.accept()  # the probe's connection reached the listener
        accepted.close()
    assert result.status is Status.OK, result
    assert (result.sent, result.received) == (1, 1)
    assert result.rtt_s is not None and 0 < result.rtt_s < 5
    assert result.text == "OK"


async def test_a_closed_port_is_refused_at_once() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: the kernel answers RST
        with trio.fail_after(2):
            result = await tcp_connect_probe("127.0.0.1", port, timeout_s=5)
    assert result.status is Status.REFUSED, result
    assert result.text == "Connection refused"
    assert (result.received, result.rtts_s) == (0, ())


async def test_a_full_backlog_that_never_answers_times_out() -> None:
    """A listener whose backlog is full and never accepts: the kernel drops the SYN, as
    a firewall that DROPs does, so the probe times out (not refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            # fill the accept queue (backlog 0 holds one) and the SYN queue's allowance
            for _ in range(4):
                filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                filler.setblocking(False)
                fillers.append(filler)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            result = await tcp_connect_probe("127.0.0.1", port, timeout_s=0.5)
        finally:
            for filler in fillers:
                filler.close()
    assert result.status is Status.TIMEOUT, result
    assert result.text == "Connection timed out"


async def test_not_an_ip() -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        await tcp_connect_probe("example.com", 22)
