"""Faults on the fabric's bridge: nft `bridge` tables in the fabric namespace (pure).

The lab's nodes all hang off one bridge, so a rule on the bridge drops a packet after it
left the sender and before it reaches the receiver, as a bad switch or firewall would:
both ends see timeouts, never `Operation not permitted`. Every fault is one table,
`table bridge meshhealth_lab_<kind>_<hash of its target>`, so `fault clear` deletes
exactly the tables of the faults it clears.

The rules match the lab nodes' addresses only (NodeIPs and HealthIPs), so etcd (on the
fabric, 10.77.255.k) stays reachable from every node: each side's reports keep coming
and diagnosis sees both. Probe traffic is told apart from replies without conntrack:

- a probe is an ICMP (ICMPv6) echo request, or TCP to the health port (4240) of the
  target (rules for each address family the lab has);
- a reply is an echo reply, or TCP from the health port.

So "drop SRC's probes to DST" leaves DST's probes to SRC (whose replies travel from SRC
to DST) untouched.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Sequence
from typing import Final

from meshhealth import defaults
from meshhealth.lab import plan as P

EGRESS_DROP: Final = "egress-drop"
INGRESS_DROP: Final = "ingress-drop"
PATH_DROP: Final = "path-drop"
PARTITION: Final = "partition"
MTU: Final = "mtu"
LINK_DROP: Final = "link-drop"  # racks: in the router namespace, not on a bridge

FABRIC_KINDS: Final = (EGRESS_DROP, INGRESS_DROP, PATH_DROP, PARTITION, MTU)
MIN_MTU: Final = 68  # the smallest IPv4 MTU (RFC 791)
MAX_MTU: Final = 65535


def table_name(kind: str, target: str) -> str:
    """The fault's table: the same (kind, target) always gives the same name."""
    digest = hashlib.sha256(target.encode()).hexdigest()[:12]
    return f"{P.NFT_TABLE}_{kind.replace('-', '_')}_{digest}"


def addresses(nodes: Iterable[P.NodePlan]) -> list[str]:
    """The nodes' NodeIPs and HealthIPs (both families in a dual-stack lab): what probes
    go to and come from."""
    out: list[str] = []
    for n in nodes:
        out += [n.node_ip, n.health_ip]
        out += [a for a in (n.node_ip_secondary, n.health_ip_secondary) if a is not None]
    return out


# Per address family: the nft match keyword, the echo request, and the IP header's bytes
# that `length` does not count (IPv4's counts the whole packet, IPv6's the payload only).
_FAMILIES: Final = (("ip", "icmp", 0, 4), ("ip6", "icmpv6", 40, 6))


def _set(addrs: Sequence[str]) -> str:
    return "{ " + ", ".join(addrs) + " }"


def _rules(
    src: Sequence[str], dst: Sequence[str], *, probes: bool = True, longer_than: int | None = None
) -> list[str]:
    """Drop rules from `src` to `dst` addresses, one set per family both have: the probes
    (echo requests, TCP to the health port), or every packet (`probes=False`), or every
    packet longer than `longer_than` bytes of IP."""
    rules = []
    for key, icmp, header, version in _FAMILIES:
        s = [a for a in src if ipaddress.ip_address(a).version == version]
        d = [a for a in dst if ipaddress.ip_address(a).version == version]
        if not s or not d:
            continue
        match = f"{key} saddr {_set(s)} {key} daddr {_set(d)}"
        if longer_than is not None:
            rules.append(f"{match} {key} length > {longer_than - header} drop")
        elif probes:
            rules += [
                f"{match} {icmp} type echo-request drop",
                f"{match} tcp dport {defaults.HTTP_PORT} drop",
            ]
        else:
            rules.append(f"{match} drop")
    return rules


def _table(kind: str, target: str, rules: list[str]) -> str:
    body = "".join(f"    {r}\n" for r in rules)
    return (
        f"table bridge {table_name(kind, target)} {{\n"
        "  chain forward_drop {\n"
        "    type filter hook forward priority filter; policy accept;\n"
        f"{body}  }}\n}}\n"
    )


def _others(plan: P.LabPlan, nodes: Iterable[P.NodePlan]) -> list[P.NodePlan]:
    names = {n.qualified for n in nodes}
    return [n for n in plan.nodes if n.qualified not in names]


def partition_groups(
    plan: P.LabPlan, groups: Sequence[Sequence[P.NodePlan]]
) -> list[list[P.NodePlan]]:
    """The groups as the fault splits them: the listed ones, then every node not listed
    as one more group (when there is any). A node listed twice is an error."""
    seen: set[str] = set()
    out: list[list[P.NodePlan]] = []
    for group in groups:
        for node in group:
            if node.qualified in seen:
                raise ValueError(f"{node.qualified} is in more than one group")
            seen.add(node.qualified)
        out.append(list(group))
    rest = [n for n in plan.nodes if n.qualified not in seen]
    if rest:
        out.append(rest)
    if len(out) < 2:
        raise ValueError("a partition needs at least two groups (the nodes not listed form one)")
    return out


def fabric_script(
    kind: str,
    target: str,
    plan: P.LabPlan,
    nodes: Sequence[Sequence[P.NodePlan]],
    size: int | None = None,
) -> str:
    """The nft script (for `nft -f -` in the fabric namespace) that injects `kind`.

    `nodes`: egress-drop / ingress-drop / mtu: [[NODE]]; path-drop: [[SRC], [DST]];
    partition: the groups as given (see `partition_groups`). `target` names the table.
    """
    rules: list[str] = []
    if kind in (EGRESS_DROP, INGRESS_DROP, MTU):
        (node,) = nodes[0]
        mine = addresses([node])
        peers = addresses(_others(plan, [node]))
        if kind == EGRESS_DROP:
            rules = _rules(mine, peers)
        elif kind == INGRESS_DROP:
            rules = _rules(peers, mine)
        else:
            if size is None or not MIN_MTU <= size <= MAX_MTU:
                raise ValueError(f"mtu SIZE must be {MIN_MTU}..{MAX_MTU} bytes, got {size}")
            # Every IP packet longer than SIZE, either way; a bridge sends no ICMP
            # "fragmentation needed" back: a black hole.
            rules = _rules(mine, peers, longer_than=size) + _rules(peers, mine, longer_than=size)
    elif kind == PATH_DROP:
        (src,), (dst,) = nodes
        if src.qualified == dst.qualified:
            raise ValueError("path-drop needs two different nodes")
        rules = _rules(addresses([src]), addresses([dst]))
    elif kind == PARTITION:
        groups = partition_groups(plan, nodes)
        # Everything (not only probes) from each group to every other group.
        for i, group in enumerate(groups):
            others = [n for j, g in enumerate(groups) if j != i for n in g]
            rules += _rules(addresses(group), addresses(others), probes=False)
    else:
        raise ValueError(f"{kind!r} is not a fabric fault (have {', '.join(FABRIC_KINDS)})")
    return _table(kind, target, rules)


def link_drop_script(rack: P.RackPlan) -> str:
    """The nft script (for `nft -f -` in the router namespace) that drops every packet
    the router would forward to or from `rack` (`lab fault link-drop RACK`): a dead link
    behind the router. Packets whose TTL ends at the router are answered before the
    forward hook, so a trace from another rack still sees the router, then nothing.
    One `table inet` per rack (`table_name(LINK_DROP, rack)`), deleted by `fault clear`."""
    link = f'"{rack.router_iface}"'
    return (
        f"table inet {table_name(LINK_DROP, rack.name)} {{\n"
        "  chain forward_drop {\n"
        "    type filter hook forward priority filter; policy accept;\n"
        f"    iifname {link} drop\n"
        f"    oifname {link} drop\n"
        "  }\n}\n"
    )
