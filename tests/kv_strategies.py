"""Hypothesis strategies for valid etcd entries (canonical forms, IPv4 and IPv6)."""

from __future__ import annotations

import dataclasses
import ipaddress

from hypothesis import strategies as st

from meshhealth.model import (
    ADDRESS_FAMILIES,
    ClusterConfig,
    HealthReport,
    IPEntry,
    Node,
    PathHealth,
    PlanInfo,
    ProbeStatus,
    TargetHealth,
)
from meshhealth.terminal_text import UNSAFE_CODES
from meshhealth.wire.health import PATH_NAMES

cluster_names = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True)
_node_labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True)
node_names = (
    st.lists(_node_labels, min_size=1, max_size=5).map(".".join).filter(lambda n: len(n) <= 253)
)

ipv4s = st.ip_addresses(v=4).map(str)
ipv6s = st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None).map(str)
ips = st.one_of(ipv4s, ipv6s)


@st.composite
def cidrs(draw: st.DrawFn) -> str:
    address = draw(st.ip_addresses())
    prefix_len = draw(st.integers(0, address.max_prefixlen))
    return str(ipaddress.ip_network(f"{address}/{prefix_len}", strict=False))


times = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)
# Text a value may hold: no control or bidi characters (wire/fields.py `clean_text`).
clean_chars = st.characters(
    exclude_categories=("Cs",), exclude_characters="".join(map(chr, UNSAFE_CODES))
)
texts = st.text(clean_chars, min_size=1, max_size=40)

single_stack_nodes = st.builds(
    Node,
    name=node_names,
    cluster=cluster_names,
    node_ip=ips,
    health_ip=st.none() | ips,
    cidrs=st.lists(cidrs(), max_size=4).map(tuple),
    health_port=st.integers(1, 65535),
    version=st.text(clean_chars, max_size=20),
    started_at=times,
)


@st.composite
def dual_stack_nodes(draw: st.DrawFn) -> Node:
    """A node with secondary addresses: of the other family, health paired by family."""
    node = draw(single_stack_nodes)
    same, other = (ipv4s, ipv6s) if ":" not in node.node_ip else (ipv6s, ipv4s)
    return dataclasses.replace(
        node,
        health_ip=draw(st.none() | same),
        node_ip_secondary=draw(other),
        health_ip_secondary=draw(st.none() | other),
    )


nodes = st.one_of(single_stack_nodes, dual_stack_nodes())

ip_entries = st.builds(
    IPEntry,
    ip=ips,
    host_ip=ips,
    node=node_names,
    identity=st.integers(1, 2**32 - 1),
    labels=st.lists(texts, max_size=4).map(tuple),
)

cluster_configs = st.builds(
    ClusterConfig,
    name=cluster_names,
    id=st.integers(1, 255),
    capabilities=st.lists(texts, max_size=4).map(tuple),
)

path_healths = st.builds(
    PathHealth,
    status=st.sampled_from(ProbeStatus),
    rtt_s=st.none() | st.floats(0, 30, allow_nan=False),
    loss=st.floats(0, 1, allow_nan=False),
)

target_healths = st.builds(
    TargetHealth,
    cluster=cluster_names,
    node=node_names,
    paths=st.dictionaries(st.sampled_from(PATH_NAMES), path_healths, max_size=4),
    secondary_paths=st.dictionaries(st.sampled_from(PATH_NAMES), path_healths, max_size=4),
    secondary_family=st.none() | st.sampled_from(ADDRESS_FAMILIES),
)

plan_infos = st.builds(
    PlanInfo,
    epoch=st.integers(0, 2**40),
    k=st.integers(1, 64),
    rotation_rounds=st.integers(1, 100),
    full_mesh=st.booleans(),
    full_mesh_max_nodes=st.integers(0, 64),
    nodes=st.integers(1, 10_000),
)

health_reports = st.builds(
    HealthReport,
    node=node_names,
    cluster=cluster_names,
    probe_time=times,
    interval_s=st.floats(0.001, 3600, allow_nan=False),
    targets=st.lists(target_healths, max_size=5, unique_by=lambda t: (t.cluster, t.node)).map(
        tuple
    ),
    plan=st.none() | plan_infos,
)

entries = st.one_of(nodes, ip_entries, cluster_configs, health_reports)
