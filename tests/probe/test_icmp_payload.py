"""What an echo request carries (probe/icmp_payload.py): cookies never handed out twice,
a don't-fragment payload sized to the byte, and the route MTU looked up once per
MTU_ROUTE_CACHE_S (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.probe.icmp_payload import (
    COOKIE_BYTES,
    COOKIE_POOL_BYTES,
    DF_HEADER_BYTES_V4,
    DF_HEADER_BYTES_V6,
    MAX_PACKET_BYTES,
    CookiePool,
    RouteMtus,
    dont_fragment_payload,
)


@given(st.lists(st.integers(1, 300), min_size=1, max_size=40))
def test_cookies_are_sized_and_never_repeat(batches: list[int]) -> None:
    pool = CookiePool()
    seen: set[bytes] = set()
    for n in batches:
        cookies = pool.take(n)
        assert len(cookies) == n * COOKIE_BYTES
        for i in range(n):
            cookie = cookies[i * COOKIE_BYTES : (i + 1) * COOKIE_BYTES]
            assert cookie not in seen  # 128 random bits: a repeat means a reused slice
            seen.add(cookie)


def test_a_batch_bigger_than_the_pool_gets_its_own_read() -> None:
    n = COOKIE_POOL_BYTES // COOKIE_BYTES + 1
    assert len(CookiePool().take(n)) == n * COOKIE_BYTES


@pytest.mark.parametrize(
    ("size", "ipv6", "padding"),
    [
        (44, False, 0),  # 20 + 8 + the 16-byte cookie: the smallest
        (1500, False, 1500 - DF_HEADER_BYTES_V4 - COOKIE_BYTES),
        (1500, True, 1500 - DF_HEADER_BYTES_V6 - COOKIE_BYTES),
        (MAX_PACKET_BYTES + 1000, False, MAX_PACKET_BYTES - DF_HEADER_BYTES_V4 - COOKIE_BYTES),
    ],
)
def test_dont_fragment_payload_is_the_cookie_padded_to_size(
    size: int, ipv6: bool, padding: int
) -> None:
    cookie = bytes(range(1, COOKIE_BYTES + 1))
    payload, used = dont_fragment_payload(cookie, size, ipv6=ipv6)
    assert payload == cookie + bytes(padding)
    assert used == min(size, MAX_PACKET_BYTES)


@pytest.mark.parametrize(("size", "ipv6", "floor"), [(43, False, 44), (63, True, 64)])
def test_a_size_below_the_headers_and_cookie_is_refused(size: int, ipv6: bool, floor: int) -> None:
    with pytest.raises(ValueError, match=f"probe of {size} B: below {floor} B"):
        dont_fragment_payload(bytes(COOKIE_BYTES), size, ipv6=ipv6)


class FakeKernel:
    def __init__(self) -> None:
        self.mtu = 1500
        self.asked: list[tuple[str, bool]] = []

    def lookup(self, ip: str, ipv6: bool) -> int:
        self.asked.append((ip, ipv6))
        if ip == "10.9.9.9":
            raise OSError("Network is unreachable")
        return self.mtu


def test_route_mtu_is_looked_up_once_per_ttl() -> None:
    kernel, now = FakeKernel(), [100.0]
    mtus = RouteMtus(kernel.lookup, lambda: now[0], ttl_s=60.0)
    assert mtus.get("10.0.0.2", ipv6=False) == 1500
    kernel.mtu = 1400
    now[0] = 159.0
    assert mtus.get("10.0.0.2", ipv6=False) == 1500  # still cached
    now[0] = 160.0
    assert mtus.get("10.0.0.2", ipv6=False) == 1400  # the link's new MTU, a minute later
    assert mtus.get("fd00::2", ipv6=True) == 1400
    assert kernel.asked == [("10.0.0.2", False), ("10.0.0.2", False), ("fd00::2", True)]


def test_a_failed_lookup_is_not_cached_and_the_cache_is_bounded() -> None:
    kernel = FakeKernel()
    mtus = RouteMtus(kernel.lookup, lambda: 0.0, ttl_s=60.0, max_size=2)
    for _ in range(2):
        with pytest.raises(OSError, match="unreachable"):
            mtus.get("10.9.9.9", ipv6=False)
    assert kernel.asked.count(("10.9.9.9", False)) == 2
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):  # the third starts a new table
        mtus.get(ip, ipv6=False)
    kernel.asked.clear()
    mtus.get("10.0.0.3", ipv6=False)
    mtus.get("10.0.0.1", ipv6=False)
    assert kernel.asked == [("10.0.0.1", False)]  # 10.0.0.1 went with the old table
