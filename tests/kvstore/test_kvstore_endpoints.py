"""Endpoint list parsing and back-off (pure)."""

from __future__ import annotations

import re

import pytest

from meshhealth.backoff import Backoff
from meshhealth.kvstore.endpoints import EtcdEndpoint, describe, parse_endpoints
from meshhealth.kvstore.errors import prefix_range_end


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("http://127.0.0.1:2379", [("127.0.0.1", 2379)]),
        ("127.0.0.1:23790", [("127.0.0.1", 23790)]),
        ("localhost", [("localhost", 2379)]),
        ("http://[::1]:2379/", [("::1", 2379)]),
        ("[fd00::1]", [("fd00::1", 2379)]),
        ("HTTP://a:1, http://b:2,,", [("a", 1), ("b", 2)]),
        ("http://a:1,http://a:1", [("a", 1)]),
        ("https://a:1,HTTPS://b", [("a", 1, "https"), ("b", 2379, "https")]),
        (["http://a:1", "b:2,c:3"], [("a", 1), ("b", 2), ("c", 3)]),
    ],
)
def test_parse_endpoints(
    spec: str | list[str], expected: list[tuple[str, int] | tuple[str, int, str]]
) -> None:
    assert parse_endpoints(spec) == tuple(EtcdEndpoint(*item) for item in expected)


def test_default_scheme_applies_to_bare_endpoints_only() -> None:
    endpoints = parse_endpoints("a:1,b", default_scheme="https")
    assert [e.url for e in endpoints] == ["https://a:1", "https://b:2379"]
    assert all(e.secure for e in endpoints)
    assert parse_endpoints("http://a:1", default_scheme="https")[0].url == "http://a:1"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no etcd endpoint"),
        (" , ", "no etcd endpoint"),
        ("https://a:2379,http://b:2379", "mix http:// and https://"),
        ("unix:///run/etcd.sock", "unknown scheme"),
        ("https://a:1/v3", "expected https://host:port"),
        ("http://a:99999", "invalid port"),
        ("http://a:x", "invalid port"),
        ("http://:2379", "missing host"),
        ("::1:2379", "write IPv6 addresses as [addr]:port"),
        ("[::1", "unclosed"),
        ("[zz]:1", "invalid IPv6"),
        ("http://a:1/v3", "expected http://host:port"),
    ],
)
def test_parse_endpoints_rejects(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_endpoints(spec)


def test_endpoint_urls() -> None:
    endpoints = parse_endpoints("a:1,[::1]:2")
    assert [e.netloc for e in endpoints] == ["a:1", "[::1]:2"]
    assert describe(endpoints) == "http://a:1,http://[::1]:2"


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"a/", b"a0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"meshhealth/", b"meshhealth0")],
)
def test_prefix_range_end(prefix: bytes, end: bytes) -> None:
    assert prefix_range_end(prefix) == end


def test_backoff_doubles_to_max_and_resets() -> None:
    backoff = Backoff(0.5, 3.0, jitter=0.0)
    assert [backoff.next_delay_s() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next_delay_s() == 0.5


def test_backoff_jitter_only_shortens() -> None:
    backoff = Backoff(1.0, 1.0, jitter=0.2)
    delays = [backoff.next_delay_s() for _ in range(50)]
    assert all(0.8 <= d <= 1.0 for d in delays)


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_backoff_rejects_bad_bounds(low: float, high: float) -> None:
    with pytest.raises(ValueError, match="back-off"):
        Backoff(low, high)
