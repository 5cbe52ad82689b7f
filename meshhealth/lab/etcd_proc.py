"""One etcd per cluster, inside the fabric namespace, on the cluster's fabric address."""

from __future__ import annotations

import shutil
import time

from meshhealth import defaults
from meshhealth.lab import netns_ops
from meshhealth.lab import plan as P
from meshhealth.lab.processes import start_detached
from meshhealth.lab.state import ProcessRecord


def start_etcd(fabric_ns: str, cluster: P.ClusterPlan) -> ProcessRecord:
    """Start (or restart, on the same data dir) the cluster's etcd; does not wait."""
    etcd = shutil.which("etcd") or "etcd"
    cluster.dir.mkdir(parents=True, exist_ok=True)
    cluster.etcd_dir.parent.mkdir(parents=True, exist_ok=True)
    return start_detached(
        fabric_ns, P.etcd_argv(cluster, etcd), cluster.etcd_log, nice=defaults.LAB_ETCD_NICE
    )


def etcd_healthy(fabric_ns: str, cluster: P.ClusterPlan, timeout_s: float = 1.0) -> bool:
    return netns_ops.tcp_answers(
        fabric_ns, cluster.etcd_ip, P.ETCD_CLIENT_PORT, "/health", timeout_s
    )


def wait_etcd(fabric_ns: str, cluster: P.ClusterPlan, rec: ProcessRecord, timeout_s: float) -> None:
    """Poll etcd's /health until it answers; raise with the log's tail when it does not."""
    from meshhealth.lab.processes import is_alive

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if etcd_healthy(fabric_ns, cluster):
            return
        if not is_alive(rec):
            raise RuntimeError(f"etcd of {cluster.name} exited: {log_tail(cluster)}")
        time.sleep(0.1)
    raise RuntimeError(
        f"etcd of {cluster.name} did not answer on {cluster.etcd_url} within "
        f"{timeout_s:g}s: {log_tail(cluster)}"
    )


def log_tail(cluster: P.ClusterPlan) -> str:
    try:
        lines = cluster.etcd_log.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return f"no log at {cluster.etcd_log}"
    return f"{lines[-1] if lines else '(empty log)'} (log: {cluster.etcd_log})"
