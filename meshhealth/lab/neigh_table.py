"""The kernel's ARP table is shared by every network namespace of the host.

Its size limits (net.ipv4.neigh.default.gc_thresh1/2/3, 128/512/1024 by default) are
kernel-wide and only settable from the host's namespace. A lab of N nodes on one bridge
needs about N x (N + 2) entries in all (every node resolves every peer, plus its health
endpoint and etcd), so past ~30 nodes the default table overflows ("neighbor table
overflow!" in dmesg) and nodes cannot reach each other: measured with 40 nodes, 1,024
entries in use and most nodes seeing 0-11/40 reachable.

`lab up` raises the limits when the plan needs more (never lowers them), records the
values it found, and `lab down` puts them back. Only these three sysctls are touched;
nothing is routed to or from the host's network.
"""

from __future__ import annotations

from pathlib import Path

SYSCTL_DIR = Path("/proc/sys/net/ipv4/neigh/default")
KEYS = ("gc_thresh1", "gc_thresh2", "gc_thresh3")


def entries_needed(nodes: int) -> int:
    """ARP entries a lab of `nodes` nodes uses at most, with 2x headroom. Pure."""
    return 2 * nodes * (nodes + 2) + 256


def thresholds_for(needed: int, current: dict[str, int]) -> dict[str, int] | None:
    """New limits when `current` is too small for `needed`, else None. Pure.

    gc_thresh3 is the hard limit; the kernel starts collecting above gc_thresh2 and
    keeps up to gc_thresh1 untouched: keep the defaults' 1/8, 1/2, 1 proportions.
    """
    if current.get("gc_thresh3", 0) >= needed:
        return None
    hard = needed
    return {
        "gc_thresh1": max(current.get("gc_thresh1", 0), hard // 8),
        "gc_thresh2": max(current.get("gc_thresh2", 0), hard // 2),
        "gc_thresh3": hard,
    }


def read_thresholds(base: Path = SYSCTL_DIR) -> dict[str, int]:
    return {key: int((base / key).read_text()) for key in KEYS}


def write_thresholds(values: dict[str, int], base: Path = SYSCTL_DIR) -> None:
    # Raise the hard limit first and lower it last, so thresh1 <= thresh2 <= thresh3 holds.
    order = KEYS[::-1] if values["gc_thresh3"] >= read_thresholds(base)["gc_thresh3"] else KEYS
    for key in order:
        (base / key).write_text(f"{values[key]}\n")
