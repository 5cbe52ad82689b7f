"""Targets as users write them: addresses and host names (meshhealth.probe.resolve).

Only names in /etc/hosts are resolved here (`localhost`), so no query leaves the
machine; names in a namespace's own hosts file are tested in tests/cli/test_probe_cli.py.
"""

from __future__ import annotations

import pytest

from meshhealth.probe.resolve import (
    ResolvedTarget,
    ResolveError,
    first_per_family,
    parse_target,
    resolve_targets,
)


@pytest.mark.parametrize(
    ("word", "ip"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("FD00::0:1", "fd00::1"),
        ("::ffff:10.0.0.1", "::ffff:a00:1"),
        ("localhost", None),
        ("node-a.example.org", None),
        ("node-a.example.org.", None),
        ("a1", None),
    ],
)
def test_parse_target(word: str, ip: str | None) -> None:
    assert parse_target(word) == ip


@pytest.mark.parametrize(
    "bad", ["", "10.0.0.300", "10.0.0", "bad_name", "-a", "a-", "a..b", "1.2.3.4/32", "fe80::1%lo"]
)
def test_parse_target_refuses(bad: str) -> None:
    with pytest.raises(ResolveError, match=r"^invalid target .*: not an IP address or host name$"):
        parse_target(bad)


@pytest.mark.parametrize(
    ("answer", "chosen"),
    [
        ([], []),
        (["10.0.0.1", "10.0.0.2"], ["10.0.0.1"]),
        (["fd00::1", "10.0.0.2", "fd00::2", "10.0.0.3"], ["10.0.0.2", "fd00::1"]),
        (["fd00::1"], ["fd00::1"]),
    ],
)
def test_first_per_family(answer: list[str], chosen: list[str]) -> None:
    assert first_per_family(answer) == chosen


async def test_addresses_pass_through_normalised_and_deduplicated() -> None:
    got = await resolve_targets(["10.0.0.1", "FD00::0:1", "10.0.0.1", "fd00::1"])
    assert got == [ResolvedTarget("10.0.0.1", "10.0.0.1"), ResolvedTarget("fd00::1", "fd00::1")]


async def test_localhost_from_the_hosts_file() -> None:
    got = await resolve_targets(["localhost", "127.0.0.1", "10.0.0.1"])
    # localhost's IPv4 address is labelled with the name; the same address written
    # again is probed once. (Its IPv6 address, if the hosts file has one, follows.)
    assert got[0] == ResolvedTarget("localhost", "127.0.0.1")
    assert got[-1] == ResolvedTarget("10.0.0.1", "10.0.0.1")
    assert all(t.label == "localhost" for t in got[:-1])
    assert len({t.ip for t in got}) == len(got)
