"""Probe set building and diffing (pure, table-driven)."""

from __future__ import annotations

import pytest

from meshhealth.model import (
    IDENTITY_HEALTH,
    IDENTITY_HOST,
    IDENTITY_REMOTE_NODE,
    IPEntry,
    Node,
    Target,
)
from meshhealth.probe_set import (
    ProbeSetDiff,
    apply_diff,
    build_probe_set,
    diff_probe_sets,
    vouched_entries,
)


def node_entry(ip: str, node: str) -> IPEntry:
    return IPEntry(ip=ip, host_ip=ip, node=node, identity=IDENTITY_REMOTE_NODE)


def health_entry(ip: str, host_ip: str, node: str) -> IPEntry:
    return IPEntry(ip=ip, host_ip=host_ip, node=node, identity=IDENTITY_HEALTH)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([], {}, id="empty"),
        pytest.param(
            [("c1", node_entry("10.0.0.1", "n1"))],
            {("c1", "n1"): Target("c1", "n1", "10.0.0.1", None)},
            id="node-without-health-endpoint",
        ),
        pytest.param(
            [
                ("c1", health_entry("10.1.0.2", "10.0.0.1", "n1")),
                ("c1", node_entry("10.0.0.1", "n1")),
            ],
            {("c1", "n1"): Target("c1", "n1", "10.0.0.1", "10.1.0.2")},
            id="grouped-by-host-ip-any-order",
        ),
        pytest.param(
            [
                ("c1", node_entry("10.0.0.1", "n1")),
                ("c1", health_entry("10.1.0.2", "10.0.0.1", "n1")),
                ("c1", node_entry("10.0.0.2", "n2")),
                ("c1", health_entry("10.2.0.2", "10.0.0.2", "n2")),
            ],
            {
                ("c1", "n1"): Target("c1", "n1", "10.0.0.1", "10.1.0.2"),
                ("c1", "n2"): Target("c1", "n2", "10.0.0.2", "10.2.0.2"),
            },
            id="two-nodes",
        ),
        pytest.param(
            [
                ("c1", node_entry("10.0.0.1", "n1")),
                ("c1", IPEntry("10.0.0.9", "10.0.0.1", "n1", IDENTITY_HOST)),
                ("c1", IPEntry("10.9.9.9", "10.9.9.9", "x", 12345)),
            ],
            {("c1", "n1"): Target("c1", "n1", "10.0.0.1", None)},
            id="other-identities-ignored",
        ),
        pytest.param(
            [
                ("c1", node_entry("10.0.0.1", "n1")),
                ("c2", node_entry("10.0.0.1", "n1")),
                ("c2", health_entry("10.1.0.2", "10.0.0.1", "n1")),
            ],
            {
                ("c1", "n1"): Target("c1", "n1", "10.0.0.1", None),
                ("c2", "n1"): Target("c2", "n1", "10.0.0.1", "10.1.0.2"),
            },
            id="clusters-kept-apart",
        ),
        pytest.param(
            [("c1", health_entry("10.1.0.2", "10.0.0.1", "n1"))],
            {("c1", "n1"): Target("c1", "n1", "10.0.0.1", "10.1.0.2")},
            id="health-entry-alone-names-its-host",
        ),
        pytest.param(
            [
                ("c1", node_entry("10.0.0.2", "dup")),
                ("c1", node_entry("10.0.0.1", "dup")),
            ],
            {("c1", "dup"): Target("c1", "dup", "10.0.0.1", None)},
            id="duplicate-name-lowest-host-ip-wins",
        ),
        pytest.param(
            [
                ("c1", node_entry("10.0.0.1", "n1")),
                ("c1", health_entry("10.1.0.9", "10.0.0.1", "n1")),
                ("c1", health_entry("10.1.0.3", "10.0.0.1", "n1")),
            ],
            {("c1", "n1"): Target("c1", "n1", "10.0.0.1", "10.1.0.3")},
            id="two-health-ips-lowest-wins",
        ),
        pytest.param(
            [
                ("c1", node_entry("fd00::1", "v6")),
                ("c1", health_entry("fd00:1::2", "fd00::1", "v6")),
            ],
            {("c1", "v6"): Target("c1", "v6", "fd00::1", "fd00:1::2")},
            id="ipv6",
        ),
    ],
)
def test_build_probe_set(
    entries: list[tuple[str, IPEntry]], expected: dict[tuple[str, str], Target]
) -> None:
    assert build_probe_set(entries) == expected
    assert build_probe_set(reversed(entries)) == expected


A = Target("c1", "a", "10.0.0.1", "10.1.0.1")
A2 = Target("c1", "a", "10.0.0.1", None)
B = Target("c1", "b", "10.0.0.2", None)
C = Target("c2", "c", "10.0.0.3", None)


def keyed(*targets: Target) -> dict[tuple[str, str], Target]:
    return {(t.cluster, t.node): t for t in targets}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(keyed(), keyed(), ProbeSetDiff(), id="nothing"),
        pytest.param(keyed(A), keyed(A), ProbeSetDiff(), id="same"),
        pytest.param(keyed(), keyed(B, A), ProbeSetDiff(added=(A, B)), id="added-sorted"),
        pytest.param(keyed(A, C), keyed(), ProbeSetDiff(removed=(A, C)), id="removed"),
        pytest.param(keyed(A), keyed(A2), ProbeSetDiff(changed=((A, A2),)), id="changed"),
        pytest.param(
            keyed(A, B),
            keyed(A2, C),
            ProbeSetDiff(added=(C,), removed=(B,), changed=((A, A2),)),
            id="mixed",
        ),
    ],
)
def test_diff_probe_sets(
    old: dict[tuple[str, str], Target],
    new: dict[tuple[str, str], Target],
    expected: ProbeSetDiff,
) -> None:
    diff = diff_probe_sets(old, new)
    assert diff == expected
    assert diff.empty == (expected == ProbeSetDiff())
    assert apply_diff(old, diff) == new


_N1 = Node("n1", "c1", "10.0.0.1", "10.1.0.1", (), 4240, "1", 0.0, node_ip_secondary="fd00::1")


@pytest.mark.parametrize(
    ("entry", "believed"),
    [
        (IPEntry("10.0.0.1", "10.0.0.1", "n1", IDENTITY_REMOTE_NODE, ()), True),
        (IPEntry("10.1.0.1", "10.0.0.1", "n1", IDENTITY_HEALTH, ()), True),
        (IPEntry("fd00::1", "10.0.0.1", "n1", IDENTITY_REMOTE_NODE, ()), True),
        # an address n1's entry does not list
        (IPEntry("10.1.0.9", "10.0.0.1", "n1", IDENTITY_HEALTH, ()), False),
        # n1's address, but another host_ip (would group it under another host)
        (IPEntry("10.1.0.1", "10.0.0.2", "n1", IDENTITY_HEALTH, ()), False),
        # a node without a node entry
        (IPEntry("10.0.0.3", "10.0.0.3", "n3", IDENTITY_REMOTE_NODE, ()), False),
    ],
)
def test_an_ip_entry_is_believed_when_its_node_lists_it(entry: IPEntry, believed: bool) -> None:
    kept, refused = vouched_entries([("c1", entry)], [_N1])
    assert (kept, refused) == (([("c1", entry)], []) if believed else ([], [("c1", entry)]))
    # the same node name in another cluster vouches for nothing here
    assert vouched_entries([("c2", entry)], [_N1]) == ([], [("c2", entry)])
