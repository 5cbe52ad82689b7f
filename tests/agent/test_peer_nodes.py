"""Node entries for route programming: decoding is untrusted-input safe; following them
through a watch, against a real etcd."""

from __future__ import annotations

import trio

from meshhealth.agent.membership.peer_nodes import PeerNodes, decode_nodes
from meshhealth.kvstore import open_etcd
from meshhealth.model import ClusterConfig, Node
from meshhealth.wire import keys
from meshhealth.wire.cluster_config import encode_cluster_config
from meshhealth.wire.node import encode_node
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer


def node(name: str, cidr: str) -> Node:
    return Node(name, "c1", "10.0.0.1", "10.1.0.2", (cidr,), 4240, "0.1.0", 1.0)


def test_valid_nodes_decode_and_bad_values_are_reported_not_raised() -> None:
    good = node("n1", "10.1.0.0/24")
    items = [
        (keys.node_key("c1", "n1"), encode_node(good)),
        (keys.node_key("c1", "n2"), b"garbage"),
        # a value whose name disagrees with its key is refused too
        (keys.node_key("c1", "n3"), encode_node(node("n4", "10.4.0.0/24"))),
    ]
    nodes, errors = decode_nodes(items)
    assert nodes == [good]
    assert len(errors) == 2
    assert errors[0].startswith(keys.node_key("c1", "n2") + ": ")
    assert errors[1].startswith(keys.node_key("c1", "n3") + ": ")


def test_entries_of_other_kinds_are_ignored() -> None:
    nodes, errors = decode_nodes(
        [(keys.cluster_config_key("c1"), encode_cluster_config(ClusterConfig("c1", 7)))]
    )
    assert nodes == [] and errors == []


# --- following the node entries, against a real etcd -------------------------------------


async def test_follows_joins_and_leaves_with_one_list(
    etcd_server: EtcdServer,
) -> None:
    delivered: list[list[Node]] = []

    def names() -> set[str]:
        return {n.name for n in delivered[-1]} if delivered else set()

    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await etcd.put(keys.node_key("c1", "n1"), encode_node(node("n1", "10.1.1.0/24")))
        peers = PeerNodes(lambda: [("c1", etcd)], delivered.append, sources_check_s=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(peers.run)
            await poll_until(lambda: names() == {"n1"}, 5.0, what="n1 listed")
            for k in range(2, 6):  # joins come through the watch: no list per join
                value = encode_node(node(f"n{k}", f"10.1.{k}.0/24"))
                await etcd.put(keys.node_key("c1", f"n{k}"), value)
            await poll_until(lambda: len(names()) == 5, 5.0, what="n2..n5 joined")
            await etcd.put(keys.node_key("c1", "n6"), b"garbage")
            await etcd.delete(keys.node_key("c1", "n2"))
            await poll_until(lambda: names() == {"n1", "n3", "n4", "n5"}, 5.0, what="n2 left")
            assert peers.invalid_values == 1
            assert peers.lists == 1
            cidrs = {n.name: n.cidrs for n in delivered[-1]}
            assert cidrs["n5"] == ("10.1.5.0/24",)
            nursery.cancel_scope.cancel()


async def test_a_remote_that_leaves_the_sources_takes_its_nodes(etcd_server: EtcdServer) -> None:
    delivered: list[list[Node]] = []
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await etcd.put(keys.node_key("c1", "n1"), encode_node(node("n1", "10.1.1.0/24")))
        remote = Node("r1", "c2", "10.0.9.1", None, ("10.9.0.0/24",), 4240, "0.1.0", 1.0)
        await etcd.put(keys.node_key("c2", "r1"), encode_node(remote))
        sources = [("c1", etcd), ("c2", etcd)]
        peers = PeerNodes(lambda: list(sources), delivered.append, sources_check_s=0.05)

        def clusters() -> set[str]:
            return {n.cluster for n in delivered[-1]} if delivered else set()

        async with trio.open_nursery() as nursery:
            await nursery.start(peers.run)
            await poll_until(lambda: clusters() == {"c1", "c2"}, 5.0, what="both listed")
            sources.pop()
            await poll_until(lambda: clusters() == {"c1"}, 5.0, what="c2 dropped")
            assert [n.name for n in delivered[-1]] == ["n1"]
            nursery.cancel_scope.cancel()
