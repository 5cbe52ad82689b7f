"""This process's privileges: its user and Linux capabilities, read and dropped.

`read_privileges` parses /proc/<pid>/status (`parse_status` is pure). Dropping is one
way and checked afterwards by reading /proc/self/status back:

- `limit_capabilities(keep)`: every capability not in `keep` leaves the bounding set
  (when CAP_SETPCAP allows it), the permitted, effective and ambient sets; the
  inheritable set is emptied. The agent does this at start (docs/security.md).
- `drop_to_user(name)`: no new privileges, an empty bounding set (with CAP_SETPCAP),
  no supplementary groups, the user's uid and primary gid (real, effective and saved),
  which clears the permitted and effective sets, then an explicit empty `capset`. The
  health endpoint's responder does this once its sockets are open.

capset and prctl act on the calling thread only, so both refuse to run in a process
with more than one thread. Linux only; libc through ctypes (no stdlib wrapper).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pwd
from dataclasses import dataclass

# Capability numbers (linux/capability.h), by name.
CAPABILITY_NUMBERS: dict[str, int] = {
    name: number
    for number, name in enumerate(
        (
            "CAP_CHOWN",
            "CAP_DAC_OVERRIDE",
            "CAP_DAC_READ_SEARCH",
            "CAP_FOWNER",
            "CAP_FSETID",
            "CAP_KILL",
            "CAP_SETGID",
            "CAP_SETUID",
            "CAP_SETPCAP",
            "CAP_LINUX_IMMUTABLE",
            "CAP_NET_BIND_SERVICE",
            "CAP_NET_BROADCAST",
            "CAP_NET_ADMIN",
            "CAP_NET_RAW",
            "CAP_IPC_LOCK",
            "CAP_IPC_OWNER",
            "CAP_SYS_MODULE",
            "CAP_SYS_RAWIO",
            "CAP_SYS_CHROOT",
            "CAP_SYS_PTRACE",
            "CAP_SYS_PACCT",
            "CAP_SYS_ADMIN",
            "CAP_SYS_BOOT",
            "CAP_SYS_NICE",
            "CAP_SYS_RESOURCE",
            "CAP_SYS_TIME",
            "CAP_SYS_TTY_CONFIG",
            "CAP_MKNOD",
            "CAP_LEASE",
            "CAP_AUDIT_WRITE",
            "CAP_AUDIT_CONTROL",
            "CAP_SETFCAP",
            "CAP_MAC_OVERRIDE",
            "CAP_MAC_ADMIN",
            "CAP_SYSLOG",
            "CAP_WAKE_ALARM",
            "CAP_BLOCK_SUSPEND",
            "CAP_AUDIT_READ",
            "CAP_PERFMON",
            "CAP_BPF",
            "CAP_CHECKPOINT_RESTORE",
        )
    )
}
CAPABILITY_NAMES: dict[int, str] = {number: name for name, number in CAPABILITY_NUMBERS.items()}

_PR_SET_KEEPCAPS = 8
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc: ctypes.CDLL | None = None


class PrivilegeError(Exception):
    """A drop that the kernel refused or that did not take; one line for users."""


@dataclass(frozen=True, slots=True)
class Privileges:
    """Who a process is and what it may do, as /proc/<pid>/status says."""

    uids: tuple[int, int, int, int]  # real, effective, saved, filesystem
    gids: tuple[int, int, int, int]
    groups: tuple[int, ...]  # supplementary
    inheritable: frozenset[str]
    permitted: frozenset[str]
    effective: frozenset[str]
    bounding: frozenset[str]
    ambient: frozenset[str]
    no_new_privs: bool


def capability_names(mask: int) -> frozenset[str]:
    """The names of the bits set in `mask` (`CAP_41` for a number this table lacks)."""
    return frozenset(
        CAPABILITY_NAMES.get(bit, f"CAP_{bit}") for bit in range(64) if mask >> bit & 1
    )


def capability_mask(names: frozenset[str] | set[str]) -> int:
    return sum(1 << CAPABILITY_NUMBERS[name] for name in names)


def parse_status(text: str) -> Privileges:
    """Privileges from the text of /proc/<pid>/status. Pure."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()

    def ids(key: str) -> tuple[int, int, int, int]:
        real, effective, saved, fs = (int(part) for part in fields[key].split())
        return real, effective, saved, fs

    def caps(key: str) -> frozenset[str]:
        return capability_names(int(fields.get(key, "0"), 16))

    return Privileges(
        uids=ids("Uid"),
        gids=ids("Gid"),
        groups=tuple(int(group) for group in fields.get("Groups", "").split()),
        inheritable=caps("CapInh"),
        permitted=caps("CapPrm"),
        effective=caps("CapEff"),
        bounding=caps("CapBnd"),
        ambient=caps("CapAmb"),
        no_new_privs=fields.get("NoNewPrivs", "0") == "1",
    )


def read_privileges(pid: int | None = None) -> Privileges:
    """The privileges of process `pid` (None: this one)."""
    where = "self" if pid is None else str(pid)
    with open(f"/proc/{where}/status") as handle:
        return parse_status(handle.read())


def limit_capabilities(keep: frozenset[str]) -> Privileges:
    """Keep only `keep` (of what this process has) in its bounding, permitted and
    effective sets; empty the inheritable and ambient sets. The bounding set shrinks
    only with CAP_SETPCAP in the effective set (under systemd, the unit's
    CapabilityBoundingSet did it already). Returns the privileges after the drop."""
    _single_threaded("limit capabilities")
    before = read_privileges()
    _drop_bounding(before, keep)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "clear the ambient set")
    permitted = before.permitted & keep
    _capset(permitted, permitted, frozenset())
    after = read_privileges()
    if after.permitted - keep or after.effective - keep or after.inheritable:
        raise PrivilegeError(f"capabilities still held after the drop: {_describe(after)}")
    return after


def drop_to_user(user: str) -> Privileges:
    """Become `user` (its uid and primary group, no supplementary groups) with no
    capabilities and no new privileges; a `user` whose uid is 0 stays root without
    capabilities. Raises PrivilegeError (no such user, refused, or not dropped)."""
    _single_threaded(f"switch to user {user}")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise PrivilegeError(f"no such user: {user}") from None
    uid, gid = entry.pw_uid, entry.pw_gid
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "set no_new_privs")
    before = read_privileges()
    _drop_bounding(before, frozenset())
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "clear the ambient set")
    if before.uids != (uid,) * 4 or before.gids != (gid,) * 4 or before.groups:
        _prctl(_PR_SET_KEEPCAPS, 0, "clear keep-caps")  # setuid away from 0 clears caps
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except PermissionError:
            raise PrivilegeError(
                f"cannot switch to user {user} (uid {uid}, gid {gid}): operation not "
                "permitted (it needs CAP_SETUID and CAP_SETGID)"
            ) from None
    _capset(frozenset(), frozenset(), frozenset())
    after = read_privileges()
    if (
        after.uids != (uid,) * 4
        or after.gids != (gid,) * 4
        or after.groups
        or after.permitted
        or after.effective
        or after.inheritable
        or after.ambient
        or not after.no_new_privs
    ):
        raise PrivilegeError(f"privileges not dropped as asked: {_describe(after)}")
    return after


def _describe(privileges: Privileges) -> str:
    def names(caps: frozenset[str]) -> str:
        return ",".join(sorted(caps)) or "none"

    return (
        f"uid {privileges.uids[1]} gid {privileges.gids[1]} "
        f"effective {names(privileges.effective)} permitted {names(privileges.permitted)}"
    )


def _drop_bounding(before: Privileges, keep: frozenset[str]) -> None:
    if "CAP_SETPCAP" not in before.effective:
        return
    for name in sorted(before.bounding - keep, key=_number):
        _prctl(_PR_CAPBSET_DROP, _number(name), f"drop {name} from the bounding set")


def _number(name: str) -> int:
    if name in CAPABILITY_NUMBERS:
        return CAPABILITY_NUMBERS[name]
    return int(name.removeprefix("CAP_"))


def _single_threaded(what: str) -> None:
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise PrivilegeError(f"cannot {what} in a process with {threads} threads")


def _libc_handle() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 - loaded once, lazily
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _prctl(option: int, arg: int, what: str) -> None:
    libc = _libc_handle()
    zero = ctypes.c_ulong(0)
    if libc.prctl(option, ctypes.c_ulong(arg), zero, zero, zero) != 0:
        errno = ctypes.get_errno()
        raise PrivilegeError(f"cannot {what}: {os.strerror(errno).lower()}")


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _capset(
    effective: frozenset[str], permitted: frozenset[str], inheritable: frozenset[str]
) -> None:
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    masks = [capability_mask(s) for s in (effective, permitted, inheritable)]
    for index in (0, 1):
        shift = 32 * index
        data[index].effective = masks[0] >> shift & 0xFFFFFFFF
        data[index].permitted = masks[1] >> shift & 0xFFFFFFFF
        data[index].inheritable = masks[2] >> shift & 0xFFFFFFFF
    if _libc_handle().capset(ctypes.byref(header), data) != 0:
        errno = ctypes.get_errno()
        raise PrivilegeError(f"cannot set capabilities: {os.strerror(errno).lower()}")
