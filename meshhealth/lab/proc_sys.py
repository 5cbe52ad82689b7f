"""/proc/sys/net made writable for a lab built inside a container.

A container gets /proc/sys read-only (Docker, Podman; not privileged), but the lab sets
sysctls of the namespaces it makes (ip_forward in each node) and each agent sets those
of its endpoint's veth (proxy_arp, proxy_delay). With SYS_ADMIN, which `ip netns` needs
anyway, `lab up` then bind-mounts /proc/sys/net onto itself read-write, as
compose/node-entrypoint.sh does: only net.* becomes writable, and what a process writes
there belongs to its own network namespace (the container's, or one the lab made);
kernel.*, vm.* stay read-only. `lab down` removes that mount again. On a host /proc/sys
is writable and nothing is mounted.
"""

from __future__ import annotations

import os
from pathlib import Path

from meshhealth.lab.netns_ops import CommandError, run

PROC_SYS_NET = Path("/proc/sys/net")
# A key every network namespace has: writable here means every net.* key is.
PROBE_KEY = "ipv4/ip_forward"


def read_only(path: Path = PROC_SYS_NET) -> bool:
    """True when net.* sysctls cannot be written here (a read-only /proc/sys)."""
    probe = path / PROBE_KEY
    return probe.exists() and not os.access(probe, os.W_OK)


def make_writable(path: Path = PROC_SYS_NET) -> None:
    """Bind-mount `path` onto itself read-write; CommandError (with the reason) if not."""
    try:
        run(["mount", "--bind", str(path), str(path)])
    except CommandError as exc:
        raise CommandError(f"{exc} (a container needs cap_add SYS_ADMIN for the lab)") from exc
    try:
        run(["mount", "-o", "remount,bind,rw", str(path)])
    except CommandError:
        run(["umount", str(path)], check=False)
        raise


def undo(path: Path = PROC_SYS_NET) -> None:
    """Remove the bind mount `make_writable` added (the read-only one is back)."""
    run(["umount", str(path)])
