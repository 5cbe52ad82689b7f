"""Which peer addresses may be probed and may ask for indirect probes. Pure.

A node's ip entries in etcd are written by whoever can write etcd. A forged entry whose
NodeIP or HealthIP is loopback, link-local, multicast or unspecified would turn every
agent into a prober of its own host's services (or of the whole link), and would make
that address a registered requester of `GET /v1/indirect`. `NodeAddressPolicy` refuses
such a peer as a whole: it is left out of the probe set (and so out of the registered
nodes the indirect-probe server accepts requests from).

- Always: loopback, link-local, multicast and unspecified addresses are refused, except
  loopback in a mesh whose own NodeIP is loopback (a single-host test mesh:
  `allow_loopback`).
- With `--allowed-node-cidrs`: every address must be inside one of those networks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from meshhealth.model import Target

TargetKey = tuple[str, str]  # (cluster, node)
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# The refusal codes: the `reason` label of meshhealth_node_addresses_refused_total.
LOOPBACK = "loopback"
LINK_LOCAL = "link-local"
MULTICAST = "multicast"
UNSPECIFIED = "unspecified"
OUTSIDE_ALLOWED = "outside-allowed"
INVALID = "invalid"
REFUSAL_CODES = (LOOPBACK, LINK_LOCAL, MULTICAST, UNSPECIFIED, OUTSIDE_ALLOWED, INVALID)


@dataclass(frozen=True, slots=True)
class RefusedAddress:
    cluster: str
    node: str
    address: str
    code: str  # one of REFUSAL_CODES
    why: str  # for the log line


@dataclass(frozen=True, slots=True)
class NodeAddressPolicy:
    allowed: tuple[IPNetwork, ...] = ()  # () = any address the fixed rules let through
    allow_loopback: bool = False

    @classmethod
    def of(cls, allowed_cidrs: Iterable[str] = (), *, own_node_ip: str) -> NodeAddressPolicy:
        """The agent's policy: `--allowed-node-cidrs`, and loopback peers only when this
        node's own NodeIP is loopback too."""
        networks = tuple(ipaddress.ip_network(cidr, strict=False) for cidr in allowed_cidrs)
        return cls(networks, ipaddress.ip_address(own_node_ip).is_loopback)

    def refusal(self, ip: str) -> tuple[str, str] | None:
        """(code, why) when the peer address `ip` is refused, else None."""
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return INVALID, f"{ip!r} is not an IP address"
        if address.is_unspecified:
            return UNSPECIFIED, f"{ip} is the unspecified address"
        if address.is_loopback and not self.allow_loopback:
            return LOOPBACK, f"{ip} is a loopback address"
        if address.is_link_local:
            return LINK_LOCAL, f"{ip} is a link-local address"
        if address.is_multicast:
            return MULTICAST, f"{ip} is a multicast address"
        if self.allowed and not any(address in net for net in self.allowed):
            nets = ", ".join(str(net) for net in self.allowed)
            return OUTSIDE_ALLOWED, f"{ip} is not inside --allowed-node-cidrs ({nets})"
        return None


def screen_targets(
    targets: Mapping[TargetKey, Target], policy: NodeAddressPolicy
) -> tuple[dict[TargetKey, Target], tuple[RefusedAddress, ...]]:
    """The targets none of whose NodeIPs and HealthIPs `policy` refuses, and one
    RefusedAddress per refused address of the others (sorted)."""
    kept: dict[TargetKey, Target] = {}
    refused: list[RefusedAddress] = []
    for key, target in sorted(targets.items()):
        addresses = (
            target.node_ip,
            target.health_ip,
            target.node_ip_secondary,
            target.health_ip_secondary,
        )
        found = [
            RefusedAddress(target.cluster, target.node, ip, *why)
            for ip in addresses
            if ip is not None and (why := policy.refusal(ip)) is not None
        ]
        if found:
            refused.extend(found)
        else:
            kept[key] = target
    return kept, tuple(refused)
