"""Text of `meshhealth status` (pure): the shape cilium-health users read.

    Probe time:   2026-11-22T10:00:00Z
    Nodes:
      lab1/node1 (localhost):
        Host connectivity to 10.77.0.1:
          ICMP to stack:   OK, RTT=412.5µs
          HTTP to agent:   OK, RTT=1.02ms
    Cluster health:   1/2 reachable   (2026-11-22T10:00:00Z)

Input: the document of meshhealth.documents.status; "ago" times are relative to its
`generated_at`, so the text is a function of the document alone. Every line and what
`verbose` adds is described in docs/status.md.
"""

from __future__ import annotations

from collections.abc import Container

from meshhealth.cli.format_findings import finding_line
from meshhealth.cli.format_probe import format_loss
from meshhealth.documents.cluster_health import ALONE_TEXT, SOURCE_LOCAL, is_alone
from meshhealth.documents.maintenance import IN_MAINTENANCE, headline_suffix, note_text
from meshhealth.documents.status_schema import (
    AddressDocument,
    ClusterDocument,
    ClusterHealthDocument,
    EtcdDocument,
    NodeDocument,
    PathDocument,
    PrimaryAddressDocument,
    ProbePlanDocument,
    StatusDocument,
)
from meshhealth.terminal_text import escape_lines
from meshhealth.timefmt import format_age, format_duration, parse_iso_time

ICMP_LABEL, HTTP_LABEL = "ICMP to stack:   ", "HTTP to agent:   "
UDP_LABEL = "UDP to agent:    "


def _ago(stamp: str | None, now: float | None) -> str:
    if stamp is None:
        return "never"
    if now is None:
        return stamp
    return f"{format_age(now - parse_iso_time(stamp))} ago"


def _suspect_for(path: PathDocument, now: float | None) -> str:
    """` (suspect for 4s)`: a failing path whose suspicion time is not over yet."""
    if path.get("state") != "suspect":
        return ""
    since = path.get("state_since")
    if since is None:
        return " (suspect)"
    if now is None:
        return f" (suspect since {since})"
    return f" (suspect for {format_age(max(0.0, now - parse_iso_time(since)))})"


def path_line(path: PathDocument, *, verbose: bool, now: float | None) -> str:
    """`OK, RTT=412.5µs` or the failure text (`(suspect for 4s)` while the path is
    suspect); verbose adds the window's figures (and the hop count when known)."""
    head = str(path["text"]) + _suspect_for(path, now)
    if path["status"] == "ok" and path["latency_s"] is not None:
        head += f", RTT={format_duration(path['latency_s'])}"
    indirect = path.get("indirect")
    if indirect is not None:  # what helpers found (indirect probes)
        head += f"; {indirect['detail']}"
    if not verbose or path["last_probed"] is None:
        return head
    parts = [head]
    hops = path.get("hops")
    if hops is not None:  # ICMP: from the newest reply's TTL (1: the same link)
        parts.append(f"hops={hops}")
    parts.append(f"loss={format_loss(path['loss'])}")
    for name, value in (("p50", path["rtt_p50_s"]), ("p95", path["rtt_p95_s"])):
        if value is not None:
            parts.append(f"{name}={format_duration(value)}")
    parts.append(f"last probed {_ago(path['last_probed'], now)}")
    failures = path["consecutive_failures"]
    if failures:
        parts.append(f"{failures} failed in a row, last OK {_ago(path['last_success'], now)}")
    return ", ".join(parts)


def node_title(node: NodeDocument, in_maintenance: Container[str] = ()) -> str:
    title = f"{node['cluster']}/{node['name']}"
    if title in in_maintenance:
        title += f" ({IN_MAINTENANCE})"
    if "agent_down_since" in node:
        return f"{title} (agent down since {node['agent_down_since']}: lease expired)"
    return f"{title} (localhost)" if node["is_local"] else title


def _one_address_lines(
    heading: str, address: AddressDocument, indent: str, *, verbose: bool, now: float | None
) -> list[str]:
    lines = [f"{indent}{heading} to {address['ip']}:"]
    for label, path in ((ICMP_LABEL, address["icmp"]), (HTTP_LABEL, address["http"])):
        lines.append(f"{indent}  {label}{path_line(path, verbose=verbose, now=now)}")
    df = address.get("icmp_df")
    if df is not None:
        label = df_label(df["size_bytes"])
        lines.append(f"{indent}  {label}{path_line(df, verbose=verbose, now=now)}")
    udp = address.get("udp")
    if udp is not None:
        lines.append(f"{indent}  {UDP_LABEL}{path_line(udp, verbose=verbose, now=now)}")
    for tcp in address.get("tcp", []):
        label = tcp_label(tcp["port"])
        lines.append(f"{indent}  {label}{path_line(tcp, verbose=verbose, now=now)}")
    return lines


def tcp_label(port: int) -> str:
    """`TCP 10250:       ` (a TCP connect probe's line), as wide as the other labels."""
    return f"TCP {port}:".ljust(len(ICMP_LABEL) - 1) + " "


def df_label(size_bytes: int) -> str:
    """`ICMP 1500 B DF:  ` (the MTU probe's line), as wide as the other labels."""
    size = f"{size_bytes} B " if size_bytes else ""
    return f"ICMP {size}DF:".ljust(len(ICMP_LABEL) - 1) + " "


def _failed(address: AddressDocument) -> bool:
    return any(address[p]["status"] not in ("ok", "unknown") for p in ("icmp", "http"))


def _address_lines(
    heading: str, address: PrimaryAddressDocument, *, verbose: bool, now: float | None
) -> list[str]:
    lines = _one_address_lines(
        heading, address["primary_address"], "    ", verbose=verbose, now=now
    )
    for secondary in address.get("secondary_addresses", []):
        if verbose or _failed(secondary):
            lines += _one_address_lines(
                "Secondary connectivity", secondary, "      ", verbose=verbose, now=now
            )
    return lines


def _header_lines(doc: StatusDocument, *, verbose: bool, now: float | None) -> list[str]:
    probe_time = doc["probe_time"]
    if probe_time is None:
        waiting = "first round running" if doc["round"]["running"] else "no round yet"
        probe_time = f"never ({waiting})"
    lines = [f"Probe time:   {probe_time}"]
    if verbose:
        round_doc = doc["round"]
        details = []
        if round_doc["last_duration_s"] is not None:
            details.append(f"last round took {format_duration(round_doc['last_duration_s'])}")
        if round_doc["running"]:
            details.append("a round is running")
        suffix = f"   ({', '.join(details)})" if details else ""
        lines.append(f"Probe interval:   {format_duration(doc['probe_interval_s'])}{suffix}")
        lines.append(f"etcd:   {_etcd_state(doc['etcd'])}")
    return lines


def _etcd_state(etcd: EtcdDocument) -> str:
    """`connected since T via URL` / `unreachable since T (error)`."""
    state = "connected" if etcd["up"] else "unreachable"
    since = f" since {etcd['since']}" if etcd["since"] else ""
    if etcd["up"] and etcd.get("endpoint"):
        since += f" via {etcd['endpoint']}"
    error = f" ({etcd['last_error']})" if etcd.get("last_error") else ""
    return f"{state}{since}{error}"


def _table_lines(nodes: list[NodeDocument]) -> list[str]:
    """`cilium status --verbose`'s table: Name, IP, Node, Endpoints."""
    rows = [("Name", "IP", "Node", "Endpoints")]
    for node in nodes:
        endpoint_state = node["health_endpoint_state"] or "-"
        ip = node["host"]["primary_address"]["ip"]
        rows.append((node_title(node), ip, node["host_state"], endpoint_state))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    padded = [
        [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)] for row in rows
    ]
    return ["  " + "   ".join([*cells, row[3]]) for cells, row in zip(padded, rows, strict=True)]


def cluster_line(cluster: ClusterDocument) -> str:
    """`lab2 (id 200):   etcd connected, 2 nodes` (one line of the Clusters section)."""
    tags = ["local"] if cluster["local"] else []
    if cluster["id"] is not None:
        tags.append(f"id {cluster['id']}")
    head = cluster["name"] + (f" ({', '.join(tags)})" if tags else "")
    count = cluster["node_count"]
    nodes = f"{count} node{'s' if count != 1 else ''}"
    state = cluster["state"]
    if state == "refused":
        body = f"refused: {cluster['error']}"
    elif state == "waiting":
        body = f"waiting: {cluster['error'] or 'not checked yet'}"
    elif state == "etcd_down":
        body = f"etcd {_etcd_state(cluster['etcd'])}: {nodes} probed from the last known list"
    else:
        body = f"etcd connected, {nodes}"
    return f"  {head}:   {body}"


def _observers(verdict: ClusterHealthDocument) -> str:
    low, median = verdict["observers_min"], verdict["observers_median"]
    if low is None or median is None:
        return ""
    if low == median:
        return f" ({low} observer{'s' if low != 1 else ''} each)"
    return f" ({low}+ observers each, median {median:g})"


def _counts(verdict: ClusterHealthDocument) -> tuple[str, str]:
    """`2/3 reachable`, and `, 1 unreachable, 1 suspect, 1 unknown, 1 in maintenance`
    (empty when none)."""
    others = [
        f"{count} {state}"
        for state, count in (
            ("unreachable", verdict["unreachable"]),
            ("suspect", verdict["suspect"]),
            ("unknown", verdict["unknown"]),
        )
        if count
    ]
    more = f", {', '.join(others)}" if others else ""
    more += headline_suffix(verdict.get("maintenance", 0))  # an older agent: not said
    return f"{verdict['reachable']}/{verdict['total']} reachable", more


def maintenance_lines(verdict: ClusterHealthDocument) -> list[str]:
    """`  In maintenance:   lab1/node2 in maintenance (unreachable) until T (1h59m left)
    by ops: reboot`, one per node of the verdict in planned maintenance."""
    return [
        f"  In maintenance:   {note_text(node)}" for node in verdict.get("maintenance_nodes") or ()
    ]


def summary_verdict_text(verdict: ClusterHealthDocument, now: float | None) -> str:
    """`998/1000 reachable (5 observers each); lab1/node3 cannot reach out
    (egress-blocked)   (aggregator lab1/node2, updated 3s ago)`: an aggregator's verdict,
    as `status` and `watch` print it after their `Cluster health:` label."""
    if verdict["aggregator"] is None:  # built by this reader from the reports in etcd
        by = f"every node's report in etcd, {_ago(verdict['updated_at'], now)}"
    else:
        by = f"aggregator {verdict['aggregator']}, updated {_ago(verdict['updated_at'], now)}"
    if is_alone(verdict):
        return f"{ALONE_TEXT}   ({by})"
    reachable, more = _counts(verdict)
    discounted = verdict.get("discounted_text")
    note = f"; {discounted}" if discounted else ""
    return f"{reachable}{_observers(verdict)}{more}{note}   ({by})"


def verdict_line(
    verdict: ClusterHealthDocument, doc: StatusDocument, *, local: bool, now: float | None
) -> str:
    """`Cluster health:   998/1000 reachable (5 observers each)   (aggregator lab1/node2,
    updated 3s ago)`; without a summary, this node's own view, labelled as such."""
    head = "Cluster health:" if local else f"Cluster health {verdict['cluster']}:"
    if verdict["source"] != SOURCE_LOCAL:
        return f"{head}   {summary_verdict_text(verdict, now)}"
    when = doc["probe_time"] or "never probed"
    reachable, more = _counts(verdict)
    return f"{head}   {reachable}{more}   (this node's own probes: no cluster summary yet; {when})"


def direct_targets_line(doc: StatusDocument, head: str) -> str:
    """`Direct targets:   6/6 reachable   (probe time)`: this node's own targets."""
    summary = doc["summary"]
    when = doc["probe_time"] or "never probed"
    suspect = summary.get("suspect", 0)
    suspects = f", {suspect} suspect" if suspect else ""
    return f"{head}:   {summary['reachable']}/{summary['total']} reachable{suspects}   ({when})"


def plan_line(plan: ProbePlanDocument) -> str:
    """`Probing 5 of 99 nodes (k=5, epoch 29458123, full mesh at ≤16 nodes)`."""
    if plan["full_mesh"]:
        return f"Probing all {plan['nodes']} nodes (full mesh at any size: --full-mesh)"
    mesh_at = max(plan["k"] + 1, plan["full_mesh_max_nodes"])
    if not plan["subset"]:
        return (
            f"Probing all {plan['nodes']} nodes (full mesh at ≤{mesh_at} nodes, "
            f"k={plan['k']} past that)"
        )
    return (
        f"Probing {plan['targets']} of {plan['nodes']} nodes (k={plan['k']}, epoch "
        f"{plan['epoch']}, full mesh at ≤{mesh_at} nodes)"
    )


def degraded_line(doc: StatusDocument) -> str | None:
    """`This node is degraded (loop-lag): event loop lagging 0.8 s; suspect own failures
    first`: the reason codes (as its report publishes them), then the reasons in words."""
    health = doc.get("local_health")
    if not health or not health.get("degraded"):
        return None
    codes = health.get("reason_codes") or []
    why = ", ".join(health.get("reasons") or []) or f"health score {health.get('score')}"
    head = f"This node is degraded ({', '.join(codes)})" if codes else "This node is degraded"
    return f"{head}: {why}; suspect own failures first"


def format_status_text(doc: StatusDocument, *, verbose: bool) -> str:
    """The whole text of `meshhealth status`, ending with a newline."""
    generated_at = doc.get("generated_at")
    now = parse_iso_time(generated_at) if generated_at else None
    # What is wrong with this node, when the cluster's verdict discounts it, comes first.
    lines = [own for v in doc.get("cluster_health") or () if (own := v.get("this_node"))]
    lines += _header_lines(doc, verbose=verbose, now=now)
    degraded = degraded_line(doc)
    if degraded is not None:
        lines.append(degraded)
    lines.append("Nodes:")
    in_maintenance = {
        node["node"]
        for verdict in doc.get("cluster_health") or ()
        for node in verdict.get("maintenance_nodes") or ()
    }
    for node in doc["nodes"]:
        lines.append(f"  {node_title(node, in_maintenance)}:")
        lines += _address_lines("Host connectivity", node["host"], verbose=verbose, now=now)
        if node["health_endpoint"] is not None:
            lines += _address_lines(
                "Endpoint connectivity", node["health_endpoint"], verbose=verbose, now=now
            )
    verdicts = doc.get("cluster_health")
    plan = doc.get("probe_plan")
    subset = plan is not None and plan["subset"]
    if verdicts and subset:  # this node's own probes are no verdict on the cluster
        verdicts = [v for v in verdicts if v["source"] == "summary"]
    if verdicts:
        local = doc["local"]["cluster"]
        for verdict in verdicts:
            lines.append(verdict_line(verdict, doc, local=verdict["cluster"] == local, now=now))
            lines += maintenance_lines(verdict)
        lines += [finding_line(finding) for finding in doc.get("findings") or []]
    if subset:  # this node's own targets, labelled apart from the cluster's verdict
        lines.append(direct_targets_line(doc, "Direct targets"))
    elif not verdicts:  # an agent from before cluster summaries
        lines.append(direct_targets_line(doc, "Cluster health"))
    if plan is not None:
        lines.append(plan_line(plan))
    if verbose and doc["nodes"]:
        lines += _table_lines(doc["nodes"])
    clusters = doc.get("clusters") or []
    if len(clusters) > 1:  # meshed: say how each cluster's etcd is doing
        lines.append("Clusters:")
        lines += [cluster_line(cluster) for cluster in clusters]
    if not doc["etcd"]["up"] and not verbose:  # verbose has its own etcd line
        lines.append(f"Warning:   etcd {_etcd_state(doc['etcd'])}: the node list may be stale")
    return escape_lines("\n".join(lines)) + "\n"  # names, reasons, errors: from peers
