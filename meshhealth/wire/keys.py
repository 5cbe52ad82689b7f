"""The etcd key layout: build and parse keys. Pure, no I/O.

    meshhealth/state/nodes/v1/<cluster>/<node>     Node            (node lease)
    meshhealth/state/ip/v1/<cluster>/<ip>          IPEntry         (node lease)
    meshhealth/state/health/v1/<cluster>/<node>    HealthReport    (node lease)
    meshhealth/state/retained/v1/<cluster>/<node>  RetainedNode    (no lease)
    meshhealth/state/rollup/v1/<cluster>/<node>    NodeRollups     (no lease)
    meshhealth/state/maintenance/v1/<cluster>/<node>  MaintenanceWindow (its own lease)
    meshhealth/state/aggregator/v1/<cluster>       AggregatorClaim (the holder's lease)
    meshhealth/state/summary/v1/<cluster>          ClusterSummary  (the holder's lease)
    meshhealth/state/events/v1/<cluster>/<id>      FindingEvent    (no lease)
    meshhealth/cluster-config/<cluster>            ClusterConfig   (no lease)

Builders validate their inputs and raise ValueError; `parse_key` raises InvalidKey (a
ValueError) with a message that names the key. See docs/kvstore.md.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass

PREFIX = "meshhealth/"
KEY_VERSION = "v1"  # the version segment of the state keys

# Cilium limits cluster names to 32 characters.
MAX_CLUSTER_NAME_CHARS = 32
MAX_NODE_LABEL_CHARS = 63
MAX_NODE_NAME_CHARS = 253
# Longest key text quoted in an error message.
_MAX_QUOTED_KEY_CHARS = 200

_CLUSTER_NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?")
_NODE_LABEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
# A finding event's id: its opening time in unix milliseconds (13 digits, so keys sort by
# time), '-', and 12 hex digits of its finding's identity (meshhealth.wire.event).
_EVENT_ID_RE = re.compile(r"[0-9]{13}-[0-9a-f]{12}")


class InvalidKey(ValueError):
    """A key that is not one of meshhealth's (the message names the key)."""


class KeyKind(enum.StrEnum):
    NODE = "nodes"
    IP = "ip"
    HEALTH = "health"
    RETAINED = "retained"
    ROLLUP = "rollup"
    MAINTENANCE = "maintenance"
    CLUSTER_CONFIG = "cluster-config"
    AGGREGATOR = "aggregator"
    SUMMARY = "summary"
    EVENT = "events"


_STATE_KINDS = (
    KeyKind.NODE,
    KeyKind.IP,
    KeyKind.HEALTH,
    KeyKind.RETAINED,
    KeyKind.EVENT,
    KeyKind.ROLLUP,
    KeyKind.MAINTENANCE,
)
# One entry per cluster: `state/<kind>/v1/<cluster>`, no name segment.
_CLUSTER_KINDS = (KeyKind.AGGREGATOR, KeyKind.SUMMARY)


@dataclass(frozen=True, slots=True)
class ParsedKey:
    kind: KeyKind
    cluster: str
    # node name (NODE, HEALTH, RETAINED, ROLLUP, MAINTENANCE), canonical ip (IP), event
    # id (EVENT), None (CLUSTER_CONFIG, AGGREGATOR, SUMMARY)
    name: str | None


def validate_cluster_name(name: str) -> str:
    """Return `name` if it is a valid cluster name, else raise ValueError.

    Lowercase a-z, 0-9 and '-', starting and ending with a letter or digit, 1..32 chars.
    """
    if not isinstance(name, str):
        raise ValueError(f"cluster name must be a string, got {type(name).__name__}")
    if not _CLUSTER_NAME_RE.fullmatch(name):
        raise ValueError(
            f"invalid cluster name {_quote(name)}: use 1..{MAX_CLUSTER_NAME_CHARS} lowercase "
            "letters, digits and '-', starting and ending with a letter or digit"
        )
    return name


def validate_node_name(name: str) -> str:
    """Return `name` if it is a valid node name, else raise ValueError.

    A lowercase DNS name: dot-separated labels of a-z, 0-9 and '-' (each 1..63 chars,
    starting and ending with a letter or digit), 253 chars in all at most.
    """
    if not isinstance(name, str):
        raise ValueError(f"node name must be a string, got {type(name).__name__}")
    if len(name) > MAX_NODE_NAME_CHARS:
        raise ValueError(
            f"invalid node name {_quote(name)}: longer than {MAX_NODE_NAME_CHARS} characters"
        )
    if not name or not all(_NODE_LABEL_RE.fullmatch(label) for label in name.split(".")):
        raise ValueError(
            f"invalid node name {_quote(name)}: use lowercase DNS labels (a-z, 0-9, '-', "
            f"1..{MAX_NODE_LABEL_CHARS} chars each, starting and ending with a letter or "
            "digit) separated by dots"
        )
    return name


def validate_event_id(event_id: str) -> str:
    """Return `event_id` if it is a finding event's id (`1795000000000-0123456789ab`),
    else raise ValueError."""
    if not isinstance(event_id, str) or not _EVENT_ID_RE.fullmatch(event_id):
        raise ValueError(
            f"invalid event id {_quote(event_id)}: expected 13 digits (unix ms), '-' and "
            "12 lowercase hex digits"
        )
    return event_id


def canonical_ip(ip: str) -> str:
    """The canonical text of an IP address (IPv6 compressed); ValueError when invalid.

    Scoped addresses (`fe80::1%eth0`) and IPv4-mapped IPv6 addresses are refused: they
    have no single meaning across nodes (use the plain IPv4 form).
    """
    if not isinstance(ip, str):
        raise ValueError(f"IP address must be a string, got {type(ip).__name__}")
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"invalid IP address {_quote(ip)}") from None
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            raise ValueError(f"invalid IP address {_quote(ip)}: scoped addresses not allowed")
        if address.ipv4_mapped is not None:
            raise ValueError(
                f"invalid IP address {_quote(ip)}: IPv4-mapped, use {address.ipv4_mapped}"
            )
    return str(address)


def node_key(cluster: str, node: str) -> str:
    return f"{nodes_prefix(cluster)}{validate_node_name(node)}"


def ip_key(cluster: str, ip: str) -> str:
    return f"{ip_prefix(cluster)}{canonical_ip(ip)}"


def health_key(cluster: str, node: str) -> str:
    return f"{health_prefix(cluster)}{validate_node_name(node)}"


def retained_key(cluster: str, node: str) -> str:
    return f"{retained_prefix(cluster)}{validate_node_name(node)}"


def rollup_key(cluster: str, node: str) -> str:
    """`node`'s roll-ups of its own paths (wire/rollup.py), for `meshhealth report`."""
    return f"{rollup_prefix(cluster)}{validate_node_name(node)}"


def maintenance_key(cluster: str, node: str) -> str:
    """A planned maintenance window of `node` (under the window's own lease)."""
    return f"{maintenance_prefix(cluster)}{validate_node_name(node)}"


def cluster_config_key(cluster: str) -> str:
    return f"{cluster_config_prefix()}{validate_cluster_name(cluster)}"


def aggregator_key(cluster: str) -> str:
    """Who aggregates `cluster`'s health reports (held under the holder's lease)."""
    return _state_prefix(KeyKind.AGGREGATOR, None) + validate_cluster_name(cluster)


def summary_key(cluster: str) -> str:
    """`cluster`'s summary: the verdict and findings its aggregator publishes."""
    return _state_prefix(KeyKind.SUMMARY, None) + validate_cluster_name(cluster)


def event_key(cluster: str, event_id: str) -> str:
    """One finding event of `cluster`'s timeline (no lease: it outlives its writer)."""
    return f"{events_prefix(cluster)}{validate_event_id(event_id)}"


def _state_prefix(kind: KeyKind, cluster: str | None) -> str:
    base = f"{PREFIX}state/{kind.value}/{KEY_VERSION}/"
    if cluster is None:
        return base
    return f"{base}{validate_cluster_name(cluster)}/"


def nodes_prefix(cluster: str | None = None) -> str:
    """Prefix of the node entries of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.NODE, cluster)


def ip_prefix(cluster: str | None = None) -> str:
    """Prefix of the ip -> identity entries of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.IP, cluster)


def health_prefix(cluster: str | None = None) -> str:
    """Prefix of the health entries of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.HEALTH, cluster)


def retained_prefix(cluster: str | None = None) -> str:
    """Prefix of the retained node entries of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.RETAINED, cluster)


def events_prefix(cluster: str | None = None) -> str:
    """Prefix of the finding events of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.EVENT, cluster)


def rollup_prefix(cluster: str | None = None) -> str:
    """Prefix of the roll-up entries of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.ROLLUP, cluster)


def maintenance_prefix(cluster: str | None = None) -> str:
    """Prefix of the maintenance windows of `cluster` (of all clusters when None)."""
    return _state_prefix(KeyKind.MAINTENANCE, cluster)


def cluster_config_prefix() -> str:
    return f"{PREFIX}{KeyKind.CLUSTER_CONFIG.value}/"


def parse_key(key: str | bytes) -> ParsedKey:
    """Parse one of meshhealth's keys; InvalidKey (naming the key) for anything else.

    The parts must be in the canonical form the builders produce (an IP key with
    `::0:1` instead of `::1` is refused), so one entry has exactly one key.
    """
    if isinstance(key, bytes | bytearray | memoryview):
        try:
            text = bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidKey(f"invalid key {_quote(bytes(key))}: not UTF-8") from None
    elif isinstance(key, str):
        text = key
    else:
        raise InvalidKey(f"invalid key {_quote(key)}: not a string")
    try:
        return _parse_text(text)
    except ValueError as error:
        raise InvalidKey(f"invalid key {_quote(text)}: {error}") from None


def _parse_text(key: str) -> ParsedKey:
    if not key.startswith(PREFIX):
        raise ValueError(f"does not start with {PREFIX!r}")
    parts = key[len(PREFIX) :].split("/")
    if parts[0] == KeyKind.CLUSTER_CONFIG.value:
        if len(parts) != 2:
            raise ValueError(f"expected {PREFIX}cluster-config/<cluster>")
        return ParsedKey(KeyKind.CLUSTER_CONFIG, validate_cluster_name(parts[1]), None)
    if parts[0] != "state":
        raise ValueError("expected 'state/' or 'cluster-config/' after the prefix")
    state_kinds = (*_STATE_KINDS, *_CLUSTER_KINDS)
    if len(parts) < 2 or parts[1] not in {kind.value for kind in state_kinds}:
        kinds = ", ".join(kind.value for kind in state_kinds)
        raise ValueError(f"unknown entry kind, expected one of: {kinds}")
    kind = KeyKind(parts[1])
    if len(parts) < 3 or parts[2] != KEY_VERSION:
        raise ValueError(f"unsupported key version, expected {KEY_VERSION!r}")
    if kind in _CLUSTER_KINDS:
        if len(parts) != 4:
            raise ValueError(f"expected {PREFIX}state/{kind.value}/{KEY_VERSION}/<cluster>")
        return ParsedKey(kind, validate_cluster_name(parts[3]), None)
    if len(parts) != 5:
        raise ValueError(f"expected {PREFIX}state/{kind.value}/{KEY_VERSION}/<cluster>/<name>")
    cluster = validate_cluster_name(parts[3])
    name = parts[4]
    if kind is KeyKind.IP:
        if canonical_ip(name) != name:
            raise ValueError(f"IP not in canonical form, expected {canonical_ip(name)!r}")
    elif kind is KeyKind.EVENT:
        validate_event_id(name)
    else:
        validate_node_name(name)
    return ParsedKey(kind, cluster, name)


def _quote(value: object) -> str:
    text = repr(value)
    if len(text) > _MAX_QUOTED_KEY_CHARS:
        return text[:_MAX_QUOTED_KEY_CHARS] + "..."
    return text
