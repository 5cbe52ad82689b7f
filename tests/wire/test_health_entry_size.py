"""A health entry is O(K): its encoded size per target, and the 8 KB bound at the default
K and at the full-mesh threshold (docs/kvstore.md, "Size")."""

from __future__ import annotations

import dataclasses

import pytest

from meshhealth import defaults
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathHealth,
    ProbeStatus,
    TargetHealth,
    TargetType,
    TraceStop,
    path_name,
)
from meshhealth.wire.health import encode_health_report

ENTRY_LIMIT_BYTES = 8 * 1024
# The longest names the bound is stated for: a cluster name at its limit (32) and node
# names of one full DNS label (63); every path probed, failing with the longest status,
# with an RTT and a loss that need a full float each.
CLUSTER = "c" * 32
NODE_LEN = 63
# What one target costs beyond its two names, and the report beyond its source's names.
PER_TARGET_BYTES = 270
PER_REPORT_BYTES = 80
# A dual-stack report says its targets' secondary family once (`secondary_family`).
PER_REPORT_FAMILY_BYTES = 24
# The NodeIP's extra paths, per target: the MTU probe and the UDP echo together (with the
# `extra_paths` key), and each TCP port of --probe-tcp-ports (a 5-digit port).
PER_TARGET_DF_UDP_BYTES = 135
PER_TCP_PORT_BYTES = 64
# Where this node's trace to a target stopped (`trace`, only while its NodeIP ICMP path is
# unreachable): the longest IPv6 address, a hop and a time.
PER_TARGET_TRACE_BYTES = 80


def _name(i: int) -> str:
    return f"n{i:04d}".ljust(NODE_LEN, "x")


def _report(
    targets: int, *, node_len: int = NODE_LEN, cluster: str = CLUSTER, dual_stack: bool = False
) -> HealthReport:
    paths = {
        path_name(t, p): PathHealth(ProbeStatus.HTTP_ERROR, 0.000412345678, 0.333)
        for t in TargetType
        for p in REACHABILITY_PROTOCOLS
    }
    return HealthReport(
        node=_name(0)[:node_len],
        cluster=cluster,
        probe_time=1_795_000_000.123,
        interval_s=10.0,
        targets=tuple(
            TargetHealth(
                cluster,
                _name(i)[:node_len],
                paths,
                dict(paths) if dual_stack else {},
                "ipv6" if dual_stack else None,  # said once per report
            )
            for i in range(targets)
        ),
    )


def _size(report: HealthReport) -> int:
    return len(encode_health_report(report))


@pytest.mark.parametrize(("node_len", "cluster"), [(5, "c"), (20, "prod-eu"), (63, CLUSTER)])
@pytest.mark.parametrize("dual_stack", [False, True])
def test_size_per_target(node_len: int, cluster: str, dual_stack: bool) -> None:
    """Each target adds at most PER_TARGET_BYTES (twice for a dual-stack target, whose
    secondary addresses have paths of their own) plus its names: linear in targets."""
    empty = _size(_report(0, node_len=node_len, cluster=cluster))
    assert empty <= PER_REPORT_BYTES + node_len + len(cluster)
    paths_bytes = PER_TARGET_BYTES * (2 if dual_stack else 1)
    once = PER_REPORT_FAMILY_BYTES if dual_stack else 0
    for n in (1, 6, 16, 100):
        report = _report(n, node_len=node_len, cluster=cluster, dual_stack=dual_stack)
        per_target = (_size(report) - empty - once) / n
        assert per_target <= paths_bytes + node_len + len(cluster), (n, per_target)


@pytest.mark.parametrize("dual_stack", [False, True])
def test_entry_at_the_default_k_stays_under_8_kb(dual_stack: bool) -> None:
    targets = defaults.PLAN_PROBE_TARGETS + 1  # the default K and the node itself
    size = _size(_report(targets, dual_stack=dual_stack))
    print(f"{targets} targets, dual stack {dual_stack}: {size} bytes")
    # 2 KB left for the fields later versions add (per path suspicion, a degraded flag)
    assert size <= ENTRY_LIMIT_BYTES - 2048


def test_entry_at_the_full_mesh_threshold() -> None:
    """The plan's largest full mesh: under 8 KB single stack; a dual-stack target has
    twice the paths, and 16 of them pass 8 KB (docs/kvstore.md says by how much)."""
    targets = defaults.PLAN_FULL_MESH_MAX_NODES
    single = _size(_report(targets))
    dual = _size(_report(targets, dual_stack=True))
    print(f"{targets} targets: {single} bytes, dual stack {dual}")
    assert single <= ENTRY_LIMIT_BYTES
    assert ENTRY_LIMIT_BYTES < dual <= 10_240
    short_names = _report(targets, node_len=8, cluster="prod", dual_stack=True)
    assert _size(short_names) <= 8_704


def test_full_mesh_grows_with_n() -> None:
    """--full-mesh: every node is a target, so the entry passes 8 KB at some N (said in
    docs/kvstore.md) and still stays under etcd's value limit at 1,000 nodes."""
    assert _size(_report(30)) > ENTRY_LIMIT_BYTES
    assert _size(_report(1000)) < defaults.MAX_VALUE_BYTES


def _with_extra_paths(report: HealthReport, ports: int) -> HealthReport:
    """Every target with node/icmp-df, node/udp and `ports` TCP ports (5 digits each),
    all failing like the others."""
    path = PathHealth(ProbeStatus.HTTP_ERROR, 0.000412345678, 0.333)
    extra = {"node/icmp-df": path, "node/udp": path}
    extra |= {f"node/tcp:{65535 - i}": path for i in range(ports)}
    targets = tuple(dataclasses.replace(t, paths={**t.paths, **extra}) for t in report.targets)
    return dataclasses.replace(report, targets=targets)


@pytest.mark.parametrize("ports", [0, 1, defaults.TCP_PROBE_MAX_PORTS])
def test_extra_paths_per_target(ports: int) -> None:
    """The MTU, UDP and TCP paths cost a fixed amount per target: still O(K)."""
    for n in (1, 6, 16):
        plain = _size(_report(n))
        extra = _size(_with_extra_paths(_report(n), ports))
        per_target = (extra - plain) / n
        assert per_target <= PER_TARGET_DF_UDP_BYTES + ports * PER_TCP_PORT_BYTES, (n, per_target)


@pytest.mark.parametrize("dual_stack", [False, True])
def test_every_extra_path_at_the_default_k_stays_under_8_kb(dual_stack: bool) -> None:
    """The MTU probe, the UDP echo and the most TCP ports at the default K: under 8 KB."""
    targets = defaults.PLAN_PROBE_TARGETS + 1
    report = _report(targets, dual_stack=dual_stack)
    size = _size(_with_extra_paths(report, defaults.TCP_PROBE_MAX_PORTS))
    print(f"{targets} targets, every extra path, dual stack {dual_stack}: {size} bytes")
    assert size <= ENTRY_LIMIT_BYTES


def _with_traces(report: HealthReport) -> HealthReport:
    """Every target with a trace that stopped after the longest IPv6 address."""
    stop = TraceStop("fd00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 16, 1_700_000_000.123456)
    targets = tuple(dataclasses.replace(t, trace=stop) for t in report.targets)
    return dataclasses.replace(report, targets=targets)


def test_trace_per_target() -> None:
    """A trace costs a fixed amount per target: still O(K)."""
    for n in (1, 6, 16):
        per_target = (_size(_with_traces(_report(n))) - _size(_report(n))) / n
        assert 40 < per_target <= PER_TARGET_TRACE_BYTES, (n, per_target)


@pytest.mark.parametrize("dual_stack", [False, True])
def test_every_target_traced_at_the_default_k_stays_under_8_kb(dual_stack: bool) -> None:
    """Every extra path and a trace to every target at the default K: under 8 KB."""
    report = _with_extra_paths(
        _report(defaults.PLAN_PROBE_TARGETS + 1, dual_stack=dual_stack),
        defaults.TCP_PROBE_MAX_PORTS,
    )
    size = _size(_with_traces(report))
    print(f"every extra path and a trace per target, dual stack {dual_stack}: {size} bytes")
    assert size <= ENTRY_LIMIT_BYTES
