"""A real agent's /metrics has the process, GC and trio task series
(meshhealth/runtime_metrics.py, docs/metrics.md "Process metrics") with plausible values."""

from __future__ import annotations

import time
from pathlib import Path

from tests.agent.test_metrics import parse_exposition
from tests.agent_cluster import AgentCluster
from tests.plugins.etcd_server import EtcdServer


def test_a_real_agent_exposes_its_process_and_trio_tasks(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        agent = cluster.start("n1")
        text = agent.metrics_text()
        samples = parse_exposition(text)  # well-formed: every sample after its TYPE
        assert "# TYPE process_cpu_seconds_total counter" in text
        assert "# TYPE python_gc_collections_total counter" in text
        assert "# TYPE meshhealth_trio_tasks gauge" in text
        assert samples["process_resident_memory_bytes"] > 1_000_000
        assert samples["process_virtual_memory_bytes"] > samples["process_resident_memory_bytes"]
        assert time.time() - 3600 < samples["process_start_time_seconds"] <= time.time()
        assert samples["process_cpu_seconds_total"] > 0
        assert 0 < samples["process_open_fds"] <= samples["process_max_fds"]
        # The agent's services (prober, publisher, servers, watches) are trio tasks.
        assert samples["meshhealth_trio_tasks"] > 3
        for generation in ("0", "1", "2"):
            for family in (
                "python_gc_objects_collected_total",
                "python_gc_objects_uncollectable_total",
                "python_gc_collections_total",
            ):
                assert samples[f'{family}{{generation="{generation}"}}'] >= 0
        # Read at each scrape: the CPU time never goes down.
        assert (
            parse_exposition(agent.metrics_text())["process_cpu_seconds_total"]
            >= (samples["process_cpu_seconds_total"])
        )
