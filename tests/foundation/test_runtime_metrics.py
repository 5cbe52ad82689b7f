"""The process, GC and trio task series (meshhealth/runtime_metrics.py): the /proc
parsers on table cases, the task count on a real trio tree, and a /proc that cannot be
read leaving its series out without raising."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.metrics import Registry
from meshhealth.runtime_metrics import (
    ProcStat,
    count_tasks,
    live_trio_tasks,
    parse_boot_time,
    parse_max_open_files,
    parse_proc_stat,
    runtime_metrics,
)

PROCESS_FAMILIES = (
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
)
# pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
# utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss ...
TAIL = "S 1 1 1 0 -1 4194560 100 0 0 0 250 50 7 9 20 0 1 0 12345 33390592 6656 18446744073709551615"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"42 (meshhealth) {TAIL}\n",
         ProcStat(cpu_seconds=3.0, virtual_memory_bytes=33390592,
                  resident_memory_bytes=6656 * 4096, start_time_seconds=1000 + 123.45)),
        # A command name with spaces and parentheses: fields count from the last ')'.
        (f"42 (a) b (c) {TAIL}",
         ProcStat(3.0, 33390592, 6656 * 4096, 1123.45)),
        (f"7 () {TAIL}", ProcStat(3.0, 33390592, 6656 * 4096, 1123.45)),
    ],
)  # fmt: skip
def test_parse_proc_stat(text: str, expected: ProcStat) -> None:
    assert parse_proc_stat(text, ticks_per_s=100, page_size=4096, boot_time_s=1000) == expected


@given(st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=16))
def test_any_command_name_leaves_the_fields_in_place(comm: str) -> None:
    # The kernel's command name holds any byte but NUL, `)` and spaces included.
    stat = parse_proc_stat(f"42 ({comm}) {TAIL}", ticks_per_s=100, page_size=4096, boot_time_s=0)
    assert stat == ProcStat(3.0, 33390592, 6656 * 4096, 123.45)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no '\\)'"),
        ("42 meshhealth S 1 1", "no '\\)'"),
        ("42 (meshhealth) S 1 1 1", "6 fields, expected at least 24"),
        (f"42 (x) {TAIL.replace('250', 'x')}", "invalid literal"),
    ],
)
def test_parse_proc_stat_refuses_what_is_not_a_stat_line(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_proc_stat(text, ticks_per_s=100, page_size=4096, boot_time_s=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu  1 2 3\nintr 5\nctxt 9\nbtime 1795746765\nprocesses 7\n", 1795746765.0),
        ("btime 0", 0.0),
        ("cpu 1\n", None),
        ("btime\n", None),
    ],
)
def test_parse_boot_time(text: str, expected: float | None) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            parse_boot_time(text)
    else:
        assert parse_boot_time(text) == expected


LIMITS_HEAD = "Limit                     Soft Limit           Hard Limit           Units     \n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (LIMITS_HEAD + "Max processes             63427      63427      processes \n"
         "Max open files            1024                 1048576              files     \n",
         1024.0),
        (LIMITS_HEAD + "Max open files            unlimited  unlimited  files\n",
         math.inf),
        (LIMITS_HEAD + "Max processes             63427      63427      processes\n",
         None),
    ],
)  # fmt: skip
def test_parse_max_open_files(text: str, expected: float | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="Max open files"):
            parse_max_open_files(text)
    else:
        assert parse_max_open_files(text) == expected


def _samples(text: str) -> dict[str, float]:
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_the_task_count_follows_the_trio_tree() -> None:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    before = count_tasks(root)
    assert live_trio_tasks() == before
    async with trio.open_nursery() as outer:
        for _ in range(3):
            outer.start_soon(trio.sleep_forever)

        async def with_children() -> None:
            async with trio.open_nursery() as inner:
                inner.start_soon(trio.sleep_forever)
                inner.start_soon(trio.sleep_forever)

        outer.start_soon(with_children)
        await trio.testing.wait_all_tasks_blocked()
        assert count_tasks(root) == before + 6  # 3 + the parent and its 2 children
        outer.cancel_scope.cancel()
    assert count_tasks(root) == before


def test_outside_trio_the_task_series_is_left_out() -> None:
    registry = Registry()
    runtime_metrics(registry)
    text = registry.expose()
    assert "# TYPE meshhealth_trio_tasks gauge" in text
    assert "meshhealth_trio_tasks " not in _samples(text)
    assert live_trio_tasks() is None


def test_a_proc_that_cannot_be_read_leaves_the_process_series_out(tmp_path: Path) -> None:
    registry = Registry()
    readings = runtime_metrics(registry, proc=tmp_path / "missing")
    samples = _samples(registry.expose())  # nothing raises
    assert readings.stat is None and readings.open_fds is None and readings.max_fds is None
    assert not any(key.startswith("process_") for key in samples)
    assert samples['python_gc_collections_total{generation="0"}'] >= 0  # the rest is there


def test_a_garbled_stat_file_leaves_only_its_series_out(tmp_path: Path) -> None:
    (tmp_path / "self" / "fd").mkdir(parents=True)
    for name in ("0", "1", "2"):
        (tmp_path / "self" / "fd" / name).touch()
    (tmp_path / "stat").write_text("btime 1000\n")
    (tmp_path / "self" / "stat").write_text("42 (x) S 1 2\n")
    (tmp_path / "self" / "limits").write_text(
        LIMITS_HEAD + "Max open files            4096                 4096                 files\n"
    )
    registry = Registry()
    runtime_metrics(registry, proc=tmp_path)
    samples = _samples(registry.expose())
    assert samples["process_open_fds"] == 3
    assert samples["process_max_fds"] == 4096
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes"):
        assert name not in samples
    # Fixed: the next scrape has them (and the boot time, read once, is kept).
    (tmp_path / "self" / "stat").write_text(f"42 (x) {TAIL}\n")
    samples = _samples(registry.expose())
    ticks = os.sysconf("SC_CLK_TCK")
    assert samples["process_start_time_seconds"] == pytest.approx(1000 + 12345 / ticks)
    assert samples["process_cpu_seconds_total"] == pytest.approx(300 / ticks)


def test_this_process_read_from_proc() -> None:
    registry = Registry()
    runtime_metrics(registry)
    samples = _samples(registry.expose())
    assert set(PROCESS_FAMILIES) <= set(samples)
    assert samples["process_resident_memory_bytes"] > 1_000_000
    assert samples["process_virtual_memory_bytes"] >= samples["process_resident_memory_bytes"]
    assert time.time() - 3600 < samples["process_start_time_seconds"] <= time.time()
    assert 0 < samples["process_open_fds"] <= samples["process_max_fds"]
    for generation in ("0", "1", "2"):
        for family in ("python_gc_objects_collected_total", "python_gc_collections_total"):
            assert f'{family}{{generation="{generation}"}}' in samples
