"""Forwarding for the health endpoint: set as narrowly as the kernel allows, put back.

Peers reach the HealthIP, and the endpoint answers them, through the node, which so
has to forward between the endpoint's veth and the interface peers come in on:

- IPv4 forwarding is decided per incoming interface (`net.ipv4.conf.IFACE.forwarding`),
  so it is switched on for the host side of the veth and the interfaces that hold the
  node's NodeIPs, not host-wide. When a NodeIP sits on `lo` or on a dummy interface
  (routed, anycast set-ups: peers' packets arrive on some other interface), or the
  NodeIPs are not known, `net.ipv4.ip_forward` is set instead (every interface).
- IPv6 forwards only while `net.ipv6.conf.all.forwarding` is 1, whatever the
  interfaces say, so that one is set. It also makes every interface a router, and a
  router ignores router advertisements where `accept_ra` is 1 (a host's SLAAC address
  and default route would expire): those interfaces (and `default`, for interfaces
  made later) get `accept_ra=2` first.

`forwarding_plan` and `uplinks_from_addresses` are pure. `SysctlLedger` writes the plan
in the calling thread's network namespace and remembers each key's value from before
its first change; `restore` (the agent's endpoint teardown) writes those back, in
reverse order, where the value is still the one it set. Writing `all.forwarding` or
`ip_forward` back to 0 turns forwarding off on every interface (the kernel's rule).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from meshhealth.agent.health_endpoint.ip_command import ip_json

SYSCTL_ROOT = "/proc/sys/"


def forwarding_plan(
    *,
    ipv4: bool,
    ipv6: bool,
    host_iface: str,
    uplinks: Sequence[str] | None,
    accept_ra: Mapping[str, str],
) -> list[tuple[str, str]]:
    """(sysctl key, value) to write, in order. `uplinks`: the interfaces holding the
    NodeIPs, None for host-wide IPv4 forwarding; `accept_ra`: each IPv6 interface's
    (and `default`'s) current `accept_ra`. Pure."""
    plan: list[tuple[str, str]] = []
    if ipv4:
        if uplinks is None:
            plan.append(("net.ipv4.ip_forward", "1"))
        else:
            for iface in dict.fromkeys((host_iface, *uplinks)):
                plan.append((f"net.ipv4.conf.{iface}.forwarding", "1"))
    if ipv6:
        for iface, value in sorted(accept_ra.items()):
            if value == "1" and iface not in ("all", host_iface):
                plan.append((f"net.ipv6.conf.{iface}.accept_ra", "2"))
        plan.append(("net.ipv6.conf.all.forwarding", "1"))
    return plan


def uplinks_from_addresses(
    links: Sequence[Mapping[str, object]], node_ips: Sequence[str]
) -> tuple[str, ...] | None:
    """The interfaces that hold the IPv4 `node_ips`, from `ip -details -json address
    show`; None (forward host-wide) when there is none, or one is `lo` or a dummy. Pure."""
    wanted = {ip for ip in node_ips if ":" not in ip}
    if not wanted:
        return None
    found: list[str] = []
    for link in links:
        addresses = link.get("addr_info")
        locals_ = {
            entry.get("local")
            for entry in (addresses if isinstance(addresses, list) else [])
            if isinstance(entry, dict)
        }
        if not wanted & locals_:
            continue
        info = link.get("linkinfo")
        kind = info.get("info_kind") if isinstance(info, dict) else None
        if link.get("link_type") == "loopback" or kind == "dummy":
            return None
        name = link.get("ifname")
        if isinstance(name, str):
            found.append(name)
    return tuple(found) if found else None


def read_uplinks(netns: str | None, node_ips: Sequence[str]) -> tuple[str, ...] | None:
    """`uplinks_from_addresses` of the interfaces in `netns` (the `ip` command)."""
    if not any(":" not in ip for ip in node_ips):
        return None
    return uplinks_from_addresses(ip_json(netns, "-details", "address", "show") or [], node_ips)


def read_accept_ra() -> dict[str, str]:
    """Each IPv6 interface's `accept_ra` (and `default`'s), in the calling thread's
    network namespace."""
    base = SYSCTL_ROOT + "net/ipv6/conf"
    values: dict[str, str] = {}
    try:
        names = os.listdir(base)
    except FileNotFoundError:  # IPv6 disabled
        return values
    for name in names:
        try:
            with open(f"{base}/{name}/accept_ra") as handle:
                values[name] = handle.read().strip()
        except OSError:  # gone meanwhile
            continue
    return values


def _path(key: str) -> str:
    return SYSCTL_ROOT + key.replace(".", "/")


def _read(key: str) -> str:
    with open(_path(key)) as handle:
        return handle.read().strip()


class SysctlLedger:
    """Sysctls changed in one network namespace: the value before the first change and
    the value written, to put back. Every call runs in that namespace's thread."""

    def __init__(self) -> None:
        self._changes: dict[str, tuple[str, str]] = {}  # key -> (before, written)

    def apply(self, plan: Sequence[tuple[str, str]]) -> None:
        for key, value in plan:
            current = _read(key)
            if current == value:
                continue
            self._changes.setdefault(key, (current, value))
            with open(_path(key), "w") as handle:
                handle.write(value)

    def restore(self) -> tuple[list[str], list[str]]:
        """Write back every value from before, newest change first, where the key still
        holds what this ledger wrote. Returns (`KEY=VALUE` put back, problems)."""
        restored: list[str] = []
        problems: list[str] = []
        for key, (before, written) in reversed(list(self._changes.items())):
            try:
                if _read(key) == written:
                    with open(_path(key), "w") as handle:
                        handle.write(before)
                    restored.append(f"{key}={before}")
            except FileNotFoundError:  # its interface is gone: nothing to put back
                continue
            except OSError as exc:
                problems.append(f"restoring {key}={before}: {exc.strerror or exc}")
        self._changes.clear()
        return restored, problems
