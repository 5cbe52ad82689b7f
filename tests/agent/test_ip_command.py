"""The `ip` command edge: batch error parsing (table) and real `ip` in a namespace made here."""

from __future__ import annotations

import pytest

from meshhealth.agent.health_endpoint.ip_command import (
    BatchFailure,
    PlumbingError,
    ip,
    ip_batch,
    ip_batch_each,
    ip_json,
    parse_batch_errors,
)
from tests.plugins.netns import NetnsFactory

COMMANDS = ["route add 10.1.0.0/24 via 10.9.9.9", "link set lo up", "route del 10.2.0.0/24"]


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        pytest.param("", [], id="nothing said"),
        pytest.param(
            "Error: Nexthop has invalid gateway.\nCommand failed -:1\n",
            [BatchFailure(0, COMMANDS[0], "Error: Nexthop has invalid gateway.")],
            id="one failure",
        ),
        pytest.param(
            "RTNETLINK answers: File exists\nCommand failed -:1\n"
            "RTNETLINK answers: No such process\nCommand failed -:3\n",
            [
                BatchFailure(0, COMMANDS[0], "RTNETLINK answers: File exists"),
                BatchFailure(2, COMMANDS[2], "RTNETLINK answers: No such process"),
            ],
            id="two failures, each with its own words",
        ),
        pytest.param(
            "Command failed -:2\n", [BatchFailure(1, COMMANDS[1], "failed")], id="no words"
        ),
        pytest.param("Command failed -:9\n", [], id="a line beyond the batch is ignored"),
        pytest.param(
            "first\nsecond\nCommand failed -:1\n",
            [BatchFailure(0, COMMANDS[0], "first; second")],
            id="several lines joined",
        ),
    ],
)
def test_parse_batch_errors(stderr: str, expected: list[BatchFailure]) -> None:
    assert parse_batch_errors(stderr, COMMANDS) == expected


def test_exists_is_eexist_only() -> None:
    assert BatchFailure(0, "x", "RTNETLINK answers: File exists").exists
    assert not BatchFailure(0, "x", "RTNETLINK answers: No such process").exists


def test_a_batch_command_must_be_one_line() -> None:
    with pytest.raises(ValueError, match="one line"):
        ip_batch(None, ["link set lo up\nlink del lo"])


def test_ip_in_a_namespace(netns_factory: NetnsFactory) -> None:
    ns = netns_factory.create()
    ip_batch(
        ns, ["link add mhq0 type veth peer name mhq1", "link set dev mhq0 alias meshhealth:test"]
    )
    shown = ip_json(ns, "link", "show", "dev", "mhq0")
    assert shown is not None
    assert shown[0]["ifalias"] == "meshhealth:test"
    assert isinstance(shown[0]["ifindex"], int)
    assert ip_json(ns, "link", "show", "dev", "mhnope") is None  # missing: None, not error

    ip(ns, "link", "set", "dev", "mhq0", "up")
    ip(ns, "address", "add", "10.77.0.1/24", "dev", "mhq0")
    failures = ip_batch_each(
        ns,
        [
            "route add 10.78.0.0/24 via 10.77.0.2 proto 164",
            "route add 10.78.0.0/24 via 10.77.0.2 proto 164",  # again: EEXIST
            "route add 10.79.0.0/24 via 10.99.0.1 proto 164",  # gateway not on a link
            "route add 10.80.0.0/24 via 10.77.0.3 proto 164",  # after failures: still runs
        ],
    )
    assert [(f.index, f.exists) for f in failures] == [(1, True), (2, False)]
    assert "gateway" in failures[1].error
    routes = ip_json(ns, "route", "show", "proto", "164")
    assert routes is not None
    assert sorted(str(r["dst"]) for r in routes) == ["10.78.0.0/24", "10.80.0.0/24"]

    with pytest.raises(PlumbingError, match=r"`ip link del dev mhnope` in network namespace"):
        ip(ns, "link", "del", "dev", "mhnope")
    with pytest.raises(
        PlumbingError, match=r"`ip link add mhq0 type veth peer name mhq8` .*exists"
    ):
        ip_batch(
            ns, ["link add mhq0 type veth peer name mhq8", "link add mhq9 type veth peer name mhq7"]
        )
    assert ip_json(ns, "link", "show", "dev", "mhq9") is None  # the batch stopped there


def test_a_missing_namespace_is_a_plumbing_error() -> None:
    with pytest.raises(PlumbingError, match="mh-no-such-ns"):
        ip_json("mh-no-such-ns", "link", "show")
