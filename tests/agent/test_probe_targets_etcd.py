"""ProbeTargets on a real etcd: the plan covers the discovered nodes, and probing goes
on with the last node list while etcd is down."""

from __future__ import annotations

import time

import trio

from meshhealth.agent.membership.clustermesh import ClusterMesh
from meshhealth.agent.membership.discovery import Discovery
from meshhealth.agent.membership.probe_targets import PlanSettings, ProbeTargets
from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.kvstore import open_etcd
from meshhealth.model import ClusterConfig, Target
from tests.etcd_helpers import FAST_ETCD, make_node, poll_until
from tests.plugins.etcd_server import EtcdServer

N_NODES = 24
K = 3
OWN = Target("c1", "me", "10.9.0.1", None)


async def test_the_plan_follows_discovery_and_outlives_an_etcd_outage(
    etcd_server: EtcdServer,
) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        for i in range(N_NODES):
            for key, value in registration_entries(make_node(f"n{i:02d}", f"10.0.{i}.1")):
                await etcd.put(key, value)
        discovery = Discovery({"c1": etcd})
        mesh = ClusterMesh(etcd, ClusterConfig("c1", 1), [])
        probe_targets = ProbeTargets(OWN, etcd, discovery, mesh, PlanSettings(interval_s=10.0, k=K))
        async with trio.open_nursery() as nursery:
            await nursery.start(discovery.run)
            await poll_until(
                lambda: len(probe_targets.nodes()) == N_NODES + 1, 10.0, what="every node listed"
            )
            now = time.time()
            before = probe_targets.for_round(now)
            assert before.plan.nodes == N_NODES + 1
            assert len(before.targets) == K + 1 and OWN in before.targets

            await trio.to_thread.run_sync(etcd_server.kill)
            try:
                await poll_until(lambda: not etcd.health.up, 10.0, what="etcd down")
                during = probe_targets.for_round(now)
                assert during == before  # the last node list, the same plan
                later = probe_targets.for_round(now + 60.0)  # the epoch still moves on
                assert later.plan.epoch == before.plan.epoch + 1
                assert later.plan.nodes == N_NODES + 1 and len(later.targets) == K + 1
            finally:
                await trio.to_thread.run_sync(etcd_server.start)
            nursery.cancel_scope.cancel()
