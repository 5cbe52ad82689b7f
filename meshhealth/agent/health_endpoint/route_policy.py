"""Which peer CIDRs may be routed (`--route-cidrs`): the guard against forged node entries.

A node entry in etcd is written by whoever can write etcd. Without a guard, one forged
entry claiming `0.0.0.0/1` (or the etcd server's address) would have every agent route
that traffic to the forger's NodeIP. `route_refusal` decides, for one peer CIDR, whether
it is refused and why. Pure.

- With `--route-cidrs-within NET,...` only a CIDR inside one of those networks is routed.
- Without it, a CIDR shorter than /16 (IPv4) or /48 (IPv6) is refused
  (defaults.ROUTE_MIN_PREFIX_V4, ROUTE_MIN_PREFIX_V6).
- Always: a CIDR that contains a protected address is refused: a NodeIP of the mesh
  (any registered node's), one of this node's own addresses, or an etcd endpoint's.
- routes.desired_routes also refuses every CIDR of a peer whose NodeIP (the next hop)
  the node address policy refuses (`bad-next-hop`: loopback, link-local, ...).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from meshhealth import defaults

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The refusal codes: the `reason` label of meshhealth_route_cidrs_refused_total.
TOO_BROAD = "too-broad"
OUTSIDE_ALLOWED = "outside-allowed"
OVERLAPS_NODE_IP = "overlaps-node-ip"
OVERLAPS_OWN_ADDRESS = "overlaps-own-address"
OVERLAPS_ETCD = "overlaps-etcd"
BAD_NEXT_HOP = "bad-next-hop"  # the peer's NodeIP itself is refused (node_address_policy)
REFUSAL_CODES = (
    TOO_BROAD,
    OUTSIDE_ALLOWED,
    OVERLAPS_NODE_IP,
    OVERLAPS_OWN_ADDRESS,
    OVERLAPS_ETCD,
    BAD_NEXT_HOP,
)

MIN_PREFIX = {4: defaults.ROUTE_MIN_PREFIX_V4, 6: defaults.ROUTE_MIN_PREFIX_V6}


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # one of REFUSAL_CODES
    why: str  # for the log line


@dataclass(frozen=True, slots=True)
class ProtectedAddresses:
    """Addresses no peer CIDR may cover, each with the code and words of its kind."""

    addresses: Mapping[IPAddress, tuple[str, str]]  # address -> (code, what it is)

    @classmethod
    def of(
        cls,
        *,
        node_ips: Iterable[tuple[str, str]] = (),  # (address, whose: "c1/n2")
        own: Iterable[str] = (),
        etcd: Iterable[str] = (),
    ) -> ProtectedAddresses:
        """From text addresses; what is not an IP address (an etcd host name) is left out."""
        found: dict[IPAddress, tuple[str, str]] = {}
        kinds: list[tuple[str, str, str]] = [
            *((ip, OVERLAPS_OWN_ADDRESS, "this node's address") for ip in own),
            *((ip, OVERLAPS_ETCD, "an etcd endpoint's address") for ip in etcd),
            *((ip, OVERLAPS_NODE_IP, f"the NodeIP of {who}") for ip, who in node_ips),
        ]
        for text, code, what in kinds:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue
            found.setdefault(address, (code, what))
        return cls(found)


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Operator CIDRs (already validated by the option's parser) as networks."""
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def route_refusal(
    net: IPNetwork,
    *,
    within: Sequence[IPNetwork] = (),
    protected: ProtectedAddresses = ProtectedAddresses({}),
) -> Refusal | None:
    """Why the peer CIDR `net` may not be routed, or None when it may. Pure."""
    if within:
        if not any(_inside(net, allowed) for allowed in within):
            nets = ", ".join(str(allowed) for allowed in within)
            return Refusal(OUTSIDE_ALLOWED, f"{net} is not inside --route-cidrs-within ({nets})")
    elif net.prefixlen < MIN_PREFIX[net.version]:
        return Refusal(
            TOO_BROAD,
            f"{net} is broader than /{MIN_PREFIX[net.version]} (allow it with "
            "--route-cidrs-within)",
        )
    for address, (code, what) in sorted(protected.addresses.items(), key=_order):
        if address.version == net.version and address in net:
            return Refusal(code, f"{net} contains {address}, {what}")
    return None


def _inside(net: IPNetwork, allowed: IPNetwork) -> bool:
    if isinstance(net, ipaddress.IPv4Network) and isinstance(allowed, ipaddress.IPv4Network):
        return net.subnet_of(allowed)
    if isinstance(net, ipaddress.IPv6Network) and isinstance(allowed, ipaddress.IPv6Network):
        return net.subnet_of(allowed)
    return False


def _order(item: tuple[IPAddress, tuple[str, str]]) -> tuple[int, int]:
    return (item[0].version, int(item[0]))
