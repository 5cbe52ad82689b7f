"""Where an etcd of ours keeps its data: in RAM (/dev/shm, a tmpfs) when it has room.

    root = etcd_data_root(ram=SHM, disk=Path("/tmp"))
    root.path                  # /dev/shm, or /tmp when /dev/shm is small or absent
    print(root.line())         # "etcd data in /tmp (disk): /dev/shm has 64 MiB free, ..."

etcd syncs its write-ahead log on every write; on a loaded disk that took 100 ms and more
a write, so the labs', the tests' and the benches' etcds keep their data in RAM. But etcd
preallocates a 64 MB log segment, and a container's /dev/shm is 64 MB by default ("no
space left on device"): RAM is used only when /dev/shm has ETCD_RAM_MIN_FREE_BYTES free,
else the data goes to disk, slower but working. The rule is `in_ram` (pure); every etcd
we start (tests/plugins/local_etcd.py, `lab up`, bench/etcd_load.py) chooses here.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from meshhealth import defaults

SHM = Path("/dev/shm")


@dataclass(frozen=True)
class DataRoot:
    """The directory chosen for etcd's data, and why (for the one line users see)."""

    path: Path
    in_ram: bool
    why: str

    def line(self) -> str:
        kind = "RAM, tmpfs" if self.in_ram else "disk"
        return f"etcd data in {self.path} ({kind}): {self.why}"


def in_ram(free_bytes: int | None, needed_bytes: int) -> bool:
    """The rule: RAM when /dev/shm exists (`free_bytes` not None) with `needed_bytes` free."""
    return free_bytes is not None and free_bytes >= needed_bytes


def _mib(n: int) -> str:
    return f"{n // 2**20} MiB"  # rounded down: 511.9 MiB is not 512


def choose(
    *, ram: Path, disk: Path, shm: Path, free_bytes: int | None, needed_bytes: int
) -> DataRoot:
    """`ram` (a directory on the tmpfs `shm`) or `disk`, by `in_ram`. Pure."""
    if free_bytes is None:
        return DataRoot(disk, False, f"no {shm} here")
    if in_ram(free_bytes, needed_bytes):
        why = f"{shm} has {_mib(free_bytes)} free, at least the {_mib(needed_bytes)} wanted"
        return DataRoot(ram, True, why)
    why = (
        f"{shm} has {_mib(free_bytes)} free, less than the {_mib(needed_bytes)} wanted "
        "(etcd preallocates a 64 MiB log segment)"
    )
    return DataRoot(disk, False, why)


def free_bytes(shm: Path = SHM) -> int | None:
    """Free bytes of the file system of `shm`; None when it is not a directory."""
    try:
        return shutil.disk_usage(shm).free if shm.is_dir() else None
    except OSError:
        return None


def etcd_data_root(
    *,
    disk: Path,
    ram: Path = SHM,
    shm: Path = SHM,
    needed_bytes: int = defaults.ETCD_RAM_MIN_FREE_BYTES,
) -> DataRoot:
    """Where etcd's data goes: `ram` (on `shm`) when `shm` has room, else `disk`."""
    return choose(
        ram=ram, disk=disk, shm=shm, free_bytes=free_bytes(shm), needed_bytes=needed_bytes
    )
