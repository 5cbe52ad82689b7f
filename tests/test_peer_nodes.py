"""Node entries for route programming: decoding is untrusted-input safe."""

from __future__ import annotations

from meshhealth import codec, keys
from meshhealth.agent.membership.peer_nodes import decode_nodes
from meshhealth.model import ClusterConfig, Node


def node(name: str, cidr: str) -> Node:
    return Node(name, "c1", "10.0.0.1", "10.1.0.2", (cidr,), 4240, "0.1.0", 1.0)


def test_valid_nodes_decode_and_bad_values_are_reported_not_raised() -> None:
    good = node("n1", "10.1.0.0/24")
    items = [
        (keys.node_key("c1", "n1"), codec.encode_node(good)),
        (keys.node_key("c1", "n2"), b"garbage"),
        # a value whose name disagrees with its key is refused too
        (keys.node_key("c1", "n3"), codec.encode_node(node("n4", "10.4.0.0/24"))),
    ]
    nodes, errors = decode_nodes(items)
    assert nodes == [good]
    assert len(errors) == 2
    assert errors[0].startswith(keys.node_key("c1", "n2") + ": ")
    assert errors[1].startswith(keys.node_key("c1", "n3") + ": ")


def test_entries_of_other_kinds_are_ignored() -> None:
    nodes, errors = decode_nodes(
        [(keys.cluster_config_key("c1"), codec.encode_cluster_config(ClusterConfig("c1", 7)))]
    )
    assert nodes == [] and errors == []
