"""`GET /v1/indirect` on the agent's responder, with real sockets, a real etcd, real
probes: every refusal (malformed, unknown target, unauthorised source, over rate, busy)
costs no probe; a good request probes the registered target and answers the document;
and the requester's side (IndirectProbes) concludes from a real helper's answers.

Nodes are distinct loopback addresses 127.<o>.1.x registered in etcd, so a request's
source address is a registered NodeIP or not (the client binds its source).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import random
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from meshhealth.agent.agent_metrics import IndirectCounters
from meshhealth.agent.indirect.policy import Conclusion
from meshhealth.agent.indirect.probes import IndirectProbes, make_asker
from meshhealth.agent.indirect.server import IndirectServer
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.registrar import Registrar
from meshhealth.documents.indirect import (
    MAX_ANSWER_BYTES,
    IndirectQuery,
    indirect_query,
    parse_answer,
)
from meshhealth.documents.matrix import Matrix
from meshhealth.kvstore import open_etcd
from meshhealth.matrix_source import MatrixSource, read_matrix
from meshhealth.model import PathKey, PathReport, ProbeStatus, Protocol, Target, TargetType
from meshhealth.node_address_policy import NodeAddressPolicy
from meshhealth.probe.hello_reply import Reply, text_reply
from meshhealth.probe.http_fetch import http_get
from meshhealth.probe.icmp import Pinger, open_pinger
from meshhealth.probe.responder import ExtraRoute, RouteRequest, serve_responder
from meshhealth.probe.scheduler import run_round
from tests.etcd_helpers import FAST_ETCD, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.netns import require_root

# nodes on 127.x: a single-host mesh, whose peers may be loopback
LOOPBACK_MESH = NodeAddressPolicy(allow_loopback=True)

OCTET = random.randrange(64, 250)
HELPER_IP, REQUESTER_IP, TARGET_IP = (f"127.{OCTET}.1.{i}" for i in (1, 2, 3))
STRANGER_IP = f"127.{OCTET}.1.9"  # not registered
# A port of this test's range; the addresses are the test's own, so it does not clash.
PORT = 21400 + os.getpid() % 100
TIMEOUT_S = 1.0


@dataclass
class CountingProbe:
    """The real one-target round, counted; `gate` (when set) holds probes until set."""

    pinger: Pinger
    calls: int = 0
    gate: trio.Event | None = None
    running: int = 0
    started: trio.Event = field(default_factory=trio.Event)

    async def __call__(self, target: Target) -> Sequence[PathReport]:
        self.calls += 1
        self.running += 1
        self.started.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            report = await run_round(
                [target], pinger=self.pinger, http_port=PORT, timeout_s=TIMEOUT_S
            )
            return report.paths
        finally:
            self.running -= 1


@dataclass
class Setup:
    discovery: Discovery
    probe: CountingProbe
    server: IndirectServer
    nursery: trio.Nursery


@asynccontextmanager
async def mesh(
    etcd_server: EtcdServer,
    policy: NodeAddressPolicy = LOOPBACK_MESH,
    registered: int = 3,
    **server_kwargs: float,
) -> AsyncIterator[Setup]:
    """Helper, requester and target registered; the target's and the helper's
    responders serving; the helper's with the indirect route."""
    require_root()  # raw ICMP socket
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd, open_pinger() as pinger:
        registrars = [
            Registrar(etcd, make_node(name, ip), ttl_s=5)
            for name, ip in (("h", HELPER_IP), ("r", REQUESTER_IP), ("t", TARGET_IP))
        ]
        discovery = Discovery({"c1": etcd}, address_policy=policy)
        probe = CountingProbe(pinger)
        counters = IndirectCounters.unregistered()
        server = IndirectServer(
            own=("c1", "h"),
            registered=discovery.targets,
            probe=probe,
            counters=counters,
            **server_kwargs,  # type: ignore[arg-type]
        )
        async with trio.open_nursery() as nursery:
            for registrar in registrars:
                await nursery.start(registrar.run)
            await nursery.start(discovery.run)
            await poll_until(
                lambda: len(discovery.targets()) == registered, 10.0, what="registered"
            )
            await nursery.start(functools.partial(serve_responder, node_name="t"), TARGET_IP, PORT)
            await nursery.start(
                functools.partial(
                    serve_responder, node_name="h", extra_routes=[server.route(TIMEOUT_S + 1)]
                ),
                HELPER_IP,
                PORT,
            )
            yield Setup(discovery, probe, server, nursery)
            nursery.cancel_scope.cancel()


async def ask(target: str, source: str = REQUESTER_IP) -> tuple[int, bytes]:
    with trio.fail_after(10):
        return await http_get(
            HELPER_IP, PORT, target, source_ip=source, max_body_bytes=MAX_ANSWER_BYTES
        )


GOOD = indirect_query(IndirectQuery("c1", "t"))


async def test_good_request_probes_the_registered_target(etcd_server: EtcdServer) -> None:
    async with mesh(etcd_server) as setup:
        status, body = await ask(GOOD)
        assert status == 200, body
        paths = parse_answer(body, target=("c1", "t"))
        assert sorted(paths) == ["node/http", "node/icmp"]  # no endpoint=1: NodeIP only
        assert all(p.status is ProbeStatus.OK and p.rtt_s is not None for p in paths.values())
        assert b'"prober":"c1/h"' in body and f'"ip":"{TARGET_IP}"'.encode() in body
        assert setup.probe.calls == 1
        assert setup.server.counters.served.value == 1


async def test_refusals_cost_no_probe(etcd_server: EtcdServer) -> None:
    async with mesh(etcd_server) as setup:
        cases = [
            (GOOD, STRANGER_IP, 403, b"unauthorised: "),
            ("/v1/indirect?cluster=c1", REQUESTER_IP, 400, b"malformed: "),
            ("/v1/indirect?cluster=c1&node=t&ip=10.0.0.1", REQUESTER_IP, 400, b"malformed: "),
            ("/v1/indirect?cluster=c1&node=nobody", REQUESTER_IP, 404, b"unknown-target: "),
            ("/v1/indirect?cluster=c9&node=t", REQUESTER_IP, 404, b"unknown-target: "),
        ]
        for target, source, want_status, want_reason in cases:
            status, body = await ask(target, source)
            assert (status, body.startswith(want_reason)) == (want_status, True), body
            assert body.count(b"\n") == 1  # one line
        assert setup.probe.calls == 0
        refused = setup.server.counters.refused
        assert refused["unauthorised"].value == 1
        assert refused["malformed"].value == 2
        assert refused["unknown-target"].value == 2
        assert setup.server.counters.served.value == 0


async def test_a_registered_node_the_address_policy_refuses_is_not_heard(
    etcd_server: EtcdServer,
) -> None:
    """The requester's node entry is in etcd, but its NodeIP is outside
    --allowed-node-cidrs: it is no registered requester (403), and not a target."""
    only_h_and_t = NodeAddressPolicy(
        (ipaddress.ip_network(f"{HELPER_IP}/32"), ipaddress.ip_network(f"{TARGET_IP}/32")),
        allow_loopback=True,
    )
    async with mesh(etcd_server, only_h_and_t, registered=2) as setup:
        assert [r.code for r in setup.discovery.refused] == ["outside-allowed"]
        status, body = await ask(GOOD, REQUESTER_IP)
        assert (status, body.startswith(b"unauthorised: ")) == (403, True), body
        status, body = await ask(indirect_query(IndirectQuery("c1", "r")), TARGET_IP)
        assert (status, body.startswith(b"unknown-target: ")) == (404, True), body
        assert setup.probe.calls == 0


async def test_over_rate_gets_429_and_no_probe(etcd_server: EtcdServer) -> None:
    async with mesh(etcd_server, rate_per_s=0.01, burst=2) as setup:
        assert (await ask(GOOD))[0] == 200
        assert (await ask(GOOD))[0] == 200
        status, body = await ask(GOOD)
        assert status == 429 and body.startswith(b"rate: "), body
        assert setup.probe.calls == 2
        # Another registered node has a bucket of its own.
        status, _ = await ask(GOOD, source=TARGET_IP)
        assert status == 200
        assert setup.server.counters.refused["rate"].value == 1


async def test_busy_helper_refuses_at_once(etcd_server: EtcdServer) -> None:
    async with mesh(etcd_server, max_concurrent=1) as setup:
        setup.probe.gate = trio.Event()
        first: list[int] = []

        async def first_request() -> None:
            first.append((await ask(GOOD))[0])

        setup.nursery.start_soon(first_request)
        with trio.fail_after(10):
            await setup.probe.started.wait()
        status, body = await ask(GOOD, source=TARGET_IP)
        assert status == 429 and body.startswith(b"busy: "), body
        assert setup.probe.calls == 1
        setup.probe.gate.set()
        await poll_until(lambda: first == [200], 10.0, what="the first request answered")
        assert setup.server.counters.refused["busy"].value == 1


async def test_the_same_request_twice_at_once_is_probed_twice(etcd_server: EtcdServer) -> None:
    """A requester that asks again while its first probe still runs (a starved agent
    retries) sends an equal request: both are served, neither fails with 500."""
    async with mesh(etcd_server, max_concurrent=2) as setup:
        setup.probe.gate = trio.Event()
        statuses: list[int] = []

        async def request() -> None:
            statuses.append((await ask(GOOD))[0])

        setup.nursery.start_soon(request)
        setup.nursery.start_soon(request)
        await poll_until(lambda: setup.probe.running == 2, 10.0, what="both probes running")
        setup.probe.gate.set()
        await poll_until(lambda: len(statuses) == 2, 10.0, what="both answered")
        assert statuses == [200, 200]
        assert setup.server.counters.served.value == 2


async def test_requester_concludes_from_a_real_helper(etcd_server: EtcdServer) -> None:
    """The requester's side: only `h` can help; it reaches the target's HTTP (so the
    requester's own failure was its path), then, with the target's responder gone,
    `h` fails it too (the target is down)."""

    async def read_published() -> Matrix:  # the published reports (`run` reads them)
        async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
            matrix, _ = await read_matrix([MatrixSource("c1", etcd)], now=time.time())
            return matrix

    async with mesh(etcd_server) as setup:
        counters = IndirectCounters.unregistered()
        requester = IndirectProbes(
            Target("c1", "r", REQUESTER_IP),
            live=setup.discovery.targets,
            read_matrix=read_published,
            ask=make_asker(own_ip=REQUESTER_IP, http_port=PORT, counters=counters),
            deadline_s=TIMEOUT_S + 2,
            counters=counters,
        )
        target = Target("c1", "t", TARGET_IP)
        http = PathKey("c1", "t", TargetType.NODE, Protocol.HTTP)
        [check] = await requester.check(target, [http])
        assert check.conclusion is Conclusion.PATH_BROKEN
        assert check.reachable_via == (("c1", "h"),)
        assert check.detail() == "reachable via c1/h: path from this node broken"
        assert counters.sent["answered"].value == 1
        assert requester.checks == {http: check}

        # A target registered but with nothing on its HTTP port: the helper fails too.
        async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
            dead_ip = f"127.{OCTET}.1.4"
            async with trio.open_nursery() as nursery:
                await nursery.start(Registrar(etcd, make_node("d", dead_ip), ttl_s=5).run)
                await poll_until(
                    lambda: len(setup.discovery.targets()) == 4, 10.0, what="d registered"
                )
                dead_http = PathKey("c1", "d", TargetType.NODE, Protocol.HTTP)
                [down] = await requester.check(Target("c1", "d", dead_ip), [dead_http])
                nursery.cancel_scope.cancel()
        assert down.conclusion is Conclusion.TARGET_DOWN, down
        assert down.failed_via == (("c1", "h"),)
        assert counters.checks["path-broken"].value == 1
        assert counters.checks["target-down"].value == 1


async def test_extra_route_gets_its_budget_and_a_failing_handler_gets_500() -> None:
    """The responder's hook: a handler may take its budget past the read deadline; one
    that raises is answered 500 and the responder goes on serving."""
    ip = f"127.{OCTET}.3.1"

    async def slow(request: RouteRequest) -> Reply:
        await trio.sleep(0.6)  # past the read deadline (0.3 s), within the budget
        return text_reply(418, f"{request.method} {request.query} from {request.peer_ip}")

    async def broken(request: RouteRequest) -> Reply:
        raise RuntimeError("a bug")

    routes = [ExtraRoute("/slow", slow, 5.0), ExtraRoute("/broken", broken, 1.0)]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            functools.partial(serve_responder, read_timeout_s=0.3, extra_routes=routes), ip, 0
        )
        with trio.fail_after(10):
            status, body = await http_get(
                ip, port, "/slow?a=1", source_ip=STRANGER_IP, max_body_bytes=99
            )
            assert (status, body) == (418, f"GET a=1 from {STRANGER_IP}\n".encode())
            status, body = await http_get(ip, port, "/broken", source_ip=None, max_body_bytes=99)
            assert (status, body) == (500, b"internal error\n")
            status, _ = await http_get(ip, port, "/hello", source_ip=None, max_body_bytes=999)
            assert status == 200
        nursery.cancel_scope.cancel()
