"""The chaos soak's schedule (meshhealth/lab/chaos_schedule.py): reproducible, bounded
overlaps, one culprit per node at a time, every kind, arguments the lab takes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.lab import etcd_members as M
from meshhealth.lab import fault_targets as T
from meshhealth.lab import faults as F
from meshhealth.lab import plan as P
from meshhealth.lab.chaos_schedule import (
    GROUP_PARTITION,
    KINDS,
    MAX_CONCURRENT,
    RESTART_AGENT,
    ScheduledFault,
    concurrency,
    make_schedule,
    possible_kinds,
)


def schedule(seed: int, nodes: int = 16, members: int = 3, minutes: float = 60, settle: float = 40):
    return make_schedule(
        seed, nodes=nodes, etcd_members=members, duration_s=minutes * 60, settle_s=settle
    )


def check_rules(faults: tuple[ScheduledFault, ...], duration_s: float, settle_s: float) -> None:
    assert list(faults) == sorted(faults, key=lambda f: f.start_s)
    assert concurrency(faults) <= MAX_CONCURRENT
    for i, a in enumerate(faults):
        assert 0 <= a.start_s < a.end_s <= duration_s - settle_s
        for b in faults[i + 1 :]:
            if not a.overlaps(b, settle_s):
                continue
            assert not set(a.nodes) & set(b.nodes), (a, b)
            assert not (a.member is not None and b.member is not None), (a, b)
            if GROUP_PARTITION in (a.kind, b.kind):
                assert not (a.nodes and b.nodes), (a, b)


def test_same_seed_same_schedule() -> None:
    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)


@given(
    seed=st.integers(0, 2**32),
    nodes=st.integers(1, 40),
    members=st.sampled_from([1, 3, 5]),
    minutes=st.floats(2, 30),
)
@settings(max_examples=40, deadline=None)
def test_rules_hold(seed: int, nodes: int, members: int, minutes: float) -> None:
    faults = schedule(seed, nodes, members, minutes)
    assert faults == schedule(seed, nodes, members, minutes)
    check_rules(faults, minutes * 60, 40)
    kinds = possible_kinds(nodes, members)
    assert {f.kind for f in faults} <= set(kinds)


def test_an_hour_has_every_kind_and_overlaps() -> None:
    faults = schedule(1)
    assert {f.kind for f in faults} == set(KINDS)
    assert concurrency(faults) == MAX_CONCURRENT
    restarts = [f for f in faults if f.kind == RESTART_AGENT]
    assert all(f.end_s - f.start_s < 10 for f in restarts)


def test_ci_run_overlaps() -> None:
    """The 3-minute CI soak (6 nodes, seed 1) has overlapping faults."""
    faults = schedule(1, nodes=6, minutes=3)
    assert len(faults) >= 3
    assert concurrency(faults) == 2


@pytest.mark.parametrize(
    ("nodes", "members", "absent"),
    [
        (16, 3, set()),
        (16, 1, {M.KILL_MEMBER, M.PARTITION_MEMBER}),
        (4, 3, {GROUP_PARTITION}),
        (2, 3, {GROUP_PARTITION, F.PARTITION, F.EGRESS_DROP, F.INGRESS_DROP}),
        (1, 3, {GROUP_PARTITION, F.PARTITION, F.EGRESS_DROP, F.INGRESS_DROP, F.PATH_DROP}),
    ],
)
def test_possible_kinds(nodes: int, members: int, absent: set[str]) -> None:
    assert set(KINDS) - set(possible_kinds(nodes, members)) == absent


@pytest.mark.parametrize(
    ("fault", "lab_kind", "args", "recorded"),
    [
        (ScheduledFault(F.MTU, 0, 1, ("node2",)), F.MTU, ["node2", "1400"], "lab1/node2 1400"),
        (
            ScheduledFault(GROUP_PARTITION, 0, 1, ("node2", "node5")),
            F.PARTITION,
            ["node2,node5"],
            "lab1/node2,lab1/node5",
        ),
        (
            ScheduledFault(F.PATH_DROP, 0, 1, ("node3", "node1")),
            F.PATH_DROP,
            ["node3", "node1"],
            "lab1/node3 lab1/node1",
        ),
        (ScheduledFault(RESTART_AGENT, 0, 1, ("node4",)), F.KILL_AGENT, ["node4"], "lab1/node4"),
        (ScheduledFault(F.STARVE, 0, 1, ("node4",)), F.STARVE, ["node4"], "lab1/node4"),
    ],
)
def test_lab_args(
    tmp_path: Path, fault: ScheduledFault, lab_kind: str, args: list[str], recorded: str
) -> None:
    """What the soak passes to the lab's fault code is what `lab fault` accepts."""
    assert fault.spec.lab_kind == lab_kind
    assert fault.lab_args == args
    plan = P.make_plan("t", 6, 1, root=tmp_path)
    assert T.parse_target(plan, lab_kind, args).target == recorded


def test_member_args() -> None:
    fault = ScheduledFault(M.PARTITION_MEMBER, 0, 1, member=2)
    assert fault.spec.lab_kind == M.PARTITION_MEMBER
    assert fault.lab_args == ["2"]
    assert fault.label == "partition-etcd-member 2"
