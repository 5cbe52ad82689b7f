"""Plumbing of the health endpoint in its own network namespace (sync).

Every function here blocks (the `ip` command, /proc) and is meant to run through
`trio.to_thread.run_sync` with the caller's own CapacityLimiter. `build_endpoint` makes
the veth pair (`lxc_health` in the node's namespace, `eth0` in the endpoint's), the
HealthIP addresses, routes and forwarding for each family the endpoint has (IPv4 by
proxy ARP, IPv6 through a link-local gateway; docs/health-endpoint.md shows the
layout). Forwarding sysctls are recorded in a `SysctlLedger` (forwarding.py) and put
back on removal; only a veth with the alias `meshhealth:<endpoint ns>` is ever deleted,
so an `lxc_health` that is not ours is never touched. A missing /run/netns/NAME is an
error: opening a namespace never creates it.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.agent.health_endpoint.forwarding import (
    SysctlLedger,
    forwarding_plan,
    read_accept_ra,
    read_uplinks,
)
from meshhealth.agent.health_endpoint.ip_command import (
    NOT_FOUND_MARKERS,
    PlumbingError,
    ip,
    ip_batch,
    ip_json,
)
from meshhealth.netns import call_in_netns, netns_path

DEFAULT_HOST_IFACE = defaults.ENDPOINT_HOST_IFACE
ENDPOINT_IFACE = "eth0"
NETNS_PREFIX = "mh-health-"
MAX_NETNS_NAME = 48
IFNAMSIZ = 15  # longest interface name (16 bytes with the NUL)
ALIAS_PREFIX = "meshhealth:"
_SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")
# The endpoint's IPv6 gateway: a link-local address of the host-side veth.
GATEWAY6 = "fe80::1"


def _host_prefixlen(ip: str) -> int:
    return 32 if _version(ip) == 4 else 128


def endpoint_netns_name(cluster: str, node: str) -> str:
    """`mh-health-<cluster>-<node>`, at most 48 characters, unique per (cluster, node).

    Characters other than letters, digits, `_ . -` become `-`; names that would be too
    long are cut and end with 8 hex digits of a hash of the full name. Pure.
    """
    base = _SAFE_NAME_RE.sub("-", f"{cluster}-{node}").strip("-.") or "node"
    name = NETNS_PREFIX + base
    if len(name) <= MAX_NETNS_NAME:
        return name
    digest = hashlib.sha1(base.encode()).hexdigest()[:8]
    keep = MAX_NETNS_NAME - len(NETNS_PREFIX) - len(digest) - 1
    return f"{NETNS_PREFIX}{base[:keep].rstrip('-.')}-{digest}"


def validate_iface_name(name: str) -> str:
    if not name or len(name) > IFNAMSIZ or "/" in name or any(c.isspace() for c in name):
        raise ValueError(f"invalid interface name {name!r} (1-{IFNAMSIZ} characters)")
    return name


@dataclass(frozen=True, slots=True)
class EndpointNetns:
    """Where the endpoint lives: names of everything `build_endpoint` creates."""

    netns: str  # the endpoint's namespace
    health_ip: str  # gets /32 (IPv4) or /128 (IPv6) on eth0 in `netns`
    node_netns: str | None = None  # the agent's namespace; None: the calling process's
    host_iface: str = DEFAULT_HOST_IFACE
    health_ip_secondary: str | None = None  # dual stack: the other family's address
    # the node's NodeIPs: IPv4 forwarding is set on their interfaces; (): host-wide
    node_ips: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        netns_path(self.netns)  # raises ValueError on a bad name
        if self.node_netns is not None:
            netns_path(self.node_netns)
        if self.health_ip_secondary is not None and _version(self.health_ip_secondary) == (
            _version(self.health_ip)
        ):
            raise ValueError(
                f"the secondary HealthIP must be of the other family: {self.health_ip_secondary}"
            )
        validate_iface_name(self.host_iface)

    @property
    def alias(self) -> str:
        return f"{ALIAS_PREFIX}{self.netns}"

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every HealthIP of the endpoint, primary first."""
        if self.health_ip_secondary is None:
            return (self.health_ip,)
        return (self.health_ip, self.health_ip_secondary)


def _version(ip: str) -> int:
    return ipaddress.ip_address(ip).version


@dataclass(frozen=True, slots=True)
class BuiltEndpoint:
    """Identity of what was built, to notice when it is gone or replaced."""

    netns_inode: int
    host_ifindex: int


# --- namespaces -------------------------------------------------------------------------


def netns_inode(name: str) -> int | None:
    """The inode of namespace `name` (changes when it is deleted and made again)."""
    try:
        return os.stat(netns_path(name)).st_ino
    except FileNotFoundError:
        return None


def create_netns(name: str) -> None:
    """`ip netns add NAME` (iproute2 sets up /run/netns mounts the portable way)."""
    done = subprocess.run(
        ["ip", "netns", "add", name], capture_output=True, text=True, timeout=10, check=False
    )
    if done.returncode != 0:
        raise PlumbingError(f"ip netns add {name}: {done.stderr.strip()}")


def remove_netns(name: str) -> bool:
    """Delete namespace `name` when it exists (`ip netns del`). True when it was there."""
    if netns_inode(name) is None:
        return False
    done = subprocess.run(
        ["ip", "netns", "del", name], capture_output=True, text=True, timeout=10, check=False
    )
    if done.returncode != 0 and netns_inode(name) is not None:
        raise PlumbingError(f"ip netns del {name}: {done.stderr.strip()}")
    return True


def netns_pids(name: str) -> list[int]:
    """PIDs of processes whose network namespace is `name` (scan of /proc/*/ns/net)."""
    inode = netns_inode(name)
    if inode is None:
        return []
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                pids.append(int(entry))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return pids


def kill_netns_processes(name: str, grace_s: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process left inside endpoint namespace `name`.

    Only for our own endpoint namespace (a responder a crashed agent left behind).
    Returns the PIDs signalled.
    """
    pids = [pid for pid in netns_pids(name) if pid != os.getpid()]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if _exists(pid)]
    for pid in alive:
        _signal(pid, signal.SIGKILL)
    return pids


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


# --- links, addresses, routes (the `ip` command) --------------------------------------


def _link(netns: str | None, name: str) -> tuple[int, str | None] | None:
    """(ifindex, alias) of link `name` in `netns`, None when there is none."""
    found = ip_json(netns, "link", "show", "dev", name)
    if not found:
        return None
    index, alias = found[0].get("ifindex"), found[0].get("ifalias")
    if not isinstance(index, int):
        raise PlumbingError(f"`ip link show dev {name}` gave no ifindex")
    return index, alias if isinstance(alias, str) else None


def _delete_link(netns: str | None, name: str) -> None:
    """`ip link del dev NAME`; a link that is gone meanwhile is fine."""
    try:
        ip(netns, "link", "del", "dev", name)
    except PlumbingError as exc:
        if not any(marker in str(exc) for marker in NOT_FOUND_MARKERS):
            raise


def _write_sysctl(key: str, value: str) -> None:
    """Write /proc/sys/KEY in the calling thread's network namespace (when it differs)."""
    path = "/proc/sys/" + key.replace(".", "/")
    with open(path) as handle:
        if handle.read().strip() == value:
            return
    with open(path, "w") as handle:
        handle.write(value)


def _delete_host_iface(spec: EndpointNetns) -> bool:
    """Delete the host-side veth if it is ours (alias). Raises if it is someone else's."""
    found = _link(spec.node_netns, spec.host_iface)
    if found is None:
        return False
    alias = found[1]
    if alias != spec.alias:
        raise PlumbingError(
            f"interface {spec.host_iface} exists and is not this endpoint's "
            f"(alias {alias!r}, expected {spec.alias!r}); choose another host interface name"
        )
    _delete_link(spec.node_netns, spec.host_iface)
    return True


def _refuse_node_netns(spec: EndpointNetns) -> None:
    """The endpoint namespace must never be the node's own (we empty and delete it)."""
    inode = netns_inode(spec.netns)
    if inode is None:
        return
    if spec.node_netns is None:
        node_inode = os.stat("/proc/self/ns/net").st_ino
    else:
        node_inode = netns_inode(spec.node_netns) or -1
    if inode == node_inode:
        raise PlumbingError(
            f"refusing to use {spec.netns} as the endpoint namespace: it is the node's own"
        )


def build_endpoint(spec: EndpointNetns, ledger: SysctlLedger) -> BuiltEndpoint:
    """Make namespace, veth, addresses, routes and sysctls from scratch; the node's
    forwarding sysctls are changed through `ledger` (`ledger.restore()` in the node's
    namespace puts them back).

    A namespace of that name that already exists is re-used (emptied of our veth first);
    a host-side veth left over from an earlier run is deleted and made again.
    """
    _refuse_node_netns(spec)
    if netns_inode(spec.netns) is None:
        create_netns(spec.netns)
    inode = netns_inode(spec.netns)
    if inode is None:
        raise PlumbingError(f"network namespace {spec.netns} vanished while being set up")

    if _link(spec.netns, ENDPOINT_IFACE) is not None:  # left by an earlier run
        _delete_link(spec.netns, ENDPOINT_IFACE)
    host_index = _build_node_side(spec, ledger)
    _build_endpoint_side(spec)
    return BuiltEndpoint(netns_inode=inode, host_ifindex=host_index)


def _build_node_side(spec: EndpointNetns, ledger: SysctlLedger) -> int:
    """The host-side veth (its peer goes straight into the endpoint namespace), its
    sysctls, the node's forwarding and the routes to the HealthIPs. Returns the veth's
    ifindex."""
    node, iface = spec.node_netns, spec.host_iface
    _delete_host_iface(spec)
    ip_batch(
        node,
        [
            f"link add {iface} type veth peer name {ENDPOINT_IFACE} netns {spec.netns}",
            f"link set dev {iface} alias {spec.alias}",
        ],
    )
    versions = {_version(ip) for ip in spec.addresses}
    uplinks = read_uplinks(node, spec.node_ips) if 4 in versions else None

    def sysctls() -> None:
        if 6 in versions:
            _write_sysctl(f"net.ipv6.conf.{iface}.disable_ipv6", "0")
            _write_sysctl(f"net.ipv6.conf.{iface}.accept_dad", "0")
        if 4 in versions:
            _write_sysctl(f"net.ipv4.conf.{iface}.proxy_arp", "1")
            _write_sysctl(f"net.ipv4.neigh.{iface}.proxy_delay", "0")
        plan = forwarding_plan(
            ipv4=4 in versions,
            ipv6=6 in versions,
            host_iface=iface,
            uplinks=uplinks,
            accept_ra=read_accept_ra() if 6 in versions else {},
        )
        ledger.apply(plan)

    call_in_netns(node, sysctls)
    commands = [f"address replace {GATEWAY6}/64 dev {iface}"] if 6 in versions else []
    commands.append(f"link set dev {iface} up")
    commands += [
        f"route replace {ip}/{_host_prefixlen(ip)} dev {iface} scope link" for ip in spec.addresses
    ]
    ip_batch(node, commands)
    found = _link(node, iface)
    if found is None:
        raise PlumbingError(f"veth {iface} missing right after creation")
    return found[0]


def _build_endpoint_side(spec: EndpointNetns) -> None:
    """Inside the endpoint namespace: lo and eth0 up, the HealthIPs, the default routes."""
    versions = {_version(ip) for ip in spec.addresses}

    def sysctls() -> None:
        if 6 in versions:
            _write_sysctl(f"net.ipv6.conf.{ENDPOINT_IFACE}.disable_ipv6", "0")
            _write_sysctl(f"net.ipv6.conf.{ENDPOINT_IFACE}.accept_dad", "0")

    if _link(spec.netns, ENDPOINT_IFACE) is None:
        raise PlumbingError(f"{ENDPOINT_IFACE} missing in {spec.netns} after veth creation")
    call_in_netns(spec.netns, sysctls)
    commands = ["link set dev lo up"]
    commands += [
        f"address replace {ip}/{_host_prefixlen(ip)} dev {ENDPOINT_IFACE}" for ip in spec.addresses
    ]
    commands.append(f"link set dev {ENDPOINT_IFACE} up")
    if 4 in versions:
        commands.append(f"route replace 0.0.0.0/0 dev {ENDPOINT_IFACE} scope link")
    if 6 in versions:
        commands.append(f"route replace ::/0 via {GATEWAY6} dev {ENDPOINT_IFACE}")
    ip_batch(spec.netns, commands)


def check_endpoint(spec: EndpointNetns, built: BuiltEndpoint) -> str | None:
    """None when what `build_endpoint` made is still there, else the reason.

    `netns_missing`: the namespace name is gone (or points to another namespace);
    `veth_missing`: the host-side veth is gone or was replaced (either end deleted
    removes both).
    """
    if netns_inode(spec.netns) != built.netns_inode:
        return "netns_missing"

    def host_side() -> int | None:
        # One ioctl in the node's namespace, not a netlink session: this runs every
        # ENDPOINT_CHECK_INTERVAL_S in every agent.
        try:
            return socket.if_nametoindex(spec.host_iface)
        except OSError:
            return None

    if call_in_netns(spec.node_netns, host_side) != built.host_ifindex:
        return "veth_missing"
    return None


def destroy_endpoint(spec: EndpointNetns) -> None:
    """Remove the host-side veth (if ours) and the endpoint namespace; missing is fine.

    Processes still inside the namespace must have been stopped before.
    """
    _refuse_node_netns(spec)
    problems: list[str] = []
    try:
        _delete_host_iface(spec)
    except (PlumbingError, OSError) as exc:  # e.g. not ours: left alone
        problems.append(str(exc))
    try:
        remove_netns(spec.netns)
    except (PlumbingError, OSError) as exc:
        problems.append(str(exc))
    if problems:
        raise PlumbingError("; ".join(problems))


def clear_leftovers(spec: EndpointNetns) -> list[int]:
    """Before the first build: stop processes left in our namespace by a crashed agent,
    then remove namespace and veth. Returns the PIDs that were stopped."""
    _refuse_node_netns(spec)
    pids = kill_netns_processes(spec.netns)
    destroy_endpoint(spec)
    return pids
