"""The probe set: which nodes to probe, built from ip -> identity entries. Pure.

Entries (identity remote-node or health) are grouped by (cluster, host_ip) into one
Target per host, keyed by (cluster, node name); the lowest host_ip wins a name two
hosts claim, so the result never depends on order. A dual-stack node's entries of the
other family are its secondary addresses. An ip entry is believed only when its node
vouches for it (`vouched_entries`): only that node's etcd user may write its node entry
(docs/security.md), so an entry written under another node's name is left out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from meshhealth.model import IDENTITY_HEALTH, IDENTITY_REMOTE_NODE, IPEntry, Node, Target

TargetKey = tuple[str, str]  # (cluster, node)


def _ip_order(ip: str) -> tuple[int, int]:
    address = ipaddress.ip_address(ip)
    return (address.version, int(address))


def _family(ip: str) -> int:
    return 6 if ":" in ip else 4


@dataclass(slots=True)
class _Host:
    node_from_remote: str | None = None
    node_from_health: str | None = None
    health_ips: list[str] = field(default_factory=list)
    other_family_ips: list[str] = field(default_factory=list)  # secondary NodeIPs


def node_addresses(node: Node) -> frozenset[str]:
    """The addresses `node`'s entry lists (its ip entries are written under them)."""
    listed = (node.node_ip, node.health_ip, node.node_ip_secondary, node.health_ip_secondary)
    return frozenset(ip for ip in listed if ip is not None)


def vouched_entries(
    entries: Iterable[tuple[str, IPEntry]], nodes: Iterable[Node]
) -> tuple[list[tuple[str, IPEntry]], list[tuple[str, IPEntry]]]:
    """(the (cluster, entry) pairs whose node vouches for them, the others): the node
    entry of `entry.node` in that cluster lists `entry.ip` and has `entry.host_ip` as
    its NodeIP."""
    by_name = {(n.cluster, n.name): n for n in nodes}
    believed: list[tuple[str, IPEntry]] = []
    refused: list[tuple[str, IPEntry]] = []
    for cluster, entry in entries:
        node = by_name.get((cluster, entry.node))
        ok = node is not None and entry.ip in node_addresses(node) and entry.host_ip == node.node_ip
        (believed if ok else refused).append((cluster, entry))
    return believed, refused


def build_probe_set(entries: Iterable[tuple[str, IPEntry]]) -> dict[TargetKey, Target]:
    """Targets from (cluster, entry) pairs; see the module docstring for the rules."""
    hosts: dict[tuple[str, str], _Host] = {}
    for cluster, entry in entries:
        if entry.identity not in (IDENTITY_REMOTE_NODE, IDENTITY_HEALTH):
            continue
        host = hosts.setdefault((cluster, entry.host_ip), _Host())
        if entry.identity == IDENTITY_REMOTE_NODE:
            # The NodeIP entry itself (ip == host_ip) names the node; other remote-node
            # addresses of the host only confirm it.
            if host.node_from_remote is None or entry.ip == entry.host_ip:
                host.node_from_remote = entry.node
            if _family(entry.ip) != _family(entry.host_ip):
                host.other_family_ips.append(entry.ip)
        else:
            host.node_from_health = host.node_from_health or entry.node
            host.health_ips.append(entry.ip)
    targets: dict[TargetKey, Target] = {}
    for (cluster, host_ip), host in sorted(
        hosts.items(), key=lambda i: (i[0][0], _ip_order(i[0][1]))
    ):
        node = host.node_from_remote or host.node_from_health
        assert node is not None
        key = (cluster, node)
        if key in targets:
            continue  # a lower host_ip already claimed this name
        targets[key] = _target(cluster, node, host_ip, host)
    return targets


def _target(cluster: str, node: str, host_ip: str, host: _Host) -> Target:
    if not host.other_family_ips:
        # Single stack (or a writer that predates dual stack, whose HealthIP may be of
        # the other family): the lowest HealthIP, as before.
        return Target(cluster, node, host_ip, _lowest(host.health_ips))
    primary = _family(host_ip)
    return Target(
        cluster=cluster,
        node=node,
        node_ip=host_ip,
        health_ip=_lowest(ip for ip in host.health_ips if _family(ip) == primary),
        node_ip_secondary=_lowest(host.other_family_ips),
        health_ip_secondary=_lowest(ip for ip in host.health_ips if _family(ip) != primary),
    )


def _lowest(ips: Iterable[str]) -> str | None:
    return min(ips, key=_ip_order, default=None)


@dataclass(frozen=True, slots=True)
class ProbeSetDiff:
    """What changed between two probe sets (each part sorted)."""

    added: tuple[Target, ...] = ()
    removed: tuple[Target, ...] = ()
    changed: tuple[tuple[Target, Target], ...] = ()  # (old, new), same (cluster, node)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff_probe_sets(
    old: Mapping[TargetKey, Target], new: Mapping[TargetKey, Target]
) -> ProbeSetDiff:
    """The diff that turns `old` into `new`."""
    added = tuple(sorted(new[k] for k in new.keys() - old.keys()))
    removed = tuple(sorted(old[k] for k in old.keys() - new.keys()))
    changed = tuple(sorted((old[k], new[k]) for k in old.keys() & new.keys() if old[k] != new[k]))
    return ProbeSetDiff(added, removed, changed)


def apply_diff(
    probe_set: Mapping[TargetKey, Target], diff: ProbeSetDiff
) -> dict[TargetKey, Target]:
    """`probe_set` with `diff` applied (what a subscriber of diffs keeps)."""
    result = dict(probe_set)
    for target in diff.removed:
        result.pop((target.cluster, target.node), None)
    for target in diff.added:
        result[(target.cluster, target.node)] = target
    for _, new in diff.changed:
        result[(new.cluster, new.node)] = new
    return result
