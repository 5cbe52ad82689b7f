"""Sizing the kernel-wide ARP table for a lab (pure parts, and the sysctl files' order)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshhealth.lab import neigh_table

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
