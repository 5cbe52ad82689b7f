"""Fixture: run a test inside a fresh network namespace whose loopback has `::1`.

Tests that use `::1` failed on hosts whose loopback has no IPv6 (a container started
without IPv6, a host booted with ipv6.disable_ipv6). A fresh namespace has IPv6 on
whatever the host's setting (the kernel resets IPv6 settings for new namespaces), so
these tests run there:

    @pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=IPV6_LOOPBACK)])
    async def test_x(host: str) -> None: ...          # only the ::1 case moves

    def test_y(ipv6_loopback: str) -> None: ...       # or ask for it (the namespace's name)

The fixture moves the test's own thread (the one trio runs in) into the namespace and
back afterwards: sockets the test creates, servers included, live there. Worker threads
(trio.to_thread, hence trio.run_process) stay in the host's namespace: run a command with
`ip netns exec NAME ...` (the fixture's value) to have it see the same `::1`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
from collections.abc import Iterator

import pytest

from tests.plugins.netns import NetnsFactory

CLONE_NEWNET = 0x40000000
MARKER = "ipv6_loopback"
# pytest.param cannot carry usefixtures: a marker that the autouse fixture below obeys.
IPV6_LOOPBACK = [pytest.mark.netns, getattr(pytest.mark, MARKER)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: run in a fresh network namespace whose loopback has ::1"
    )


@pytest.fixture(autouse=True)
def _ipv6_loopback_when_marked(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker(MARKER) is not None:
        request.getfixturevalue("ipv6_loopback")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@pytest.fixture
def ipv6_loopback(netns_factory: NetnsFactory) -> Iterator[str]:
    """The name of the namespace this test's thread runs in (lo up, `::1` usable)."""
    name = netns_factory.create()
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
                probe.bind(("::1", 0))  # fails here, not in the test, if ::1 is missing
            yield name
        finally:
            _setns(home)
    finally:
        os.close(home)
