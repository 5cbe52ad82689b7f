"""What an echo request carries, and the route MTU behind `--mtu-probe-size auto`.

    cookies = CookiePool().take(n)                   # n * COOKIE_BYTES random bytes
    payload, size = dont_fragment_payload(cookie, 1500, ipv6=False)
    mtu = RouteMtus(lookup, clock).get("10.0.0.2", ipv6=False)

A probe's cookie (COOKIE_BYTES unpredictable bytes, that its replies must echo back) is
cut from one os.urandom() read of COOKIE_POOL_BYTES. A don't-fragment probe of N bytes
pads its cookie with zeros so that the IP packet is exactly N bytes. RouteMtus remembers
the route MTU toward each target for a while (defaults.MTU_ROUTE_CACHE_S), so a changed
link MTU is followed without a lookup per probe. Pure apart from os.urandom and the
lookup the caller passes in.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from meshhealth import defaults

COOKIE_BYTES = 16  # random payload per probe: a reply must echo it back
COOKIE_POOL_BYTES = COOKIE_BYTES * 1024  # one os.urandom() read makes 1,024 cookies
# The IP and ICMP headers in front of the payload of a don't-fragment probe: its IP
# packet is the payload + these (IPv4 without options; IPv6 without extension headers).
DF_HEADER_BYTES_V4 = 20 + 8
DF_HEADER_BYTES_V6 = 40 + 8
MAX_PACKET_BYTES = 65_535
ROUTE_MTU_CACHE_SIZE = 16_384  # targets whose route MTU is remembered


class CookiePool:
    """Unpredictable cookies, read from os.urandom in bulk."""

    __slots__ = ("_offset", "_pool")

    def __init__(self) -> None:
        self._pool = b""
        self._offset = 0

    def take(self, n: int) -> bytes:
        """`n` cookies of COOKIE_BYTES, end to end: one read per COOKIE_POOL_BYTES, or
        one per request larger than that. No byte is handed out twice."""
        size = n * COOKIE_BYTES
        if size > COOKIE_POOL_BYTES:
            return os.urandom(size)
        offset = self._offset
        if offset + size > len(self._pool):
            self._pool = os.urandom(COOKIE_POOL_BYTES)
            offset = 0
        self._offset = offset + size
        return self._pool[offset : offset + size]


def dont_fragment_payload(cookie: bytes, size: int, *, ipv6: bool) -> tuple[bytes, int]:
    """The payload that makes an echo request's IP packet `size` bytes (at most
    MAX_PACKET_BYTES): `cookie` padded with zeros; and the size used. ValueError when
    `size` cannot hold the headers and the cookie."""
    headers = DF_HEADER_BYTES_V6 if ipv6 else DF_HEADER_BYTES_V4
    size = min(size, MAX_PACKET_BYTES)
    if size < headers + len(cookie):
        raise ValueError(f"don't-fragment probe of {size} B: below {headers + len(cookie)} B")
    return cookie + bytes(size - headers - len(cookie)), size


class RouteMtus:
    """The MTU of the route to each target, looked up at most every `ttl_s`.

    `lookup(ip, ipv6)` asks the kernel (it raises OSError without a route: not cached);
    `clock()` is the caller's monotonic time."""

    __slots__ = ("_clock", "_known", "_lookup", "_max_size", "_ttl_s")

    def __init__(
        self,
        lookup: Callable[[str, bool], int],
        clock: Callable[[], float],
        *,
        ttl_s: float = defaults.MTU_ROUTE_CACHE_S,
        max_size: int = ROUTE_MTU_CACHE_SIZE,
    ) -> None:
        self._lookup = lookup
        self._clock = clock
        self._ttl_s = ttl_s
        self._max_size = max_size
        self._known: dict[str, tuple[int, float]] = {}  # ip -> (MTU, valid until)

    def get(self, ip: str, *, ipv6: bool) -> int:
        now = self._clock()
        known = self._known.get(ip)
        if known is not None and known[1] > now:
            return known[0]
        mtu = self._lookup(ip, ipv6)
        if len(self._known) >= self._max_size:
            self._known.clear()
        self._known[ip] = (mtu, now + self._ttl_s)
        return mtu
