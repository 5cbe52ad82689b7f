"""Hop counts from a reply's TTL (table tests) and from real replies: the pinger reports
1 hop on the same link and 2 behind a router namespace, over IPv4 and IPv6."""

from __future__ import annotations

import pytest
import trio

from meshhealth.probe.hop_count import hops_from_ttl
from meshhealth.probe.icmp import open_pinger
from tests.plugins.netns import NetnsFactory
from tests.probe.test_trace import ROUTER, ROUTER6, TARGET, TARGET6, _three_namespaces


@pytest.mark.parametrize(
    ("ttl", "hops"),
    [
        (64, 1),  # Linux on the same link
        (63, 2),  # behind one router
        (1, 64),
        (65, 64),  # above 64: guessed as 128 less 63 routers
        (128, 1),
        (120, 9),
        (255, 1),
        (250, 6),
        (129, 127),
        (0, None),
        (256, None),
    ],
)
def test_hops_from_ttl(ttl: int, hops: int | None) -> None:
    assert hops_from_ttl(ttl) == hops


@pytest.mark.parametrize(
    ("router_ip", "target"), [(ROUTER, TARGET), (ROUTER6, TARGET6)], ids=["ipv4", "ipv6"]
)
def test_pinger_counts_the_hops_of_real_replies(
    netns_factory: NetnsFactory, router_ip: str, target: str
) -> None:
    client, _, _ = _three_namespaces(netns_factory)

    async def run() -> list[int | None]:
        async with open_pinger(netns=client) as pinger:
            results = await pinger.ping_batch([router_ip, target, "10.2.0.99"], count=2)
        return [r.hops for r in results]

    hops = trio.run(run)
    # The router is on the client's link; the target behind it; no reply: no hop count.
    assert hops == [1, 2, None]
