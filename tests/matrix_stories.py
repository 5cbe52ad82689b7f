"""Health reports for the matrix tests: small clusters in known states (pure data)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from meshhealth.model import HealthReport, PathHealth, PlanInfo, ProbeStatus, TargetHealth

NOW = 1_795_000_000.0  # 2026-11-18T11:06:40Z; every story is seen at this time
INTERVAL_S = 10.0
OK = ProbeStatus.OK
TIMEOUT = ProbeStatus.TIMEOUT
REFUSED = ProbeStatus.REFUSED
ALL_PATHS = ("node/icmp", "node/http", "endpoint/icmp", "endpoint/http")


def paths(
    statuses: Iterable[ProbeStatus] = (OK, OK, OK, OK), rtt_s: float = 0.0004
) -> dict[str, PathHealth]:
    return {
        name: PathHealth(status, rtt_s if status is OK else None, 0.0 if status is OK else 1.0)
        for name, status in zip(ALL_PATHS, statuses, strict=False)
    }


def report(
    source: str,
    targets: Mapping[str, Mapping[str, PathHealth]],
    *,
    age_s: float = 2.0,
    interval_s: float = INTERVAL_S,
    plan: PlanInfo | None = None,
) -> HealthReport:
    cluster, node = source.split("/")
    return HealthReport(
        node=node,
        cluster=cluster,
        probe_time=NOW - age_s,
        interval_s=interval_s,
        targets=tuple(
            TargetHealth(cluster=t.split("/")[0], node=t.split("/")[1], paths=dict(p))
            for t, p in sorted(targets.items())
        ),
        plan=plan,
    )


NODES3 = ("lab1/node1", "lab1/node2", "lab1/node3")


def healthy(nodes: Iterable[str] = NODES3) -> list[HealthReport]:
    nodes = list(nodes)
    return [
        report(s, {t: paths(rtt_s=0.0004 + 0.0001 * i) for i, t in enumerate(nodes)}) for s in nodes
    ]


def node_unreachable_by_all() -> list[HealthReport]:
    """node3's link is down: node1 and node2 cannot reach it; node3 sees nobody."""
    down = paths((TIMEOUT,) * 4)
    return [
        report("lab1/node1", {"lab1/node1": paths(), "lab1/node2": paths(), "lab1/node3": down}),
        report("lab1/node2", {"lab1/node1": paths(), "lab1/node2": paths(), "lab1/node3": down}),
        report("lab1/node3", {"lab1/node1": down, "lab1/node2": down, "lab1/node3": paths()}),
    ]


def endpoint_forward_drop() -> list[HealthReport]:
    """node2 drops forwarding to its endpoint: hosts fine, node2's endpoint fails."""
    bad = paths((OK, OK, TIMEOUT, TIMEOUT))
    return [
        report(s, {"lab1/node1": paths(), "lab1/node2": bad if s != "lab1/node2" else paths(),
                   "lab1/node3": paths()})
        for s in NODES3
    ]  # fmt: skip


def stale_and_missing() -> list[HealthReport]:
    """node2's report is 100 s old (stale after 60 s + 3 intervals + 5 s = 95 s); node3
    is probed but never reported; a remote cluster's node has no endpoint and one path
    not probed yet."""
    remote = {
        "node/icmp": PathHealth(OK, 0.0011, 0.0),
        "node/http": PathHealth(ProbeStatus.UNKNOWN, None, 0.0),
    }
    return [
        report("lab1/node1", {"lab1/node1": paths(), "lab1/node2": paths(),
                              "lab1/node3": paths(), "lab2/node1": remote}),
        report("lab1/node2", {"lab1/node1": paths(), "lab1/node2": paths()}, age_s=100.0),
    ]  # fmt: skip


def meshed() -> list[HealthReport]:
    """Two clusters of two nodes, all healthy."""
    return healthy(("lab1/node1", "lab1/node2", "lab2/node1", "lab2/node2"))


NODES6 = tuple(f"lab1/node{i}" for i in range(1, 7))
EPOCH = int(NOW // 60)


def subset() -> list[HealthReport]:
    """Subset probing, k = 2 over 6 nodes (full mesh only up to 2 nodes here): each node
    probes itself and the next two, node3's path to node4's endpoint fails, node6's
    report is stale, so node1 and node2 are left with one fresh observer each."""
    plan = PlanInfo(EPOCH, 2, 6, full_mesh=False, full_mesh_max_nodes=2, nodes=6)
    reports = []
    for i, source in enumerate(NODES6):
        targets = {t: paths() for t in (source, NODES6[(i + 1) % 6], NODES6[(i + 2) % 6])}
        if source == "lab1/node3":
            targets["lab1/node4"] = paths((OK, OK, TIMEOUT, TIMEOUT))
        age_s = 150.0 if source == "lab1/node6" else 2.0
        reports.append(report(source, targets, age_s=age_s, plan=plan))
    return reports


def subset_healthy() -> list[HealthReport]:
    """Subset probing as in `subset`, all fresh and healthy: every node has its 2
    observers (not one of STORIES: the matrix tests use it)."""
    plan = PlanInfo(EPOCH, 2, 6, full_mesh=False, full_mesh_max_nodes=2, nodes=6)
    return [
        report(source, {NODES6[(i + j) % 6]: paths() for j in range(3)}, plan=plan)
        for i, source in enumerate(NODES6)
    ]


def suspect_and_degraded() -> list[HealthReport]:
    """node1 lost one ICMP probe to node3 (its verdict: suspect); node2, degraded since
    30 s (its event loop lags), fails everyone's HTTP (its own slowness)."""
    lost = dict(paths())
    lost["node/icmp"] = PathHealth(TIMEOUT, None, 0.1, state="suspect", state_since=NOW - 3)
    slow = paths((OK, TIMEOUT, OK, TIMEOUT))
    slow = {
        name: PathHealth(p.status, p.rtt_s, p.loss, "unreachable", NOW - 20)
        if p.status is TIMEOUT
        else p
        for name, p in slow.items()
    }
    degraded = report("lab1/node2", {"lab1/node1": slow, "lab1/node2": paths(), "lab1/node3": slow})
    degraded = replace(degraded, health_score=3, degraded_since=NOW - 30)
    return [
        report("lab1/node1", {"lab1/node1": paths(), "lab1/node2": paths(), "lab1/node3": lost}),
        degraded,
        report("lab1/node3", {"lab1/node1": paths(), "lab1/node2": paths(),
                              "lab1/node3": paths()}),
    ]  # fmt: skip


def _failed(state: str = "unreachable") -> dict[str, PathHealth]:
    """Every path times out, with the source's suspicion verdict `state`."""
    return {
        name: replace(p, state=state, state_since=NOW - 30)
        for name, p in paths((TIMEOUT,) * 4).items()
    }


def full_mesh(
    fails: Callable[[str, str], bool],
    *,
    degraded: Iterable[str] = (),
    nodes: Iterable[str] = NODES6,
) -> list[HealthReport]:
    """`nodes` probing each other; `fails(source, target)` says which cells fail (past
    suspicion); the `degraded` sources say so in their reports (targets-failing)."""
    nodes = tuple(nodes)
    reports = []
    for source in nodes:
        targets = {t: _failed() if t != source and fails(source, t) else paths() for t in nodes}
        r = report(source, targets)
        if source in degraded:
            r = replace(
                r, health_score=4, degraded_since=NOW - 25, degraded_reasons=("targets-failing",)
            )
        reports.append(r)
    return reports


def egress_blocked() -> list[HealthReport]:
    """node3 cannot send new traffic out: its own probes fail to every target, while the
    other five reach it (its replies still leave)."""
    return full_mesh(lambda s, t: s == "lab1/node3", degraded=["lab1/node3"])


def isolated() -> list[HealthReport]:
    """node4 is cut off: it reaches nobody, nobody reaches it."""
    return full_mesh(lambda s, t: "lab1/node4" in (s, t), degraded=["lab1/node4"])


GROUP_A = ("lab1/node1", "lab1/node2")


def two_groups() -> list[HealthReport]:
    """A partition into {node1, node2} and {node3 .. node6}."""
    return full_mesh(lambda s, t: (s in GROUP_A) != (t in GROUP_A), degraded=GROUP_A)


def agent_down_and_path_drop() -> list[HealthReport]:
    """node2's agent is killed (its last report, 100 s old, is stale; its NodeIP answers
    ICMP, HTTP is refused), and node4's path to node6 drops everything."""
    agent_gone = dict(paths((OK, REFUSED, OK, REFUSED)))
    agent_gone = {
        name: replace(p, state="unreachable", state_since=NOW - 30) if p.status is not OK else p
        for name, p in agent_gone.items()
    }
    reports = []
    for source in NODES6:
        targets = {t: paths() for t in NODES6}
        if source != "lab1/node2":
            targets["lab1/node2"] = agent_gone
        if source == "lab1/node4":
            targets["lab1/node6"] = _failed()
        reports.append(report(source, targets, age_s=100.0 if source == "lab1/node2" else 2.0))
    return reports


# name -> reports; tests/golden/matrix_NAME.txt is the text of each
STORIES: dict[str, Callable[[], list[HealthReport]]] = {
    "healthy": healthy,
    "node_unreachable": node_unreachable_by_all,
    "endpoint_forward_drop": endpoint_forward_drop,
    "stale": stale_and_missing,
    "meshed": meshed,
    "subset": subset,
    "suspect_and_degraded": suspect_and_degraded,
    "egress_blocked": egress_blocked,
}
