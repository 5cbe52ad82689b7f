"""A health entry is O(K): its encoded size per target, and the 8 KB bound at the default
K and at the full-mesh threshold (docs/kvstore.md, "Size")."""

from __future__ import annotations

import pytest

from meshhealth import codec, defaults
from meshhealth.model import (
    HealthReport,
    PathHealth,
    ProbeStatus,
    Protocol,
    TargetHealth,
    TargetType,
    path_name,
)

ENTRY_LIMIT_BYTES = 8 * 1024
# The longest names the bound is stated for: a cluster name at its limit (32) and node
# names of one full DNS label (63); every path probed, failing with the longest status,
# with an RTT and a loss that need a full float each.
CLUSTER = "c" * 32
NODE_LEN = 63
# What one target costs beyond its two names, and the report beyond its source's names.
PER_TARGET_BYTES = 270
PER_REPORT_BYTES = 80


def _name(i: int) -> str:
    return f"n{i:04d}".ljust(NODE_LEN, "x")


def _report(targets: int, *, node_len: int = NODE_LEN, cluster: str = CLUSTER) -> HealthReport:
    paths = {
        path_name(t, p): PathHealth(ProbeStatus.HTTP_ERROR, 0.000412345678, 0.333)
        for t in TargetType
        for p in Protocol
    }
    return HealthReport(
        node=_name(0)[:node_len],
        cluster=cluster,
        probe_time=1_795_000_000.123,
        interval_s=10.0,
        targets=tuple(TargetHealth(cluster, _name(i)[:node_len], paths) for i in range(targets)),
    )


def _size(report: HealthReport) -> int:
    return len(codec.encode_health_report(report))


@pytest.mark.parametrize(("node_len", "cluster"), [(5, "c"), (20, "prod-eu"), (63, CLUSTER)])
def test_size_per_target(node_len: int, cluster: str) -> None:
    """Each target adds at most PER_TARGET_BYTES plus its names: linear in targets."""
    empty = _size(_report(0, node_len=node_len, cluster=cluster))
    assert empty <= PER_REPORT_BYTES + node_len + len(cluster)
    for n in (1, 6, 16, 100):
        per_target = (_size(_report(n, node_len=node_len, cluster=cluster)) - empty) / n
        assert per_target <= PER_TARGET_BYTES + node_len + len(cluster), (n, per_target)


@pytest.mark.parametrize(
    "targets",
    [
        defaults.PLAN_PROBE_TARGETS + 1,  # the default K and the node itself
        defaults.PLAN_FULL_MESH_MAX_NODES,  # the largest full mesh of the plan
    ],
)
def test_entry_stays_under_8_kb(targets: int) -> None:
    size = _size(_report(targets))
    print(f"{targets} targets: {size} bytes")
    # 2 KB left for the fields later versions add (per path suspicion, a degraded flag)
    assert size <= ENTRY_LIMIT_BYTES - 2048


def test_full_mesh_grows_with_n() -> None:
    """--full-mesh: every node is a target, so the entry passes 8 KB at some N (said in
    docs/kvstore.md) and still stays under etcd's value limit at 1,000 nodes."""
    assert _size(_report(30)) > ENTRY_LIMIT_BYTES
    assert _size(_report(1000)) < defaults.MAX_VALUE_BYTES
