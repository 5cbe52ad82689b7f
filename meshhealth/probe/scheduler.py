"""One probe round: every path of every target, concurrently, each under its own deadline.

A round probes each (target, address, protocol) path once. Starts are shuffled and
spread with jitter over `spread_s`; at most `max_in_flight` probes run at once (a
dispatcher starts what may start as one batch, ICMP probes of a batch in one
`Pinger.ping_batch` call); each probe enforces its own timeout, shrunk by its lateness
when the loop started it late (`late_timeout_s`), with one safety-net cancel scope per
batch (an overrun is TIMEOUT). So a round ends within `round_bound_s` however many
targets are dead, and cancelling the caller's scope leaves no task behind.

The plan (`enumerate_paths`, `plan_round`, `round_bound_s`) is pure; `run_planned` runs
a plan with any probe function; `run_round` wires it to the ICMP pinger and HTTP prober.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, NamedTuple, Protocol

import trio

from meshhealth import defaults, model
from meshhealth.probe.http import http_probe
from meshhealth.probe.tcp_connect import tcp_connect_probe
from meshhealth.probe.udp_probe import udp_probe

# Tunables (reasons in meshhealth/defaults.py), under the names the docs use.
DEADLINE_MARGIN_S: Final = defaults.PROBE_DEADLINE_MARGIN_S
DISPATCH_BATCH: Final = defaults.PROBE_DISPATCH_BATCH
MIN_TIMEOUT_FRACTION: Final = defaults.PROBE_MIN_TIMEOUT_FRACTION

# The paths of every address. The don't-fragment probe (Protocol.ICMP_DF), the UDP echo
# (Protocol.UDP) and the TCP connects (Protocol.TCP, one path per port), the primary
# NodeIP only, are added by run_round's `mtu_probe_size`, `udp_source_ports` and
# `tcp_ports`.
ALL_PROTOCOLS: Final = frozenset(model.REACHABILITY_PROTOCOLS)
# Order of paths within a target in reports: node then endpoint, ICMP, HTTP, ICMP DF, UDP;
# then the TCP ports, in the order given.
_TARGET_TYPES: Final = (model.TargetType.NODE, model.TargetType.ENDPOINT)
_PROTOCOLS: Final = (
    model.Protocol.ICMP,
    model.Protocol.HTTP,
    model.Protocol.ICMP_DF,
    model.Protocol.UDP,
)
# Probed on the primary NodeIP only.
_NODE_ONLY: Final = frozenset({model.Protocol.ICMP_DF, model.Protocol.UDP})
# Probed by the pinger, in the ICMP batches.
_PINGED: Final = frozenset({model.Protocol.ICMP, model.Protocol.ICMP_DF})
# Each address's primary, then (dual stack) its secondary of the other family.
_ADDRESSES: Final = (False, True)

ICMP_DISABLED: Final = "ICMP disabled"
OVERRAN: Final = "probe overran its deadline"


class SupportsPing(Protocol):
    """What the scheduler needs from meshhealth.probe.icmp.Pinger."""

    async def ping_batch(
        self,
        ips: Sequence[str],
        *,
        count: int,
        interval_s: float,
        timeout_s: float | Sequence[float],
        on_result: Callable[[int, model.ProbeResult], None] | None = None,
        df_sizes: Sequence[int] | None = None,
    ) -> list[model.ProbeResult]: ...


class PlannedProbe(NamedTuple):
    """One path of a round: what to probe, when to start, how long it may take.

    (A NamedTuple: made once per path per round, it costs a third of a frozen
    dataclass.)"""

    path: model.PathKey
    ip: str
    offset_s: float  # start, in seconds after the round started
    budget_s: float  # the probe's own deadline (its timeout contract)
    order: int = 0  # its position in report order (enumerate_paths)


# Called with the planned probe and how late it starts (s, >= 0) against the plan.
ProbeFn = Callable[[PlannedProbe, float], Awaitable[model.ProbeResult]]
# Runs several planned ICMP probes in one task: called with the probes, how late each
# starts, and a function to call with (position, result) as each one ends.
BatchProbeFn = Callable[
    [Sequence[PlannedProbe], Sequence[float], Callable[[int, model.ProbeResult], None]],
    Awaitable[None],
]


def enumerate_paths(
    targets: Sequence[model.Target],
    protocols: frozenset[model.Protocol] = ALL_PROTOCOLS,
    tcp_ports: Sequence[int] = (),
) -> list[tuple[model.PathKey, str]]:
    """Every (path, ip) to probe, in report order; a missing HealthIP has no paths, and
    only the primary NodeIP has the ICMP_DF (the MTU probe) and UDP paths, and a TCP
    path per port of `tcp_ports` (when `protocols` has TCP).

    A dual-stack target's secondary addresses get paths of their own (`secondary`),
    each right after its primary's: node, node secondary, endpoint, endpoint secondary.

    A path that appears twice (the same target listed twice) is probed once.
    """
    # Seen keys as plain tuples: a tuple hashes in C, a PathKey in Python.
    seen: set[tuple[str, str, model.TargetType, model.Protocol, bool, int]] = set()
    paths: list[tuple[model.PathKey, str]] = []
    path_key = model.PathKey
    node_type = model.TargetType.NODE
    kinds = [
        (t, s, p)
        for t in _TARGET_TYPES
        for s in _ADDRESSES
        for p in _PROTOCOLS
        if p in protocols and (p not in _NODE_ONLY or (t is node_type and not s))
    ]
    tcp = model.Protocol.TCP
    ports = tcp_ports if tcp in protocols else ()
    for target in targets:
        cluster, node = target.cluster, target.node
        for target_type, secondary, protocol in kinds:
            if target_type is node_type:
                ip = target.node_ip_secondary if secondary else target.node_ip
            else:
                ip = target.health_ip_secondary if secondary else target.health_ip
            if not ip:
                continue
            seen_key = (cluster, node, target_type, protocol, secondary, 0)
            if seen_key not in seen:
                seen.add(seen_key)
                paths.append((path_key(cluster, node, target_type, protocol, secondary), ip))
        for port in ports:
            tcp_key = (cluster, node, node_type, tcp, False, port)
            if tcp_key not in seen:
                seen.add(tcp_key)
                paths.append((path_key(cluster, node, node_type, tcp, False, port), target.node_ip))
    return paths


def icmp_budget_s(count: int, interval_s: float, timeout_s: float) -> float:
    """How long an ICMP probe of `count` requests may take: last send + timeout."""
    return max(count - 1, 0) * interval_s + timeout_s


def spread_offsets(n: int, spread_s: float, rng: random.Random) -> list[float]:
    """`n` increasing start offsets in [0, spread_s): one per equal slice, jittered."""
    if n <= 0:
        return []
    if spread_s <= 0:
        return [0.0] * n
    slice_s = spread_s / n
    # min(): float rounding must not push the last offset onto spread_s itself.
    return [min((i + rng.random()) * slice_s, math.nextafter(spread_s, 0.0)) for i in range(n)]


def plan_round(
    paths: Sequence[tuple[model.PathKey, str]],
    *,
    spread_s: float,
    rng: random.Random,
    icmp_budget_s: float,
    http_budget_s: float,
) -> list[PlannedProbe]:
    """Shuffle the paths and give each a start offset; the plan is sorted by offset."""
    order = list(enumerate(paths))
    rng.shuffle(order)
    offsets = spread_offsets(len(order), spread_s, rng)
    return [
        PlannedProbe(
            key, ip, offset, icmp_budget_s if key.protocol in _PINGED else http_budget_s, position
        )
        for (position, (key, ip)), offset in zip(order, offsets, strict=True)
    ]


def round_bound_s(
    n_paths: int, *, spread_s: float, max_budget_s: float, max_in_flight: int
) -> float:
    """Upper bound of a round's wall time (scheduling overhead aside)."""
    if n_paths <= 0:
        return 0.0
    waves = math.ceil(n_paths / max(max_in_flight, 1))
    return max(spread_s, 0.0) + waves * (max_budget_s + DEADLINE_MARGIN_S)


def late_timeout_s(timeout_s: float, late_s: float) -> float:
    """The timeout of a probe that starts `late_s` after its planned start.

    Its deadline stays where the plan put it, but it always gets at least
    MIN_TIMEOUT_FRACTION of the timeout (past that, the round runs long instead).
    """
    return max(timeout_s - max(late_s, 0.0), timeout_s * MIN_TIMEOUT_FRACTION)


def overran_result(planned: PlannedProbe, started_at: float, icmp_count: int) -> model.ProbeResult:
    sent = icmp_count if planned.path.protocol in _PINGED else 1
    return model.ProbeResult(
        status=model.ProbeStatus.TIMEOUT, started_at=started_at, sent=sent, detail=OVERRAN
    )


async def run_planned(
    plan: Sequence[PlannedProbe],
    probe: ProbeFn,
    *,
    max_in_flight: int = defaults.MAX_PROBES_IN_FLIGHT,
    on_result: Callable[[model.PathReport], None] | None = None,
    icmp_count: int = defaults.ICMP_COUNT,
    icmp_batch: BatchProbeFn | None = None,
) -> tuple[model.PathReport, ...]:
    """Run `probe` for every planned path (see the module docstring); reports in plan order.

    With `icmp_batch`, the ICMP probes of each dispatch batch run through it, in one
    task, instead of one `probe` task each. `plan` must be sorted by offset (as
    `plan_round` returns it).
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, not {max_in_flight}")
    reports: list[model.PathReport | None] = [None] * len(plan)
    slots = trio.Semaphore(max_in_flight)
    round_start = trio.current_time()

    def finish(index: int, result: model.ProbeResult) -> None:
        planned = plan[index]
        report = model.PathReport(planned.path, planned.ip, result)
        reports[index] = report
        if on_result is not None:
            on_result(report)

    async def run_one(index: int, not_before: float) -> None:
        try:
            late = late_s(index, trio.current_time(), not_before)
            finish(index, await probe(plan[index], late))
        finally:
            slots.release()

    def late_s(index: int, now: float, not_before: float) -> float:
        # Late against its planned start, or against the moment a slot became free
        # when it had to queue for one: waiting for a slot is the in-flight bound
        # doing its job, not lateness.
        return max(now - max(round_start + plan[index].offset_s, not_before), 0.0)

    async def run_together(batch: list[int], not_before: float) -> None:
        assert icmp_batch is not None
        released = [False] * len(batch)

        def done(position: int, result: model.ProbeResult) -> None:
            finish(batch[position], result)
            if not released[position]:
                released[position] = True
                slots.release()

        now = trio.current_time()
        try:
            await icmp_batch(
                [plan[index] for index in batch],
                [late_s(index, now, not_before) for index in batch],
                done,
            )
        finally:
            for _ in range(released.count(False)):  # cancelled, or a bug: free them
                slots.release()

    async def run_batch(batch: list[int], not_before: float) -> None:
        # Probes started together share one safety-net deadline (a cancel scope per
        # probe would cost ~6 us each, an eighth of a probe's CPU). Each still gets at
        # least its own budget + DEADLINE_MARGIN_S from its start.
        started_at = time.time()
        budget_s = max(plan[index].budget_s for index in batch)
        together: list[int] = []
        if icmp_batch is not None:
            together = [i for i in batch if plan[i].path.protocol in _PINGED]
        with trio.move_on_after(budget_s + DEADLINE_MARGIN_S):
            if len(together) == len(batch):
                await run_together(together, not_before)
            else:
                async with trio.open_nursery() as batch_nursery:
                    if together:
                        batch_nursery.start_soon(run_together, together, not_before)
                    for index in batch:
                        if not together or plan[index].path.protocol not in _PINGED:
                            batch_nursery.start_soon(run_one, index, not_before)
        for index in batch:
            if reports[index] is None:
                finish(index, overran_result(plan[index], started_at, icmp_count))

    async with trio.open_nursery() as nursery:
        next_index = 0
        while next_index < len(plan):
            start_at = round_start + plan[next_index].offset_s
            if start_at > trio.current_time():
                await trio.sleep_until(start_at)
            queued = slots.value == 0
            await slots.acquire()  # the dispatcher's checkpoint: cancellable, fair
            not_before = trio.current_time() if queued else -math.inf
            startable = [next_index]
            next_index += 1
            # Everything else that may start now is started now, in one go: probes
            # started one scheduler turn apart would start late whenever earlier probes
            # keep the loop busy (and end late, stretching the round).
            now = trio.current_time()
            while next_index < len(plan) and round_start + plan[next_index].offset_s <= now:
                try:
                    slots.acquire_nowait()
                except trio.WouldBlock:
                    break
                startable.append(next_index)
                next_index += 1
            for first in range(0, len(startable), DISPATCH_BATCH):
                nursery.start_soon(run_batch, startable[first : first + DISPATCH_BATCH], not_before)

    done = [r for r in reports if r is not None]
    assert len(done) == len(plan), "every planned probe reports"
    return tuple(done)


def _with(
    protocols: frozenset[model.Protocol], protocol: model.Protocol, on: bool
) -> frozenset[model.Protocol]:
    """`protocols` with `protocol` in it when `on`, else without it."""
    return protocols | {protocol} if on else protocols - {protocol}


def _error_result(detail: str, sent: int = 0) -> model.ProbeResult:
    return model.ProbeResult(
        status=model.ProbeStatus.ERROR, started_at=time.time(), sent=sent, detail=detail
    )


async def run_round(
    targets: Sequence[model.Target],
    *,
    pinger: SupportsPing | None,
    http_port: int = defaults.HTTP_PORT,
    timeout_s: float = defaults.PROBE_TIMEOUT_S,
    spread_s: float = 0.0,
    max_in_flight: int = defaults.MAX_PROBES_IN_FLIGHT,
    icmp_count: int = defaults.ICMP_COUNT,
    icmp_interval_s: float = defaults.ICMP_INTERVAL_S,
    protocols: frozenset[model.Protocol] = ALL_PROTOCOLS,
    rng: random.Random | None = None,
    on_result: Callable[[model.PathReport], None] | None = None,
    mtu_probe_size: int = defaults.MTU_PROBE_OFF,
    udp_port: int = defaults.UDP_ECHO_PORT,
    udp_source_ports: int = 0,
    source_ips: Sequence[str] = (),
    tcp_ports: Sequence[int] = (),
) -> model.RoundReport:
    """Probe every path of `targets` once (see the module docstring).

    `mtu_probe_size` adds the don't-fragment path (Protocol.ICMP_DF) to every NodeIP:
    `icmp_count` echo requests whose IP packets are that many bytes, or the route's MTU
    (defaults.MTU_PROBE_AUTO); MTU_PROBE_OFF (0) leaves it out.

    `udp_source_ports` adds the UDP echo path (Protocol.UDP) to every NodeIP: that many
    echo datagrams to `udp_port`, each from its own source port; 0 leaves it out. It is
    sent from the address of `source_ips` (this node's NodeIPs) of the target's family.

    `tcp_ports` adds a TCP connect path (Protocol.TCP) per port to every NodeIP.

    With `pinger=None`, ICMP paths are reported as ERROR "ICMP disabled" (leave ICMP out
    of `protocols` to skip them instead). `on_result` is called as each path finishes.
    The report lists paths in target order (node, endpoint; ICMP, HTTP).
    """
    started_at = time.time()
    t0 = trio.current_time()
    protocols = _with(protocols, model.Protocol.ICMP_DF, mtu_probe_size != defaults.MTU_PROBE_OFF)
    protocols = _with(protocols, model.Protocol.UDP, udp_source_ports > 0)
    protocols = _with(protocols, model.Protocol.TCP, bool(tcp_ports))
    sources = {model.ip_family(ip): ip for ip in source_ips}
    paths = enumerate_paths(targets, protocols, tcp_ports)
    plan = plan_round(
        paths,
        spread_s=spread_s,
        rng=rng if rng is not None else random.Random(),
        icmp_budget_s=icmp_budget_s(icmp_count, icmp_interval_s, timeout_s),
        http_budget_s=timeout_s,
    )

    async def probe(planned: PlannedProbe, late_s: float) -> model.ProbeResult:
        # A probe that starts late (a busy loop) has that much less time: the deadline
        # counts from its planned start, so the round still ends on time.
        if planned.path.protocol in _PINGED:  # (only without a pinger)
            return _error_result(ICMP_DISABLED)
        try:
            if planned.path.protocol is model.Protocol.TCP:
                return await tcp_connect_probe(
                    planned.ip, planned.path.port, timeout_s=late_timeout_s(timeout_s, late_s)
                )
            if planned.path.protocol is model.Protocol.UDP:
                return await udp_probe(
                    planned.ip,
                    udp_port,
                    source_ports=udp_source_ports,
                    timeout_s=late_timeout_s(timeout_s, late_s),
                    source_ip=sources.get(model.ip_family(planned.ip)),
                )
            return await http_probe(
                planned.ip, http_port, timeout_s=late_timeout_s(timeout_s, late_s)
            )
        except (OSError, ValueError) as exc:
            # A local failure (no buffer space, a target that is not an IP) fails this
            # path only, never the round.
            return _error_result(str(exc) or type(exc).__name__)

    async def icmp_batch(
        planned: Sequence[PlannedProbe],
        lates_s: Sequence[float],
        done: Callable[[int, model.ProbeResult], None],
    ) -> None:
        assert pinger is not None
        reported = [False] * len(planned)

        def on_ping_result(position: int, result: model.ProbeResult) -> None:
            reported[position] = True
            done(position, result)

        df = model.Protocol.ICMP_DF
        try:
            await pinger.ping_batch(
                [p.ip for p in planned],
                count=icmp_count,
                interval_s=icmp_interval_s,
                timeout_s=[late_timeout_s(timeout_s, late) for late in lates_s],
                on_result=on_ping_result,
                df_sizes=(
                    [mtu_probe_size if p.path.protocol is df else 0 for p in planned]
                    if df in protocols
                    else None
                ),
            )
        except (OSError, ValueError) as exc:
            # A local failure (no raw socket) fails these paths only, never the round.
            error = _error_result(str(exc) or type(exc).__name__)
            for position, was_reported in enumerate(reported):
                if not was_reported:
                    done(position, error)

    done = await run_planned(
        plan,
        probe,
        max_in_flight=max_in_flight,
        on_result=on_result,
        icmp_count=icmp_count,
        icmp_batch=icmp_batch if pinger is not None else None,
    )
    in_order: list[model.PathReport] = list(done)
    for planned, report in zip(plan, done, strict=True):
        in_order[planned.order] = report
    return model.RoundReport(
        started_at=started_at,
        duration_s=trio.current_time() - t0,
        targets=tuple(targets),
        paths=tuple(in_order),
    )
