"""Namespace, veth, bridge, address plumbing for the lab: thin wrappers over `ip`.

Every command names the namespace it acts in (`ip -n NS ...`), except `ip netns add/del`
and the veth creation, which creates both ends directly in lab namespaces. Nothing here
touches the host's own namespace.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path

from meshhealth.lab import plan as P
from meshhealth.netns import call_in_netns

NETNS_DIR = Path("/run/netns")


class CommandError(RuntimeError):
    """A plumbing command failed: the message names the command and its stderr."""


def run(
    argv: list[str], check: bool = True, timeout_s: float = 30.0, input_text: str | None = None
) -> str:
    try:
        done = subprocess.run(
            argv,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            input=input_text,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"`{' '.join(argv)}` took more than {timeout_s:g}s") from exc
    if check and done.returncode != 0:
        msg = (done.stderr or done.stdout).strip().splitlines()
        raise CommandError(f"`{' '.join(argv)}` failed: {msg[-1] if msg else done.returncode}")
    return done.stdout


def list_netns() -> list[str]:
    """Names of the named network namespaces (`ip netns list`)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def add_netns(name: str) -> None:
    run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def del_netns(name: str) -> None:
    """Delete a named namespace; also a stale name whose mount is gone (an empty file)."""
    if not netns_exists(name):
        return
    out = run(["ip", "netns", "del", name], check=False)
    if netns_exists(name):
        try:
            (NETNS_DIR / name).unlink()
        except OSError as exc:
            raise CommandError(f"cannot delete network namespace {name}: {exc} {out}") from exc


def sysctl(netns: str, key: str, value: str) -> None:
    run(["ip", "netns", "exec", netns, "sysctl", "-qw", f"{key}={value}"])


def make_fabric(netns: str, etcd_ips: list[tuple[str, int]]) -> None:
    """Bridge `br0` in the fabric namespace, with the etcd addresses (ip, prefix length)
    on it."""
    run(["ip", "-n", netns, "link", "add", P.BRIDGE, "type", "bridge"])
    for ip, prefixlen in etcd_ips:
        add_address(netns, P.BRIDGE, ip, prefixlen)
    run(["ip", "-n", netns, "link", "set", P.BRIDGE, "up"])


def make_racks(plan: P.LabPlan) -> None:
    """A bridge per rack in the fabric namespace and the router namespace joining them
    and the core bridge `br0` (etcd): a veth to each, forwarding on, a route to each
    node's CIDR via its NodeIP; the fabric namespace (etcd's answers) routes the racks'
    subnets through the router."""
    fabric, router = plan.fabric_netns, plan.router_netns
    assert router is not None
    sysctl(router, "net.ipv4.ip_forward", "1")
    # Between two nodes of one rack it forwards out the link it came in on: no
    # redirects (set before its links exist: they copy `default`), so the nodes keep
    # routing through it as planned.
    for key in ("all", "default"):
        sysctl(router, f"net.ipv4.conf.{key}.send_redirects", "0")
    links = [(P.ROUTER_CORE_IFACE, "vr0", P.BRIDGE, P.ROUTER_CORE_IP, P.CORE_PREFIXLEN)]
    for rack in plan.racks:
        run(["ip", "-n", fabric, "link", "add", rack.bridge, "type", "bridge"])
        run(["ip", "-n", fabric, "link", "set", rack.bridge, "up"])
        links.append(
            (rack.router_iface, rack.veth_fabric, rack.bridge, rack.gateway, P.RACK_PREFIXLEN)
        )
    for router_iface, veth_fabric, bridge, ip, prefixlen in links:
        run(["ip", "-n", fabric, "link", "add", veth_fabric, "type", "veth", "peer", "name",
             router_iface, "netns", router])  # fmt: skip
        run(["ip", "-n", fabric, "link", "set", veth_fabric, "master", bridge, "up"])
        add_address(router, router_iface, ip, prefixlen)
        run(["ip", "-n", router, "link", "set", router_iface, "up"])
    commands = [f"route add {cidr} via {via}" for cidr, via in plan.router_routes()]
    run(["ip", "-n", router, "-batch", "-"], input_text="\n".join(commands) + "\n")
    run(["ip", "-n", fabric, "route", "add", P.FABRIC_SUBNET, "via", P.ROUTER_CORE_IP])


def add_address(netns: str, iface: str, ip: str, prefixlen: int) -> None:
    """`ip addr add`; an IPv6 address without duplicate address detection, so it works
    at once (nobody else on the lab's fabric has it)."""
    nodad = ["nodad"] if ":" in ip else []
    run(["ip", "-n", netns, "addr", "add", f"{ip}/{prefixlen}", "dev", iface, *nodad])


def attach_node(fabric_ns: str, node: P.NodePlan) -> None:
    """veth between the node namespace (`eth0`, NodeIP) and the fabric bridge; forwarding
    on (the agent routes to its own health endpoint and to peers' CIDRs)."""
    run(
        [
            "ip",
            "-n",
            fabric_ns,
            "link",
            "add",
            node.veth_fabric,
            "type",
            "veth",
            "peer",
            "name",
            P.NODE_IFACE,
            "netns",
            node.netns,
        ]
    )
    run(["ip", "-n", fabric_ns, "link", "set", node.veth_fabric, "master", node.bridge, "up"])
    for ip in node.node_ips:
        prefixlen = P.FABRIC_PREFIXLEN6 if ":" in ip else node.prefixlen
        add_address(node.netns, P.NODE_IFACE, ip, prefixlen)
    run(["ip", "-n", node.netns, "link", "set", P.NODE_IFACE, "up"])
    if node.gateway is not None:  # racks: off the rack through the router
        run(["ip", "-n", node.netns, "route", "add", "default", "via", node.gateway])
    sysctl(node.netns, "net.ipv4.ip_forward", "1")
    if any(":" in ip for ip in node.node_ips):
        # The node routes to its endpoint's and to peers' IPv6 CIDRs (the agent sets
        # the endpoint's side up; forwarding on here keeps the lab's sysctls in one
        # place).
        sysctl(node.netns, "net.ipv6.conf.all.forwarding", "1")


def attach_veth(fabric_ns: str, netns: str, veth_fabric: str, ip: str) -> None:
    """A namespace of its own on the fabric bridge (`eth0` with `ip`), like a node."""
    run(["ip", "-n", fabric_ns, "link", "add", veth_fabric, "type", "veth", "peer", "name",
         P.NODE_IFACE, "netns", netns])  # fmt: skip
    run(["ip", "-n", fabric_ns, "link", "set", veth_fabric, "master", P.BRIDGE, "up"])
    run(["ip", "-n", netns, "addr", "add", f"{ip}/{P.FABRIC_PREFIXLEN}", "dev", P.NODE_IFACE])
    run(["ip", "-n", netns, "link", "set", P.NODE_IFACE, "up"])


def set_link(netns: str, iface: str, up: bool) -> None:
    run(["ip", "-n", netns, "link", "set", iface, "up" if up else "down"])


def netns_pids(netns: str) -> list[int]:
    if not netns_exists(netns):
        return []
    out = run(["ip", "netns", "pids", netns], check=False)
    return [int(x) for x in out.split() if x.isdigit()]


_NSID_NAME = re.compile(r"nsid (\d+) \(iproute2 netns name: ([^)]+)\)")


def peer_netns(netns: str) -> set[str]:
    """Names of the namespaces holding the other end of a veth inside `netns`.

    This is how `lab down` finds the agents' health-endpoint namespaces (whatever the
    agent named them): the peer of `lxc_health` lives there.
    """
    if not netns_exists(netns):
        return set()
    # check=False: a namespace can vanish meanwhile, or be a stale name (empty file).
    raw = run(["ip", "-n", netns, "-j", "link", "show", "type", "veth"], check=False)
    try:
        links = json.loads(raw or "[]")
    except json.JSONDecodeError:
        return set()
    ids = {int(link["link_netnsid"]) for link in links if "link_netnsid" in link}
    if not ids:
        return set()
    names: set[str] = set()
    for line in run(["ip", "-n", netns, "netns", "list-id"], check=False).splitlines():
        m = _NSID_NAME.search(line)
        if m and int(m.group(1)) in ids:
            names.add(m.group(2))
    return names


def tcp_answers(netns: str, host: str, port: int, path: str, timeout_s: float) -> bool:
    """An HTTP GET `path` on host:port from inside `netns` gets a 200."""
    import http.client

    def get() -> bool:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    with contextlib.suppress(OSError):
        return call_in_netns(netns, get)
    return False
