"""Routes to peers' CIDRs: the pure diff (table-driven) and the netlink edge (real netns)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import trio

from meshhealth.agent.health_endpoint.routes import (
    ROUTE_PROTO,
    RouteDiff,
    RouteProgrammer,
    desired_routes,
    diff_routes,
    read_routes,
)
from meshhealth.model import Node
from tests.plugins.netns import NetnsFactory


def node(name: str, node_ip: str, *cidrs: str, cluster: str = "c1") -> Node:
    return Node(
        name=name,
        cluster=cluster,
        node_ip=node_ip,
        health_ip=None,
        cidrs=tuple(cidrs),
        health_port=4240,
        version="test",
        started_at=0.0,
    )


# --- desired_routes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "own_cidrs", "routes", "skipped_words"),
    [
        pytest.param([], (), {}, [], id="no peers"),
        pytest.param(
            [node("n1", "10.0.0.1", "10.1.1.0/24"), node("n2", "10.0.0.2", "10.1.2.0/24")],
            ("10.1.1.0/24",),
            {"10.1.2.0/24": "10.0.0.2"},
            [],
            id="self excluded by name",
        ),
        pytest.param(
            [node("n1", "10.0.0.9", "10.1.1.0/24", cluster="c2")],
            (),
            {"10.1.1.0/24": "10.0.0.9"},
            [],
            id="same node name in another cluster is a peer",
        ),
        pytest.param(
            [node("n2", "10.0.0.2", "10.1.2.7/24", "10.1.3.0/24")],
            (),
            {"10.1.2.0/24": "10.0.0.2", "10.1.3.0/24": "10.0.0.2"},
            [],
            id="host bits normalised, several cidrs",
        ),
        pytest.param(
            [node("n2", "10.0.0.2", "10.1.1.0/24")],
            ("10.1.1.0/24",),
            {},
            ["own CIDR"],
            id="peer claims our cidr",
        ),
        pytest.param(
            [node("n3", "10.0.0.3", "10.1.9.0/24"), node("n2", "10.0.0.2", "10.1.9.0/24")],
            (),
            {"10.1.9.0/24": "10.0.0.2"},
            ["already routed to c1/n2"],
            id="conflict: first by name wins",
        ),
        pytest.param(
            [node("n2", "10.0.0.2", "fd00:1::/64")],
            (),
            {},
            ["different IP families"],
            id="family mismatch",
        ),
        pytest.param(
            [node("n2", "fd00::2", "fd00:1::/64")],
            (),
            {"fd00:1::/64": "fd00::2"},
            [],
            id="ipv6",
        ),
        pytest.param(
            [
                dataclasses.replace(
                    node("n2", "10.0.0.2", "10.1.2.0/24", "fd00:2::/64"),
                    node_ip_secondary="fd77::2",
                )
            ],
            (),
            {"10.1.2.0/24": "10.0.0.2", "fd00:2::/64": "fd77::2"},
            [],
            id="dual stack: each family via the NodeIP of that family",
        ),
        pytest.param(
            [node("n2", "10.0.0.2", "not-a-cidr"), node("n3", "nope", "10.1.3.0/24")],
            (),
            {},
            ["not a CIDR", "not an IP address"],
            id="invalid values skipped",
        ),
    ],
)
def test_desired_routes(
    nodes: list[Node], own_cidrs: tuple[str, ...], routes: dict[str, str], skipped_words: list[str]
) -> None:
    desired = desired_routes(nodes, cluster="c1", node="n1", own_cidrs=own_cidrs)
    assert desired.routes == routes
    assert len(desired.skipped) == len(skipped_words)
    for line, words in zip(desired.skipped, skipped_words, strict=True):
        assert words in line


# --- diff_routes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("desired", "present", "expected"),
    [
        pytest.param({}, {}, RouteDiff(), id="nothing"),
        pytest.param(
            {"10.1.0.0/24": "10.0.0.1"}, {}, RouteDiff(add=(("10.1.0.0/24", "10.0.0.1"),))
        ),
        pytest.param({"10.1.0.0/24": "10.0.0.1"}, {"10.1.0.0/24": "10.0.0.1"}, RouteDiff()),
        pytest.param(
            {"10.1.0.0/24": "10.0.0.2"},
            {"10.1.0.0/24": "10.0.0.1"},
            RouteDiff(change=(("10.1.0.0/24", "10.0.0.2"),)),
            id="next hop changed",
        ),
        pytest.param(
            {"10.1.0.0/24": "10.0.0.2"},
            {"10.1.0.0/24": None},
            RouteDiff(change=(("10.1.0.0/24", "10.0.0.2"),)),
            id="ours without gateway",
        ),
        pytest.param({}, {"10.1.0.0/24": "10.0.0.1"}, RouteDiff(delete=("10.1.0.0/24",))),
        pytest.param(
            {"10.2.0.0/24": "10.0.0.2", "10.3.0.0/24": "10.0.0.3"},
            {"10.1.0.0/24": "10.0.0.1", "10.3.0.0/24": "10.0.0.9"},
            RouteDiff(
                add=(("10.2.0.0/24", "10.0.0.2"),),
                change=(("10.3.0.0/24", "10.0.0.3"),),
                delete=("10.1.0.0/24",),
            ),
            id="all three",
        ),
    ],
)
def test_diff_routes(
    desired: dict[str, str], present: dict[str, str | None], expected: RouteDiff
) -> None:
    diff = diff_routes(desired, present)
    assert diff == expected
    assert diff.empty == (expected.size == 0)


def test_programmer_rejects_bad_proto() -> None:
    with pytest.raises(ValueError, match=r"1\.\.255"):
        RouteProgrammer(cluster="c1", node="n1", proto=0)


# --- netlink, in namespaces made here ---------------------------------------------------


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll `predicate` until true; fails the test after `timeout_s`."""
    with trio.fail_after(timeout_s):
        while True:
            if predicate():
                return
            await trio.sleep(0.02)


def route_lines(factory: NetnsFactory, netns: str, *match: str) -> list[str]:
    out = factory.ip(netns, "route", "show", *match).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


@pytest.mark.netns
async def test_programmer_adds_changes_removes_only_its_routes(
    netns_factory: NetnsFactory,
) -> None:
    a, b = netns_factory.create(), netns_factory.create()
    netns_factory.veth(a, b, addrs_a=["10.212.0.1/24"], addrs_b=["10.212.0.2/24"])
    netns_factory.ip(a, "addr", "add", "10.212.0.3/24", "dev", "veth1a")  # a 2nd next hop
    # Not ours: a static route for a CIDR a peer will claim, and an unrelated one.
    netns_factory.route(b, "10.230.0.0/24", "via", "10.212.0.1")
    netns_factory.route(b, "10.231.0.0/24", "via", "10.212.0.1")
    # A leftover of a crashed agent (our protocol number), no longer wanted.
    netns_factory.ip(b, "route", "add", "10.232.0.0/24", "via", "10.212.0.1", "proto", "164")

    programmer = RouteProgrammer(
        cluster="c1", node="nb", own_cidrs=["10.220.2.0/24"], node_netns=b, retry_s=0.05
    )
    peers = [
        node("na", "10.212.0.1", "10.220.1.0/24", "10.230.0.0/24"),
        node("nb", "10.212.0.2", "10.220.2.0/24"),
        node("nc", "10.250.0.9", "10.220.3.0/24"),  # NodeIP not reachable: fails, retried
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(programmer.run)
        await trio.sleep(0.05)
        # Nothing happens before the first set_peers: the leftover is still there.
        assert programmer.state.syncs == 0
        assert route_lines(netns_factory, b, "proto", "164") == [
            "10.232.0.0/24 via 10.212.0.1 dev veth1b"
        ]

        programmer.set_peers(peers)
        await wait_for(lambda: programmer.state.errors >= 2)
        ours = route_lines(netns_factory, b, "proto", "164")
        assert ours == ["10.220.1.0/24 via 10.212.0.1 dev veth1b"]
        assert programmer.state.installed == {"10.220.1.0/24": "10.212.0.1"}
        failed = programmer.state.failed
        assert set(failed) == {"10.230.0.0/24", "10.220.3.0/24"}
        assert "exists that is not ours" in failed["10.230.0.0/24"]
        # The kernel's own words, as `ip` prints them (an unreachable next hop).
        assert "10.250.0.9: Error: Nexthop has invalid gateway" in failed["10.220.3.0/24"]
        # The foreign routes are untouched.
        assert route_lines(netns_factory, b, "10.230.0.0/24") == [
            "10.230.0.0/24 via 10.212.0.1 dev veth1b"
        ]
        assert route_lines(netns_factory, b, "10.231.0.0/24") == [
            "10.231.0.0/24 via 10.212.0.1 dev veth1b"
        ]

        # The peer moves to another NodeIP; the unreachable one leaves.
        peers[0] = node("na", "10.212.0.3", "10.220.1.0/24")
        programmer.set_peers(peers[:2])
        await wait_for(
            lambda: (
                route_lines(netns_factory, b, "proto", "164")
                == ["10.220.1.0/24 via 10.212.0.3 dev veth1b"]
            )
        )
        # The peer leaves.
        programmer.set_peers(peers[1:2])
        await wait_for(lambda: programmer.state.installed == {})
        assert route_lines(netns_factory, b, "proto", "164") == []

        programmer.set_peers(peers[:2])
        await wait_for(lambda: len(route_lines(netns_factory, b, "proto", "164")) == 1)
        nursery.cancel_scope.cancel()
    # Shutdown removes every route of ours and nothing else.
    assert route_lines(netns_factory, b, "proto", "164") == []
    assert len(route_lines(netns_factory, b, "10.230.0.0/24")) == 1
    assert read_routes(b, ROUTE_PROTO) == {}


@pytest.mark.netns
async def test_programmer_repairs_deleted_route(netns_factory: NetnsFactory) -> None:
    a, b = netns_factory.create(), netns_factory.create()
    netns_factory.veth(a, b, addrs_a=["10.212.0.1/24"], addrs_b=["10.212.0.2/24"])
    programmer = RouteProgrammer(cluster="c1", node="nb", node_netns=b, resync_interval_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(programmer.run)
        programmer.set_peers([node("na", "10.212.0.1", "10.220.1.0/24")])
        await wait_for(lambda: len(route_lines(netns_factory, b, "proto", "164")) == 1)
        await wait_for(lambda: programmer.state.changes == 1)
        netns_factory.ip(b, "route", "del", "10.220.1.0/24")
        await wait_for(lambda: programmer.state.changes == 2)
        assert len(route_lines(netns_factory, b, "proto", "164")) == 1
        nursery.cancel_scope.cancel()


@pytest.mark.netns
async def test_a_peer_change_after_a_good_sync_does_not_dump_the_routes(
    netns_factory: NetnsFactory,
) -> None:
    a, b = netns_factory.create(), netns_factory.create()
    netns_factory.veth(a, b, addrs_a=["10.212.0.1/24"], addrs_b=["10.212.0.2/24"])
    netns_factory.ip(a, "addr", "add", "10.212.0.3/24", "dev", "veth1a")
    programmer = RouteProgrammer(cluster="c1", node="nb", node_netns=b, debounce_s=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(programmer.run)
        programmer.set_peers([node("na", "10.212.0.1", "10.220.1.0/24")])
        await wait_for(lambda: programmer.state.changes == 1)
        assert programmer.state.reads == 1  # the first sync reads what is there
        # Two changes in a burst: one sync, the installed routes taken from the last one.
        programmer.set_peers([node("na", "10.212.0.1", "10.220.1.0/24")])
        programmer.set_peers(
            [node("na", "10.212.0.1", "10.220.1.0/24"), node("nc", "10.212.0.3", "10.220.3.0/24")]
        )
        await wait_for(lambda: programmer.state.changes == 2)
        assert programmer.state.syncs == 2
        assert programmer.state.reads == 1
        assert (
            programmer.state.installed
            == read_routes(b, ROUTE_PROTO)
            == {
                "10.220.1.0/24": "10.212.0.1",
                "10.220.3.0/24": "10.212.0.3",
            }
        )
        nursery.cancel_scope.cancel()
