"""The don't-fragment MTU probe (Protocol.ICMP_DF): packets built to size, and a path
that drops big packets in a namespace made here (small probes pass, the big one is lost)."""

from __future__ import annotations

import socket

import pytest

from meshhealth import defaults, model
from meshhealth.model import ProbeStatus
from meshhealth.probe import icmp_socket
from meshhealth.probe.icmp import open_pinger
from meshhealth.probe.icmp_match import EchoProbe, ReplyMatcher
from meshhealth.probe.icmp_packet import build_echo_request, checksum
from meshhealth.probe.icmp_payload import dont_fragment_payload
from meshhealth.probe.icmp_socket import IP_MTU_DISCOVER, IP_PMTUDISC_DO, route_mtu
from meshhealth.probe.scheduler import enumerate_paths, run_round
from tests.plugins.netns import NetnsFactory
from tests.probe.test_icmp_packet import echo, v4

NODE, ENDPOINT = model.TargetType.NODE, model.TargetType.ENDPOINT
ICMP, HTTP, DF = model.Protocol.ICMP, model.Protocol.HTTP, model.Protocol.ICMP_DF
BIG_DROP_BYTES = 1000  # the namespace's nft rule drops IP packets longer than this


def test_the_df_path_is_the_node_ips_only() -> None:
    target = model.Target("c1", "a", "10.0.0.1", "10.1.0.1")
    paths = enumerate_paths([target], frozenset({ICMP, HTTP, DF}))
    assert [(k.target_type, k.protocol) for k, _ in paths] == [
        (NODE, ICMP),
        (NODE, HTTP),
        (NODE, DF),
        (ENDPOINT, ICMP),
        (ENDPOINT, HTTP),
    ]
    assert model.path_name(NODE, DF) == "node/icmp-df"


@pytest.mark.parametrize("size", [44, 1000, 1500, 9000])
def test_a_big_request_is_sized_and_its_padded_reply_counts(size: int) -> None:
    # What the pinger sends for a DF probe of `size` bytes: the cookie padded with zeros,
    # so that the IPv4 packet (20-byte header) is exactly `size` bytes.
    cookie = bytes(range(16))
    payload, sized = dont_fragment_payload(cookie, size, ipv6=False)
    assert sized == size
    request = build_echo_request(ipv6=False, identifier=7, sequence=9, payload=payload)
    assert 20 + len(request) == size
    assert checksum(request) == 0
    # Only the whole padded payload echoed back counts (a truncated echo does not).
    matcher = ReplyMatcher(ipv6=False, identifier=7, first_sequence=9)
    probe = EchoProbe("10.0.0.2", 1, payload)
    assert matcher.allocate(probe, 0) == 9
    probe.mark_sent(0, 100.0, 1.0)
    truncated = v4(echo(0, 7, 9, payload[:-2]), src="10.0.0.2")
    assert matcher.match(truncated, "10.0.0.2", 100.1) is None
    reply = v4(echo(0, 7, 9, payload), src="10.0.0.2")
    assert len(reply) == size
    assert matcher.match(reply, "10.0.0.2", 100.1) is probe


async def test_sizes_below_the_headers_are_refused() -> None:
    async with open_pinger() as pinger:
        try:
            pinger.open_socket_for("127.0.0.1")
        except icmp_socket.PingerPermissionError:
            pytest.skip("needs root: raw ICMP sockets")
        (result,) = await pinger.ping_batch(["127.0.0.1"], count=1, df_sizes=[40])
    assert result.status is ProbeStatus.ERROR
    assert "below 44 B" in result.detail


def _drop_big_packets(factory: NetnsFactory, netns: str) -> None:
    factory.nft(
        netns,
        f"""
        table inet mhbig {{
          chain prerouting {{
            type filter hook prerouting priority raw; policy accept;
            meta length > {BIG_DROP_BYTES} drop
          }}
        }}
        """,
    )


@pytest.mark.netns
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
async def test_big_df_probe_is_lost_where_small_ones_pass(
    netns_factory: NetnsFactory, v6: bool
) -> None:
    lab = netns_factory.make_lab(live=0 if v6 else 1, dead=0, live6=1 if v6 else 0)
    (ip,) = lab.live6 if v6 else lab.live
    _drop_big_packets(netns_factory, lab.target)
    mtu = route_mtu(ip, ipv6=v6, netns=lab.client)
    assert mtu == 1500  # the veth's
    async with open_pinger(netns=lab.client) as pinger:
        small, big, fits, auto = await pinger.ping_batch(
            [ip] * 4,
            count=2,
            interval_s=0.05,
            timeout_s=0.5,
            df_sizes=[0, 1500, BIG_DROP_BYTES, defaults.MTU_PROBE_AUTO],
        )
        assert pinger.in_flight == 0
    assert (small.status, small.received, small.size_bytes) == (ProbeStatus.OK, 2, 0)
    assert (big.status, big.sent, big.received) == (ProbeStatus.TIMEOUT, 2, 0)
    assert big.size_bytes == 1500
    assert (fits.status, fits.received, fits.size_bytes) == (ProbeStatus.OK, 2, BIG_DROP_BYTES)
    assert (auto.status, auto.size_bytes) == (ProbeStatus.TIMEOUT, mtu)


@pytest.mark.netns
async def test_df_is_set_and_oversize_is_refused_locally(netns_factory: NetnsFactory) -> None:
    # Past the interface's MTU the kernel refuses a don't-fragment request (EMSGSIZE)
    # instead of fragmenting it: the path is UNREACHABLE with the reason.
    lab = netns_factory.make_lab(live=1, dead=0)
    (ip,) = lab.live
    async with open_pinger(netns=lab.client) as pinger:
        (result,) = await pinger.ping_batch([ip], count=1, timeout_s=0.5, df_sizes=[1600])
        fs = pinger._sockets[socket.AF_INET]
        assert fs.df_sock is not None
        assert fs.df_sock.getsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER) == IP_PMTUDISC_DO
    assert result.status is ProbeStatus.UNREACHABLE, result
    assert "Message too long" in result.detail
    assert result.size_bytes == 1600


@pytest.mark.netns
async def test_a_round_reports_the_df_path_next_to_the_small_ones(
    netns_factory: NetnsFactory,
) -> None:
    lab = netns_factory.make_lab(live=2, dead=0)
    _drop_big_packets(netns_factory, lab.target)
    targets = [model.Target("c1", f"n{i}", ip) for i, ip in enumerate(lab.live)]
    async with open_pinger(netns=lab.client) as pinger:
        report = await run_round(
            targets,
            pinger=pinger,
            timeout_s=0.5,
            icmp_count=2,
            icmp_interval_s=0.05,
            protocols=frozenset({ICMP}),
            mtu_probe_size=defaults.MTU_PROBE_AUTO,
        )
        without = await run_round(
            targets, pinger=pinger, timeout_s=0.5, icmp_count=1, protocols=frozenset({ICMP})
        )
    got = {(p.path.node, p.path.protocol): p.result for p in report.paths}
    assert set(got) == {(f"n{i}", proto) for i in range(2) for proto in (ICMP, DF)}
    for i in range(2):
        assert got[(f"n{i}", ICMP)].ok
        df = got[(f"n{i}", DF)]
        assert (df.status, df.sent, df.size_bytes) == (ProbeStatus.TIMEOUT, 2, 1500)
    assert {p.path.protocol for p in without.paths} == {ICMP}
