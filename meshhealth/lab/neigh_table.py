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

In a container (its own network namespace, even with NET_ADMIN) the limits do not exist
as files (the kernel shows them in the host's first namespace only) and cannot be set;
the host's apply. Then, and when the files are there but cannot be written, `lab up`
goes on and says once what the limit is and how many nodes it allows (`size_for_lab`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SYSCTL_DIR = Path("/proc/sys/net/ipv4/neigh/default")
KEYS = ("gc_thresh1", "gc_thresh2", "gc_thresh3")
# The kernel's gc_thresh3 unless someone changed it: what applies when we cannot read it.
KERNEL_DEFAULT_HARD_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Sizing:
    """What `size_for_lab` did: the limits it found and replaced (for `lab down` to put
    back), or None; and one line for the user when it could not size the table."""

    previous: dict[str, int] | None = None
    raised_to: dict[str, int] | None = None
    note: str | None = None


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


def nodes_allowed(hard_limit: int) -> int:
    """Most lab nodes whose ARP entries, N x (N + 2), fit under `hard_limit`. Pure."""
    nodes = 0
    while (nodes + 1) * (nodes + 3) <= hard_limit:
        nodes += 1
    return nodes


def unsized_note(nodes: int, hard_limit: int | None, why: str) -> str:
    """The one line `lab up` says when it cannot size the table. Pure."""
    if hard_limit is None:
        limit = (
            f"the host's limit applies (gc_thresh3, {KERNEL_DEFAULT_HARD_LIMIT} entries "
            f"by default: about {nodes_allowed(KERNEL_DEFAULT_HARD_LIMIT)} nodes)"
        )
    else:
        limit = f"limit gc_thresh3 = {hard_limit} entries: about {nodes_allowed(hard_limit)} nodes"
    return f"host ARP table not sized ({why}); {limit}; this lab has {nodes}"


def size_for_lab(
    nodes: int,
    base: Path = SYSCTL_DIR,
    *,
    before_write: Callable[[dict[str, int]], None] = lambda previous: None,
) -> Sizing:
    """Raise the limits when a lab of `nodes` nodes needs it and the knobs exist.

    `before_write(previous)` runs before anything is written (the lab records the values
    in its state file then, so a crash right after still restores them). Never raises
    OSError: a missing or read-only knob (a container) becomes a note.
    """
    try:
        current = read_thresholds(base)
    except FileNotFoundError:
        return Sizing(
            note=unsized_note(nodes, None, "its limits are not visible in this network "
                              "namespace, e.g. in a container")
        )  # fmt: skip
    except (OSError, ValueError) as exc:
        return Sizing(note=unsized_note(nodes, None, f"cannot read {base}: {exc}"))
    wanted = thresholds_for(entries_needed(nodes), current)
    if wanted is None:
        return Sizing()
    before_write(current)
    try:
        write_thresholds(wanted, base)
    except OSError as exc:
        why = f"cannot raise it here: {exc.strerror or exc}"
        return Sizing(note=unsized_note(nodes, current["gc_thresh3"], why))
    return Sizing(previous=current, raised_to=wanted)
