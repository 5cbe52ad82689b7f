"""Serving indirect probes: `GET /v1/indirect` on the agent's responder (NodeIP:4240).

    server = IndirectServer(own=..., registered=probe_targets.nodes, probe=..., counters=...)
    serve_responder(..., extra_routes=[server.route(budget_s)])

A peer whose direct probe of a target failed asks this agent to probe it now. Requests
are checked before any probe is spent (registered source, rate, shape, registered
target, concurrency; each refusal a 4xx with a one-line reason, docs/indirect-probes.md);
then the target is probed with the agent's own probers (`probe`, a one-target round)
and the answer is an IndirectAnswerDocument (meshhealth.documents.indirect).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from meshhealth import defaults
from meshhealth.agent.agent_metrics import IndirectCounters
from meshhealth.documents.indirect import (
    INDIRECT_PATH,
    IndirectQuery,
    Refusal,
    build_answer,
    encode_answer,
    parse_indirect_query,
)
from meshhealth.model import PathReport, Target
from meshhealth.probe.hello_reply import Reply, json_reply, text_reply
from meshhealth.probe.responder import ExtraRoute, RouteRequest
from meshhealth.probe.token_bucket import TokenBuckets
from meshhealth.wire.keys import canonical_ip

log = logging.getLogger("meshhealth.agent")

# Probes one target (the NodeIP, and the HealthIP when the target has one) and returns
# its path reports: a one-target round.
ProbeOne = Callable[[Target], Awaitable[Sequence[PathReport]]]


def _source_ip(peer_ip: str) -> str | None:
    """The peer's address as node entries spell it (an IPv4-mapped one as IPv4)."""
    try:
        return canonical_ip(peer_ip.split("%", 1)[0])
    except ValueError:
        return None


class IndirectServer:
    """Answers `GET /v1/indirect` (see the module docstring)."""

    def __init__(
        self,
        *,
        own: tuple[str, str],
        registered: Callable[[], Sequence[Target]],
        probe: ProbeOne,
        counters: IndirectCounters | None = None,
        rate_per_s: float = defaults.INDIRECT_RATE_PER_S,
        burst: int = defaults.INDIRECT_BURST,
        max_requesters: int = defaults.INDIRECT_MAX_REQUESTERS,
        max_concurrent: int = defaults.INDIRECT_MAX_CONCURRENT,
    ) -> None:
        self.own = own
        self._registered = registered
        self._probe = probe
        self.counters = counters if counters is not None else IndirectCounters.unregistered()
        self.buckets = TokenBuckets(rate_per_s=rate_per_s, burst=burst, max_keys=max_requesters)
        self.limiter = trio.CapacityLimiter(max_concurrent)

    def route(self, budget_s: float) -> ExtraRoute:
        """The responder's route; `budget_s`: the longest a one-target probe takes."""
        return ExtraRoute(INDIRECT_PATH, self.handle, budget_s)

    def _refuse(self, reason: str, refusal: Refusal) -> Reply:
        self.counters.refused[reason].inc()
        return text_reply(refusal.status_code, f"{reason}: {refusal.reason}")

    def is_registered(self, peer_ip: str) -> bool:
        """Whether `peer_ip` is a NodeIP (either family) of a registered node: the
        responder keeps its reserved connection slots for them."""
        source = _source_ip(peer_ip)
        if source is None:
            return False
        return any(source in (t.node_ip, t.node_ip_secondary) for t in self._registered())

    async def handle(self, request: RouteRequest) -> Reply:
        """One request: the checks in order, then the probes (see the module docstring)."""
        targets = self._registered()
        source = _source_ip(request.peer_ip)
        if source is None or not self.is_registered(request.peer_ip):
            why = f"{request.peer_ip} is not the NodeIP of a registered node"
            return self._refuse("unauthorised", Refusal(403, why))
        if not self.buckets.take(source, trio.current_time()):
            why = f"{source} asks more than {self.buckets.rate_per_s:g}/s"
            return self._refuse("rate", Refusal(429, why))
        query = parse_indirect_query(request.method, request.query)
        if isinstance(query, Refusal):
            return self._refuse("malformed", query)
        target = _registered_target(targets, query)
        if target is None:
            why = f"{query.cluster}/{query.node} is not a registered node"
            return self._refuse("unknown-target", Refusal(404, why))
        # A borrower of its own: two equal requests (one requester asking again while its
        # first probe still runs) are equal RouteRequests, and trio's limiter refuses a
        # borrower that already holds a token with RuntimeError.
        borrower = object()
        try:
            self.limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            why = f"{self.limiter.total_tokens:g} indirect probes are running"
            return self._refuse("busy", Refusal(429, why))
        try:
            reports = await self._probe(target)
        finally:
            self.limiter.release_on_behalf_of(borrower)
        self.counters.served.inc()
        answer = build_answer(
            helper=self.own, target=(target.cluster, target.node), reports=reports
        )
        return json_reply(encode_answer(answer))


def _registered_target(targets: Sequence[Target], query: IndirectQuery) -> Target | None:
    for target in targets:
        if (target.cluster, target.node) == (query.cluster, query.node):
            health_ip = target.health_ip if query.endpoint else None
            return Target(target.cluster, target.node, target.node_ip, health_ip)
    return None
