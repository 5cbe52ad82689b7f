"""The agent's components against a real etcd: every metric counts where it happens
(handles given to components) or is read at scrape time; nothing copies counters."""

from __future__ import annotations

import re

import trio

from meshhealth.agent.components import build_components
from meshhealth.agent.config.agent_config import resolve_config
from meshhealth.kvstore import open_etcd
from meshhealth.wire import keys
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer


def sample(text: str, series: str) -> float | None:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return None if match is None else float(match.group(1))


async def test_metrics_count_where_things_happen(etcd_server: EtcdServer) -> None:
    config = resolve_config(
        {"cluster": "c1", "node": "n1", "node_ip": "127.0.0.1", "health_mode": "none"}, {}, {}
    )
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        parts = build_components(config, etcd, pinger=None)
        expose = parts.registry.expose
        assert sample(expose(), 'meshhealth_etcd_up{cluster="c1"}') == 0  # not checked yet
        async with trio.open_nursery() as nursery:
            await nursery.start(parts.registrar.run)
            await nursery.start(parts.discovery.run)
            await nursery.start(parts.mesh.run)
            await nursery.start(parts.publisher.run)
            # Read at scrape time: the etcd client's own state, no task copies it.
            await poll_until(lambda: etcd.health.up, 5, what="etcd up")
            assert sample(expose(), 'meshhealth_etcd_up{cluster="c1"}') == 1
            # Counted by discovery in its handle: a value in etcd that does not decode.
            await etcd.put(keys.ip_prefix("c1") + "10.9.9.9", b"garbage")
            invalid_ip = 'meshhealth_kvstore_invalid_values_total{kind="ip"}'
            await poll_until(lambda: sample(expose(), invalid_ip) == 1, 5, what="counted")
            # Counted by the mesh in its handle: the cluster-config entry it created.
            await poll_until(lambda: parts.mesh.config_writes == 1, 5, what="cluster-config")
            writes = 'meshhealth_kvstore_writes_total{key_kind="cluster-config"}'
            assert sample(expose(), writes) == 1
            # A round (this node only: loopback, nothing listens on the port) goes through
            # the sink: the round counter, the publisher's write under the lease, and no
            # feed message, since nobody watches.
            await nursery.start(parts.loop.run)
            await poll_until(lambda: parts.publisher.writes == 1, 10, what="health written")
            text = expose()
            assert (
                sample(text, "meshhealth_rounds_total") == parts.loop.progress.rounds_finished >= 1
            )
            health_writes = 'meshhealth_kvstore_writes_total{key_kind="health"}'
            assert sample(text, health_writes) == 1
            assert parts.feed.stats.messages_built == 0
            # One record of results: the agent's, which the status and the feed read.
            assert parts.agent.results.summaries
            assert parts.status.results is parts.agent.results is parts.feed.results
            nursery.cancel_scope.cancel()
