"""Indirect probes, the requester: when a direct path fails, ask peers to probe it.

    indirect = IndirectProbes(own, live=probe_targets.nodes, ask=ask, read_matrix=read, ...)
    await nursery.start(indirect.run)
    indirect.note_round(report)        # the agent object, after each round (never blocks)
    indirect.checks                    # PathKey -> IndirectCheck, for failing paths

After each round, every other node with a failed path is checked (at most `max_checks`
at once; a target whose check still runs is not queued again): up to `helpers` other
agents (meshhealth.agent.indirect.policy.choose_helpers: those whose published reports
show the target reachable first, then those the probe plan has probe it, then any live
registered node) are asked at once, over
`GET /v1/indirect` on their responder, to probe the target now. The whole check runs
under one deadline, `deadline_s` (the helpers' probe budget plus a margin): a helper that
has not answered by then counts as no answer. Each failed path gets its conclusion
(`conclude`): `path-broken` when a helper reaches it, `target-down` when the helpers that
answered fail it too. The newest conclusion of each path is kept in `checks` until the
path is OK again or its node leaves, and `on_checks` is called with the new mapping (the
status document shows them); each conclusion also goes to `on_check` (a confirmation for
the per-path suspicion).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from ipaddress import ip_address

import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import IndirectCounters
from meshhealth.agent.indirect.policy import (
    Conclusion,
    HelperOutcome,
    IndirectCheck,
    choose_helpers,
    conclude,
    reaching_in_matrix,
)
from meshhealth.agent.path_verdicts import PathVerdicts, source_id
from meshhealth.documents.indirect import (
    MAX_ANSWER_BYTES,
    AnswerError,
    IndirectQuery,
    indirect_query,
    parse_answer,
)
from meshhealth.documents.matrix import Matrix, NodeRef
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    PathKey,
    Protocol,
    RoundReport,
    Target,
    TargetType,
)
from meshhealth.probe.http_fetch import FetchError, http_get

log = logging.getLogger("meshhealth.agent")

# Asks one helper about one target: its outcome (never raises for network conditions).
AskHelper = Callable[[Target, IndirectQuery], Awaitable[HelperOutcome]]
# Reads every node's published report (the matrix), for who reaches a target now.
ReadMatrix = Callable[[], Awaitable[Matrix]]


def confirm_suspicion(
    verdicts: PathVerdicts, well: Callable[[], bool]
) -> Callable[[IndirectCheck], None]:
    """`on_check` for the agent: a `target-down` check confirms the suspicion of that
    path once per helper that failed it too (each helper counts once per failing run,
    meshhealth.agent.path_verdicts); a `path-broken` check, while this agent is `well`,
    is the second opinion for a path only this node observes: the path from here is
    broken, unreachable at once once it failed twice in a row (`PathVerdicts.path_broken`);
    other conclusions confirm nothing."""

    def confirm(check: IndirectCheck) -> None:
        path = check.path
        if check.conclusion is Conclusion.PATH_BROKEN and well():
            verdicts.path_broken(path)
            return
        if not check.confirms_failure:
            return
        for cluster, node in check.failed_via:
            verdicts.confirm(path.cluster, path.node, source_id(cluster, node), paths=[path])

    return confirm


class HelperRefusedError(Exception):
    """The helper answered with a refusal (a 4xx and its one-line reason)."""


def make_asker(*, own_ip: str, http_port: int, counters: IndirectCounters) -> AskHelper:
    """The real `ask`: GET /v1/indirect from this node's NodeIP, counted by outcome."""

    async def ask(helper: Target, query: IndirectQuery) -> HelperOutcome:
        ref = (helper.cluster, helper.node)
        # From our NodeIP, the address the helper knows us by; a helper of the other
        # address family gets whatever source the kernel picks.
        same_family = ip_address(helper.node_ip).version == ip_address(own_ip).version
        try:
            status, body = await http_get(
                helper.node_ip,
                http_port,
                indirect_query(query),
                source_ip=own_ip if same_family else None,
                max_body_bytes=MAX_ANSWER_BYTES,
            )
            if status != 200:
                reason = body.decode("utf-8", "replace").strip().splitlines()
                raise HelperRefusedError(f"HTTP {status}: {reason[0] if reason else ''}")
            paths = parse_answer(body, target=(query.cluster, query.node))
        except HelperRefusedError as exc:
            counters.sent["refused"].inc()
            return HelperOutcome(ref, error=str(exc))
        except (OSError, FetchError, AnswerError, ValueError) as exc:
            counters.sent["error"].inc()
            return HelperOutcome(ref, error=str(exc) or type(exc).__name__)
        counters.sent["answered"].inc()
        return HelperOutcome(ref, paths=paths)

    return ask


class IndirectProbes:
    """Checks failed direct paths through helpers (see the module docstring)."""

    def __init__(
        self,
        own: Target,
        *,
        live: Callable[[], Sequence[Target]],
        ask: AskHelper,
        deadline_s: float,
        counters: IndirectCounters | None = None,
        helpers: int = defaults.INDIRECT_HELPERS,
        max_checks: int = defaults.INDIRECT_MAX_CHECKS,
        probers: Callable[[NodeRef], Iterable[NodeRef]] = lambda target: (),
        read_matrix: ReadMatrix,
        matrix_max_age_s: float = defaults.PROBE_INTERVAL_S,
        on_check: Callable[[IndirectCheck], None] = lambda check: None,
        on_checks: Callable[[Mapping[PathKey, IndirectCheck]], None] = lambda checks: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.own = own
        self._live = live
        self._ask = ask
        self.deadline_s = deadline_s
        self.counters = counters if counters is not None else IndirectCounters.unregistered()
        self.helpers = helpers
        self._probers = probers
        self._read_matrix = read_matrix
        self.matrix_max_age_s = matrix_max_age_s
        self.matrix: Matrix | None = None  # the newest published reports read
        self._matrix_read_at = -math.inf
        self._failures_seen = trio.Event()
        self._on_check = on_check
        self._on_checks = on_checks
        self._clock = clock
        self.checks: dict[PathKey, IndirectCheck] = {}
        self.skipped = 0  # failed targets not checked: max_checks were running
        self._running: set[NodeRef] = set()
        self._unreachable: frozenset[NodeRef] = frozenset()  # responders we fail to reach
        self._send, self._receive = trio.open_memory_channel[tuple[Target, tuple[PathKey, ...]]](
            max_checks
        )
        self._slots = trio.CapacityLimiter(max_checks)

    @property
    def enabled(self) -> bool:
        return self.helpers > 0

    def note_round(self, report: RoundReport) -> None:
        """A finished round (never blocks): forget conclusions of paths that are OK now
        or whose node left; queue a check of every other node with a failed path."""
        own = (self.own.cluster, self.own.node)
        present = {(t.cluster, t.node) for t in report.targets}
        failed: dict[NodeRef, list[PathKey]] = {}
        ok: set[PathKey] = set()
        for path_report in report.paths:
            key = path_report.path
            if path_report.result.ok:
                ok.add(key)
            elif (
                (key.cluster, key.node) != own
                and not key.secondary
                and key.protocol in REACHABILITY_PROTOCOLS
            ):
                # Helpers probe the primary addresses' small paths: a secondary
                # (dual-stack) path is not checked through them, nor the MTU and L4
                # probes (an MTU black hole, a blocked port, are diagnosed from the
                # matrix: node/icmp-df, node/udp against node/icmp).
                failed.setdefault((key.cluster, key.node), []).append(key)
        kept = {
            key: check
            for key, check in self.checks.items()
            if key not in ok and (key.cluster, key.node) in present
        }
        if len(kept) != len(self.checks):
            self.checks = kept
            self._on_checks(dict(kept))
        if not self.enabled:
            return
        # Helpers are asked on their responder: one whose responder we fail to reach
        # (its primary NodeIP over HTTP) cannot be asked either.
        self._unreachable = frozenset(
            (key.cluster, key.node)
            for key in (p.path for p in report.paths if not p.result.ok)
            if key.target_type is TargetType.NODE
            and key.protocol is Protocol.HTTP
            and not key.secondary
        )
        if failed:
            self._failures_seen.set()
        by_ref = {(t.cluster, t.node): t for t in report.targets}
        for ref, paths in failed.items():
            if ref in self._running or ref not in by_ref:
                continue
            try:
                self._send.send_nowait((by_ref[ref], tuple(paths)))
            except trio.WouldBlock:
                self.skipped += 1
                continue
            self._running.add(ref)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run checks as rounds queue them, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keep_matrix)
            task_status.started()
            async for target, paths in self._receive:
                await self._slots.acquire_on_behalf_of((target.cluster, target.node))
                nursery.start_soon(self._check_and_release, target, paths)

    async def _keep_matrix(self) -> None:
        """While rounds find failures, read the published reports at most once per
        `matrix_max_age_s` (checks use the newest read, never wait for one)."""
        while True:
            await self._failures_seen.wait()
            self._failures_seen = trio.Event()
            await trio.sleep_until(self._matrix_read_at + self.matrix_max_age_s)
            self._matrix_read_at = trio.current_time()
            try:
                self.matrix = await self._read_matrix()
            except Exception as exc:  # etcd down: helpers come from live nodes only
                log.debug("indirect probes: cannot read published reports: %s", exc)

    async def _check_and_release(self, target: Target, paths: tuple[PathKey, ...]) -> None:
        ref = (target.cluster, target.node)
        try:
            await self.check(target, paths)
        finally:
            self._running.discard(ref)
            self._slots.release_on_behalf_of(ref)

    async def check(self, target: Target, paths: Sequence[PathKey]) -> list[IndirectCheck]:
        """Ask helpers about `target` now and conclude about each of its failed `paths`
        (the whole check under `deadline_s`)."""
        ref = (target.cluster, target.node)
        own = (self.own.cluster, self.own.node)
        outcomes: list[HelperOutcome] = []
        reaching = frozenset() if self.matrix is None else reaching_in_matrix(self.matrix, ref)
        chosen = choose_helpers(
            ref,
            self._live(),
            own=own,
            k=self.helpers,
            reaching=reaching,
            probers=self._probers(ref),
            unreachable=self._unreachable,
        )
        with trio.move_on_after(self.deadline_s):
            query = IndirectQuery(
                target.cluster,
                target.node,
                endpoint=any(p.target_type is TargetType.ENDPOINT for p in paths),
            )
            slots: list[HelperOutcome | None] = [None] * len(chosen)

            async def ask_one(position: int, helper: Target) -> None:
                slots[position] = await self._ask(helper, query)

            try:
                async with trio.open_nursery() as nursery:
                    for position, helper in enumerate(chosen):
                        nursery.start_soon(ask_one, position, helper)
            finally:
                for position, helper in enumerate(chosen):
                    outcome = slots[position]
                    if outcome is None:
                        self.counters.sent["timeout"].inc()
                        outcome = HelperOutcome(
                            (helper.cluster, helper.node),
                            error=f"no answer within {self.deadline_s:g}s",
                        )
                    outcomes.append(outcome)
        now = self._clock()
        checks = [conclude(path, outcomes, checked_at=now) for path in paths]
        for check in checks:
            self.counters.checks[check.conclusion.value].inc()
            self._on_check(check)
            if check.conclusion is Conclusion.PATH_BROKEN:
                log.info(
                    "%s/%s %s/%s: %s",
                    target.cluster,
                    target.node,
                    check.path.target_type.value,
                    check.path.protocol.value,
                    check.detail(),
                )
        self.checks = {**self.checks, **{check.path: check for check in checks}}
        self._on_checks(dict(self.checks))
        return checks
