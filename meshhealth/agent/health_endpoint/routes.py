"""Routes to peers' CIDRs via their NodeIPs (`--route-cidrs`), from the registrations.

For every registered peer (model.Node, local cluster and meshed ones) other than this node,
`CIDR via NodeIP` goes into the main table of the agent's namespace, so a peer's health
endpoint (HealthIP inside that CIDR) is reachable through the node that owns it.

Every route we add carries the protocol number ROUTE_PROTO (`ip route show proto 164`).
That is how we find our own routes: only those are replaced or removed, leftovers of a
crashed agent are recognised and cleaned, and nobody else's routes are ever touched.

A peer CIDR is routed only when route_policy.route_refusal allows it (not broader than
/16 or /48, or inside `--route-cidrs-within`; never covering a NodeIP of the mesh, this
node's addresses or etcd's): a forged node entry cannot pull traffic to itself. Each
refusal is logged once per (node, CIDR, reason) and counted in
meshhealth_route_cidrs_refused_total{reason}.

`desired_routes` and `diff_routes` are pure; `RouteProgrammer` changes the routes with
the `ip` command (one `ip -batch` per sync).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from meshhealth import defaults
from meshhealth.agent.health_endpoint.ip_command import PlumbingError, ip_batch_each, ip_json
from meshhealth.agent.health_endpoint.route_policy import (
    BAD_NEXT_HOP,
    IPNetwork,
    ProtectedAddresses,
    Refusal,
    route_refusal,
)
from meshhealth.metrics import Counter
from meshhealth.model import Node

log = logging.getLogger(__name__)

T = TypeVar("T")

ROUTE_PROTO = defaults.ROUTE_PROTO


# --- pure --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RefusedRoute:
    node: str  # "cluster/node" of the peer that claimed it
    cidr: str
    refusal: Refusal


@dataclass(frozen=True, slots=True)
class DesiredRoutes:
    routes: dict[str, str]  # normalised CIDR -> next hop (the owner's NodeIP)
    skipped: tuple[str, ...] = ()  # one line per CIDR not routed, saying why
    refused: tuple[RefusedRoute, ...] = ()  # CIDRs the route policy refused


@dataclass(frozen=True, slots=True)
class RouteDiff:
    add: tuple[tuple[str, str], ...] = ()  # (cidr, via): new routes
    change: tuple[tuple[str, str], ...] = ()  # (cidr, via): ours, with another next hop
    delete: tuple[str, ...] = ()  # cidrs of ours to remove

    @property
    def empty(self) -> bool:
        return not (self.add or self.change or self.delete)

    @property
    def size(self) -> int:
        return len(self.add) + len(self.change) + len(self.delete)


def desired_routes(
    nodes: Iterable[Node],
    *,
    cluster: str,
    node: str,
    own_cidrs: Iterable[str] = (),
    within: Sequence[IPNetwork] = (),
    own_addresses: Iterable[str] = (),
    etcd_addresses: Iterable[str] = (),
    next_hop_refusal: Callable[[str], tuple[str, str] | None] | None = None,
) -> DesiredRoutes:
    """CIDR -> NodeIP for every peer other than (cluster, node); an IPv6 CIDR of a
    dual-stack peer whose NodeIP is IPv4 goes via its secondary NodeIP (and the other
    way round). Pure.

    Skipped (and said why): our own CIDRs, invalid CIDRs or NodeIPs, a next hop of the
    other IP family, and a CIDR claimed by several peers (the first by (cluster, node)
    wins, so every agent picks the same one). Refused: what route_policy refuses (too
    broad, outside `within`, covering a NodeIP of `nodes`, `own_addresses` or
    `etcd_addresses`), and every CIDR whose next hop `next_hop_refusal` refuses
    (NodeAddressPolicy.refusal: (code, why) or None).
    """
    nodes = sorted(nodes, key=lambda n: (n.cluster, n.name))
    protected = ProtectedAddresses.of(
        node_ips=[
            (ip, f"{n.cluster}/{n.name}")
            for n in nodes
            for ip in (n.node_ip, n.node_ip_secondary)
            if ip is not None
        ],
        own=own_addresses,
        etcd=etcd_addresses,
    )
    refused: list[RefusedRoute] = []
    own: set[str] = set()
    for cidr in own_cidrs:
        try:
            own.add(str(ipaddress.ip_network(cidr, strict=False)))
        except ValueError:
            continue
    routes: dict[str, str] = {}
    owners: dict[str, str] = {}
    skipped: list[str] = []
    for peer in nodes:
        if (peer.cluster, peer.name) == (cluster, node):
            continue
        who = f"{peer.cluster}/{peer.name}"
        vias: dict[int, ipaddress.IPv4Address | ipaddress.IPv6Address] = {}
        try:
            for ip in (peer.node_ip, peer.node_ip_secondary):
                if ip is not None:
                    address = ipaddress.ip_address(ip)
                    vias.setdefault(address.version, address)
        except ValueError:
            skipped.append(f"{who}: NodeIP {ip!r} is not an IP address")
            continue
        for cidr in peer.cidrs:
            try:
                net = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                skipped.append(f"{who}: {cidr!r} is not a CIDR")
                continue
            dst = str(net)
            # A dual-stack peer's CIDR of the other family goes via its secondary NodeIP.
            via = vias.get(net.version, ipaddress.ip_address(peer.node_ip))
            if net.version != via.version:
                skipped.append(f"{who}: {dst} and NodeIP {via} are of different IP families")
            elif dst in own:
                skipped.append(f"{who}: {dst} is this node's own CIDR")
            elif next_hop_refusal is not None and (bad := next_hop_refusal(str(via))):
                why = f"{dst} via {via}: the next hop is refused ({bad[1]})"
                refused.append(RefusedRoute(who, dst, Refusal(BAD_NEXT_HOP, why)))
            elif (refusal := route_refusal(net, within=within, protected=protected)) is not None:
                refused.append(RefusedRoute(who, dst, refusal))
            elif dst in routes:
                if routes[dst] != str(via):
                    skipped.append(f"{who}: {dst} is already routed to {owners[dst]}")
            else:
                routes[dst] = str(via)
                owners[dst] = who
    return DesiredRoutes(routes, tuple(skipped), tuple(refused))


def diff_routes(desired: Mapping[str, str], present: Mapping[str, str | None]) -> RouteDiff:
    """What to change so our routes (`present`: cidr -> via) become `desired`. Pure."""
    add = tuple(sorted((dst, via) for dst, via in desired.items() if dst not in present))
    change = tuple(
        sorted((dst, via) for dst, via in desired.items() if dst in present and present[dst] != via)
    )
    delete = tuple(sorted(dst for dst in present if dst not in desired))
    return RouteDiff(add, change, delete)


# --- the `ip` command (sync, run in a worker thread) -------------------------------------


def read_routes(netns: str | None, proto: int = ROUTE_PROTO) -> dict[str, str | None]:
    """Our routes in the main table: cidr -> via (None for a route without a gateway)."""
    found: dict[str, str | None] = {}
    for family, default in (("-4", "0.0.0.0/0"), ("-6", "::/0")):
        shown = ip_json(netns, family, "route", "show", "table", "main", "proto", str(proto))
        for route in shown or ():
            dst, via = route.get("dst"), route.get("gateway")
            if not isinstance(dst, str):
                continue
            cidr = default if dst == "default" else dst
            try:
                key = str(ipaddress.ip_network(cidr, strict=False))
            except ValueError as exc:
                raise PlumbingError(f"`ip route show` printed a bad destination {dst!r}") from exc
            found[key] = via if isinstance(via, str) else None
    return found


def apply_routes(
    netns: str | None, diff: RouteDiff, proto: int = ROUTE_PROTO
) -> list[tuple[str, str]]:
    """Apply `diff` in one `ip -force -batch`, each change on its own; returns
    (cidr, error) for those that failed."""
    suffix = f"proto {proto} table main"
    commands: list[str] = []
    what: list[tuple[str, str]] = []  # (cidr, how to say it) per command
    for dst in diff.delete:
        commands.append(f"route del {dst} {suffix}")
        what.append((dst, f"delete {dst}"))
    # `add` fails with EEXIST when someone else has a route to dst: theirs is kept.
    for verb, routes in (("add", diff.add), ("replace", diff.change)):
        for dst, via in routes:
            commands.append(f"route {verb} {dst} via {via} {suffix}")
            what.append((dst, f"{dst} via {via}"))
    failed: list[tuple[str, str]] = []
    for failure in ip_batch_each(netns, commands):
        dst, said = what[failure.index]
        reason = "a route to it exists that is not ours" if failure.exists else failure.error
        failed.append((dst, f"{said}: {reason}"))
    return failed


# --- the service --------------------------------------------------------------------------


@dataclass(slots=True)
class RouteState:
    """What status and metrics read. Mutated only by `RouteProgrammer.run`."""

    installed: dict[str, str | None] = field(default_factory=dict)  # ours, after last sync
    syncs: int = 0
    reads: int = 0  # route dumps (a sync after a good one needs none)
    changes: int = 0  # routes added, replaced or removed
    errors: int = 0
    last_error: str | None = None
    failed: dict[str, str] = field(default_factory=dict)  # cidr -> error, last sync
    skipped: tuple[str, ...] = ()  # from the last desired_routes
    refused: tuple[RefusedRoute, ...] = ()  # from the last desired_routes


class RouteProgrammer:
    """Keeps `CIDR via NodeIP` routes to every peer in the agent's namespace.

    `await nursery.start(programmer.run)`, then `programmer.set_peers(nodes)` whenever the
    registrations change (cheap, never blocks). Nothing is changed before the first
    `set_peers`; leftovers of a crashed agent are then replaced or removed. Routes are
    re-read and repaired every `resync_interval_s`, failed changes retried after
    `retry_s`. On cancellation every route with our protocol number is removed.
    """

    def __init__(
        self,
        *,
        cluster: str,
        node: str,
        own_cidrs: Iterable[str] = (),
        within: Sequence[IPNetwork] = (),
        own_addresses: Iterable[str] = (),
        etcd_addresses: Iterable[str] = (),
        refused_metric: Counter | None = None,
        next_hop_refusal: Callable[[str], tuple[str, str] | None] | None = None,
        node_netns: str | None = None,
        proto: int = ROUTE_PROTO,
        resync_interval_s: float = defaults.ROUTE_RESYNC_INTERVAL_S,
        retry_s: float = defaults.ROUTE_RETRY_S,
        debounce_s: float = defaults.ROUTE_DEBOUNCE_S,
    ) -> None:
        if not 0 < proto < 256:
            raise ValueError(f"route protocol must be 1..255, got {proto}")
        self._cluster = cluster
        self._node = node
        self._own_cidrs = tuple(own_cidrs)
        self._within = tuple(within)
        self._own_addresses = tuple(own_addresses)
        self._etcd_addresses = tuple(etcd_addresses)
        self._refused_metric = refused_metric
        self._next_hop_refusal = next_hop_refusal
        self._refusals_said: set[tuple[str, str, str]] = set()  # (node, cidr, code)
        self._node_netns = node_netns
        self._proto = proto
        self._resync_interval_s = resync_interval_s
        self._retry_s = retry_s
        self._debounce_s = debounce_s
        self._peers: tuple[Node, ...] | None = None
        self._changed = trio.Event()
        self._limiter = trio.CapacityLimiter(1)
        self.state = RouteState()

    def set_peers(self, nodes: Iterable[Node]) -> None:
        """The registered nodes (self included or not); routes follow on the next sync."""
        self._peers = tuple(nodes)
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await self._changed.wait()
            changed, ok = True, False
            while True:
                if changed:  # a burst of peer changes (a lab's start, churn): one sync
                    await trio.sleep(self._debounce_s)
                self._changed = trio.Event()
                # A peer change right after a good sync trusts what that sync installed;
                # the periodic resync and a retry re-read the routes.
                ok = await self.sync(reread=not (changed and ok))
                changed = False
                with trio.move_on_after(self._resync_interval_s if ok else self._retry_s):
                    await self._changed.wait()
                    changed = True
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + 5.0
                await self._remove_all()

    async def sync(self, *, reread: bool = True) -> bool:
        """Bring our routes in line with the peers once; False when something failed.

        `reread=False` trusts what the last good sync installed instead of dumping the
        routes again (a peer change right after a good sync); the periodic resync and a
        retry re-read. After a change that all went through, the installed routes are
        what was applied: no dump.
        """
        desired = desired_routes(
            self._peers or (),
            cluster=self._cluster,
            node=self._node,
            own_cidrs=self._own_cidrs,
            within=self._within,
            own_addresses=self._own_addresses,
            etcd_addresses=self._etcd_addresses,
            next_hop_refusal=self._next_hop_refusal,
        )
        if desired.skipped != self.state.skipped:
            for line in desired.skipped:
                log.warning("routes: not routing %s", line)
        self.state.skipped = desired.skipped
        self._note_refused(desired.refused)
        self.state.syncs += 1
        try:
            present = self.state.installed
            if reread or self.state.syncs == 1:
                present = await self._read()
            diff = diff_routes(desired.routes, present)
            failed = await self._thread(apply_routes, self._node_netns, diff, self._proto)
            if failed:
                installed = await self._read()
            else:
                installed = dict(present)
                for dst in diff.delete:
                    installed.pop(dst, None)
                installed.update({dst: via for dst, via in (*diff.add, *diff.change)})
            self.state.installed = installed
        except (PlumbingError, OSError) as exc:
            self._record_error(f"route sync: {exc}")
            return False
        self.state.failed = dict(failed)
        failed_dsts = set(self.state.failed)
        self.state.changes += diff.size - len(failed)
        for dst, via in (*diff.add, *diff.change):
            if dst not in failed_dsts:
                log.info("routes: %s via %s", dst, via)
        for dst in diff.delete:
            if dst not in failed_dsts:
                log.info("routes: removed %s", dst)
        for _, error in failed:
            self._record_error(error)
        return not failed

    def _note_refused(self, refused: tuple[RefusedRoute, ...]) -> None:
        """Log and count each refusal once per (node, CIDR, reason)."""
        self.state.refused = refused
        for item in refused:
            said = (item.node, item.cidr, item.refusal.code)
            if said in self._refusals_said:
                continue
            self._refusals_said.add(said)
            log.warning("routes: refusing %s of %s: %s", item.cidr, item.node, item.refusal.why)
            if self._refused_metric is not None:
                self._refused_metric.labels(reason=item.refusal.code).inc()

    async def _read(self) -> dict[str, str | None]:
        self.state.reads += 1
        return await self._thread(read_routes, self._node_netns, self._proto)

    async def _remove_all(self) -> None:
        try:
            present = await self._thread(read_routes, self._node_netns, self._proto)
            failed = await self._thread(
                apply_routes, self._node_netns, diff_routes({}, present), self._proto
            )
        except (PlumbingError, OSError) as exc:
            self._record_error(f"removing routes: {exc}")
            return
        for _, error in failed:
            self._record_error(error)
        self.state.installed = {}

    def _record_error(self, error: str) -> None:
        self.state.errors += 1
        self.state.last_error = error
        log.warning("routes: %s", error)

    async def _thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
