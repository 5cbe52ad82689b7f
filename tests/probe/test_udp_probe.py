"""The UDP echo probe against real loopback sockets: our responder, a responder that
drops, one that answers wrong, a closed port."""

from __future__ import annotations

import functools

import pytest
import trio

from meshhealth import model
from meshhealth.probe.udp_echo import echo_reply, echo_request
from meshhealth.probe.udp_probe import udp_probe
from meshhealth.probe.udp_responder import EchoGate, UdpEchoStats, serve_udp_echo
from tests.plugins.ipv6_loopback import IPV6_LOOPBACK

Status = model.ProbeStatus
SHORT_S = 0.3  # how long a probe waits for what will never come


async def start_echo(
    nursery: trio.Nursery, host: str = "127.0.0.1", *, trusted: set[str] | None = None
) -> tuple[int, UdpEchoStats]:
    stats = UdpEchoStats()
    gate = EchoGate(trusted=None if trusted is None else trusted.__contains__)
    port: int = await nursery.start(
        functools.partial(serve_udp_echo, gate=gate, stats=stats), host, 0
    )
    return port, stats


async def start_fake(
    nursery: trio.Nursery, answer: functools.partial[bytes | None] | None = None
) -> tuple[int, list[tuple[str, int]]]:
    """A UDP server on 127.0.0.1 that records its peers and sends `answer(datagram,
    index)` back (nothing when None)."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    peers: list[tuple[str, int]] = []

    async def serve() -> None:
        with sock:
            while True:
                datagram, peer = await sock.recvfrom(512)
                peers.append(peer)
                reply = None if answer is None else answer(datagram, len(peers) - 1)
                if reply is not None:
                    await sock.sendto(reply, peer)

    nursery.start_soon(serve)
    return sock.getsockname()[1], peers


@pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=IPV6_LOOPBACK, id="::1")])
async def test_every_datagram_comes_back(nursery: trio.Nursery, host: str) -> None:
    port, stats = await start_echo(nursery, host)
    result = await udp_probe(host, port, source_ports=4, timeout_s=5)
    assert result.status is Status.OK, result
    assert (result.sent, result.received, result.loss) == (4, 4, 0.0)
    assert len(result.rtts_s) == 4
    assert all(0 < rtt < 5 for rtt in result.rtts_s)
    assert stats.answered == 4


async def test_each_datagram_leaves_from_its_own_source_port(nursery: trio.Nursery) -> None:
    port, peers = await start_fake(nursery, functools.partial(_echo_all))
    result = await udp_probe("127.0.0.1", port, source_ports=6, timeout_s=5)
    assert result.ok, result
    assert len({peer for peer in peers}) == 6


def _echo_all(datagram: bytes, index: int) -> bytes | None:
    return echo_reply(datagram)


def _drop_first(datagram: bytes, index: int) -> bytes | None:
    return None if index == 0 else echo_reply(datagram)


def _wrong_cookie(datagram: bytes, index: int) -> bytes | None:
    reply = echo_reply(datagram)
    assert reply is not None
    return reply[:-1] + bytes((reply[-1] ^ 0xFF,))


async def test_a_dropped_datagram_is_loss_not_retried(nursery: trio.Nursery) -> None:
    port, peers = await start_fake(nursery, functools.partial(_drop_first))
    result = await udp_probe("127.0.0.1", port, source_ports=4, timeout_s=SHORT_S)
    assert result.status is Status.TIMEOUT, result
    assert (result.sent, result.received) == (4, 3)
    assert result.loss == pytest.approx(0.25)
    assert result.detail == "1 of 4 datagrams lost"
    assert len(peers) == 4  # nothing was sent again


async def test_a_reply_with_another_cookie_does_not_count(nursery: trio.Nursery) -> None:
    port, _ = await start_fake(nursery, functools.partial(_wrong_cookie))
    result = await udp_probe("127.0.0.1", port, source_ports=2, timeout_s=SHORT_S)
    assert result.status is Status.TIMEOUT, result
    assert result.received == 0


async def test_a_silent_port_times_out(nursery: trio.Nursery) -> None:
    port, peers = await start_fake(nursery)
    with trio.fail_after(5):
        result = await udp_probe("127.0.0.1", port, source_ports=4, timeout_s=SHORT_S)
    assert result.status is Status.TIMEOUT, result
    assert (result.sent, result.received, result.loss) == (4, 0, 1.0)
    assert len(peers) == 4


async def test_a_closed_port_is_refused() -> None:
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nobody listens there now: the kernel answers ICMP port unreachable
    result = await udp_probe("127.0.0.1", port, source_ports=4, timeout_s=2)
    assert result.status is Status.REFUSED, result
    assert result.text == "Connection refused"


async def test_an_unregistered_source_gets_no_answer(nursery: trio.Nursery) -> None:
    port, stats = await start_echo(nursery, trusted={"127.0.0.5"})
    refused = await udp_probe("127.0.0.1", port, source_ports=2, timeout_s=SHORT_S)
    assert refused.status is Status.TIMEOUT, refused
    assert stats.refused["unregistered"] == 2
    assert stats.answered == 0
    # from the registered NodeIP (the agent binds its own): answered
    ok = await udp_probe("127.0.0.1", port, source_ports=2, timeout_s=5, source_ip="127.0.0.5")
    assert ok.ok, ok
    assert stats.answered == 2


async def test_junk_and_oversized_datagrams_are_dropped(nursery: trio.Nursery) -> None:
    port, stats = await start_echo(nursery)
    request = echo_request(bytes(16), 7)
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        await sock.connect(("127.0.0.1", port))
        await sock.send(b"hello")
        await sock.send(b"MHU\x01\x01" + bytes(2000))
        await sock.send(request)
        with trio.fail_after(5):  # answered in order: the junk was dealt with before
            assert await sock.recv(4096) == echo_reply(request)
    assert stats.refused["malformed"] == 2
    assert stats.answered == 1


async def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="source_ports"):
        await udp_probe("127.0.0.1", 9, source_ports=0)
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        await udp_probe("not-an-ip", 9)
