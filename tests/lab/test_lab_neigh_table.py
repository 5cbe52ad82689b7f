"""Sizing the kernel-wide ARP table for a lab (pure parts, and the sysctl files' order)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshhealth.lab import neigh_table
from meshhealth.netns import call_in_netns
from tests.plugins.netns import NetnsFactory

DEFAULTS = {"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024}


@pytest.mark.parametrize(
    ("nodes", "raise_expected"), [(4, False), (10, False), (20, True), (40, True), (100, True)]
)
def test_limits_raised_only_when_the_lab_needs_more(nodes: int, raise_expected: bool) -> None:
    wanted = neigh_table.thresholds_for(neigh_table.entries_needed(nodes), DEFAULTS)
    assert (wanted is not None) is raise_expected
    if wanted is not None:
        assert wanted["gc_thresh3"] >= nodes * (nodes + 2)
        assert wanted["gc_thresh1"] <= wanted["gc_thresh2"] <= wanted["gc_thresh3"]


def test_never_lowers_a_larger_setting() -> None:
    big = {"gc_thresh1": 4096, "gc_thresh2": 8192, "gc_thresh3": 65536}
    assert neigh_table.thresholds_for(neigh_table.entries_needed(100), big) is None
    partial = {"gc_thresh1": 5000, "gc_thresh2": 6000, "gc_thresh3": 7000}
    wanted = neigh_table.thresholds_for(20_000, partial)
    assert wanted == {"gc_thresh1": 5000, "gc_thresh2": 10_000, "gc_thresh3": 20_000}


def test_write_then_restore_round_trips(tmp_path: Path) -> None:
    for key, value in DEFAULTS.items():
        (tmp_path / key).write_text(f"{value}\n")
    wanted = neigh_table.thresholds_for(10_000, DEFAULTS)
    assert wanted is not None
    neigh_table.write_thresholds(wanted, tmp_path)
    assert neigh_table.read_thresholds(tmp_path) == wanted
    neigh_table.write_thresholds(DEFAULTS, tmp_path)
    assert neigh_table.read_thresholds(tmp_path) == DEFAULTS


@pytest.mark.parametrize(
    ("hard_limit", "nodes"), [(0, 0), (3, 1), (8, 2), (1024, 31), (1679, 39), (1680, 40)]
)
def test_nodes_allowed_is_the_largest_lab_that_fits(hard_limit: int, nodes: int) -> None:
    assert neigh_table.nodes_allowed(hard_limit) == nodes
    assert nodes * (nodes + 2) <= hard_limit < (nodes + 1) * (nodes + 3)


def _sysctl_dir(tmp_path: Path, values: dict[str, int]) -> Path:
    for key, value in values.items():
        (tmp_path / key).write_text(f"{value}\n")
    return tmp_path


def test_small_lab_leaves_the_limits_alone(tmp_path: Path) -> None:
    base = _sysctl_dir(tmp_path, DEFAULTS)
    recorded: list[dict[str, int]] = []
    assert neigh_table.size_for_lab(4, base, before_write=recorded.append) == (neigh_table.Sizing())
    assert recorded == [] and neigh_table.read_thresholds(base) == DEFAULTS


def test_big_lab_records_then_raises(tmp_path: Path) -> None:
    base = _sysctl_dir(tmp_path, DEFAULTS)
    recorded: list[dict[str, int]] = []

    def record(previous: dict[str, int]) -> None:
        recorded.append(previous)
        assert neigh_table.read_thresholds(base) == DEFAULTS  # nothing written yet

    sizing = neigh_table.size_for_lab(40, base, before_write=record)
    assert recorded == [DEFAULTS] and sizing.previous == DEFAULTS and sizing.note is None
    assert neigh_table.read_thresholds(base) == sizing.raised_to
    assert sizing.raised_to is not None and sizing.raised_to["gc_thresh3"] >= 40 * 42


def test_missing_knobs_are_a_note_not_an_error(tmp_path: Path) -> None:
    """A container's network namespace has no gc_thresh files ([Errno 2] before)."""
    sizing = neigh_table.size_for_lab(3, tmp_path / "absent")
    assert sizing.previous is None
    assert sizing.note == (
        "host ARP table not sized (its limits are not visible in this network namespace, "
        "e.g. in a container); the host's limit applies (gc_thresh3, 1024 entries by "
        "default: about 31 nodes); this lab has 3"
    )


def test_knobs_that_cannot_be_written_are_a_note(tmp_path: Path) -> None:
    """Read-only limits (a read-only /proc/sys): here a read-only sysctl stands in, which
    even root cannot write (65536 read from each)."""
    read_only = Path("/proc/sys/kernel/ngroups_max")
    if not read_only.exists():
        pytest.skip("no /proc/sys/kernel/ngroups_max")
    for key in neigh_table.KEYS:
        (tmp_path / key).symlink_to(read_only)
    limit = int(read_only.read_text())
    recorded: list[dict[str, int]] = []
    sizing = neigh_table.size_for_lab(300, tmp_path, before_write=recorded.append)
    assert sizing.previous is None and recorded == [dict.fromkeys(neigh_table.KEYS, limit)]
    assert sizing.note is not None
    assert sizing.note.startswith("host ARP table not sized (cannot raise it here: ")
    allowed = neigh_table.nodes_allowed(limit)
    assert sizing.note.endswith(
        f"limit gc_thresh3 = {limit} entries: about {allowed} nodes; this lab has 300"
    )


@pytest.mark.netns
def test_the_real_knobs_are_absent_in_a_namespace_of_our_own(
    netns_factory: NetnsFactory,
) -> None:
    """What a container sees: read from a thread inside a fresh network namespace."""
    ns = netns_factory.create()
    sizing = call_in_netns(ns, lambda: neigh_table.size_for_lab(3))
    assert sizing.previous is None
    assert sizing.note is not None and "not visible in this network namespace" in sizing.note
