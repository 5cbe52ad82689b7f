"""Where an etcd of ours keeps its data: in RAM (/dev/shm, a tmpfs) when it has room.

    root = ram_disk()          # Path("/dev/shm"), or None: use a directory on disk

etcd syncs its write-ahead log on every write; on a loaded disk that took 100 ms and more
a write, so the labs' and the tests' etcds keep their data in RAM. But etcd preallocates
a 64 MB log segment, and a container's /dev/shm is 64 MB by default ("no space left on
device"): RAM is used only when it has ETCD_RAM_MIN_FREE_BYTES free, else the data goes
to disk, slower but working.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from meshhealth import defaults

SHM = Path("/dev/shm")


def ram_disk(
    root: Path = SHM, min_free_bytes: int = defaults.ETCD_RAM_MIN_FREE_BYTES
) -> Path | None:
    """`root` when it is a directory with `min_free_bytes` free, else None."""
    try:
        return root if root.is_dir() and shutil.disk_usage(root).free >= min_free_bytes else None
    except OSError:
        return None
