"""The shared netns fixture itself: labs answer as promised, and teardown leaves nothing."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from meshhealth.netns import call_in_netns, netns_path, socket_in_netns
from tests.plugins.netns import NetnsFactory

pytestmark = pytest.mark.netns


def test_lab_live_answer_dead_are_silent(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=2, dead=2, live6=1, dead6=1)
    live = [*lab.live, *lab.live6]
    dead = [*lab.dead, *lab.dead6]
    # fping: -t timeout ms, -r retries; exit 0 only if all targets answered.
    ok = netns_factory.run(lab.client, "fping", "-t", "500", "-r", "0", *live, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = netns_factory.run(lab.client, "fping", "-t", "300", "-r", "0", *dead, check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    for addr in dead:
        assert f"{addr} is unreachable" in bad.stdout
    # Silent: no ICMP error came back for the dropped addresses (fping prints them).
    assert "ICMP" not in bad.stderr
    # The host namespace has no route to the lab's addresses.
    for addr in (*live, *dead):
        route = subprocess.run(
            ["ip", "route", "get", addr], capture_output=True, text=True, check=False
        )
        assert "mhc0" not in route.stdout


def test_teardown_kills_processes_and_deletes_namespaces() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces (ip netns add)")
    factory = NetnsFactory()
    try:
        name = factory.create()
        proc = factory.spawn(name, "sleep", "60")
        assert os.path.exists(netns_path(name))
        assert proc.poll() is None
    finally:
        factory.close()
    assert proc.returncode is not None
    assert not os.path.exists(netns_path(name))
    assert factory.namespaces == []


def test_socket_in_netns_lives_in_that_namespace(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=1, dead=0)
    # lab.client_ip exists only in the client namespace: binding there proves where the
    # socket lives; binding it in our own namespace fails.
    with socket_in_netns(lab.client, socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((lab.client_ip, 0))
        assert sock.getsockname()[0] == lab.client_ip
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock,
        pytest.raises(OSError, match="Cannot assign requested address"),
    ):
        sock.bind((lab.client_ip, 0))
    # The calling thread never changed namespace.
    assert call_in_netns(None, lambda: os.readlink("/proc/thread-self/ns/net")) == os.readlink(
        "/proc/thread-self/ns/net"
    )


def test_call_in_netns_missing_namespace_raises() -> None:
    with pytest.raises(OSError):
        call_in_netns("mh-does-not-exist", lambda: None)
    with pytest.raises(ValueError, match="invalid network namespace name"):
        netns_path("../etc")
