"""The node entry (`state/nodes/v1/<cluster>/<node>`, under the node's lease): who a
node is and where to probe it. Its fields, and the dual-stack rule that pairs a node's
addresses family by family, are declared here; fields.py reads and writes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshhealth.model import Node, ip_family
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import DecodeError, Field

MAX_CIDRS = 64
MIN_PORT = 1
MAX_PORT = 65535

# In documented order, so the first error reported is stable. The secondary addresses
# (dual stack) are written only when set: a single-stack node's entry is what older
# writers wrote, and older readers ignore them.
FIELDS = (
    Field("name", f.node_name),
    Field("cluster", f.cluster_name),
    Field("node_ip", f.ip),
    Field("health_ip", f.nullable(f.ip)),
    Field("cidrs", f.list_of(f.cidr, MAX_CIDRS)),
    Field("health_port", f.integer(MIN_PORT, MAX_PORT)),
    Field("version", f.text(allow_empty=True)),
    f.time_field("started_at"),
    Field("node_ip_secondary", f.ip, default=None),
    Field("health_ip_secondary", f.ip, default=None),
)


def _read(m: Mapping[str, object]) -> Node:
    """The addresses first and the dual-stack rule over them, then the other fields (so
    an entry with several errors reports the documented first one)."""
    addresses = f.read(m, FIELDS[:5] + FIELDS[8:])
    _check_dual_stack(**addresses)
    return Node(**addresses, **f.read(m, FIELDS[5:8]))


def _check_dual_stack(
    node_ip: str,
    health_ip: str | None,
    node_ip_secondary: str | None,
    health_ip_secondary: str | None,
    **_: object,
) -> None:
    """A secondary address is of the other family than its primary, and a node's
    health addresses pair with its node addresses family by family (so readers of the
    ip entries can tell primary from secondary by family alone)."""
    if node_ip_secondary is None:
        if health_ip_secondary is not None:
            raise DecodeError("field 'health_ip_secondary': set without 'node_ip_secondary'")
        return
    primary = ip_family(node_ip)
    if ip_family(node_ip_secondary) == primary:
        raise DecodeError(
            f"field 'node_ip_secondary': must be of the other family than node_ip "
            f"({primary}), got {node_ip_secondary}"
        )
    if health_ip is not None and ip_family(health_ip) != primary:
        raise DecodeError(
            f"field 'health_ip': a dual-stack node's HealthIP is of node_ip's family "
            f"({primary}), got {health_ip}"
        )
    if health_ip_secondary is not None and ip_family(health_ip_secondary) == primary:
        raise DecodeError(
            f"field 'health_ip_secondary': must be of node_ip_secondary's family, got "
            f"{health_ip_secondary}"
        )


NODE = Codec("node", _read, lambda n: f.write(n, FIELDS))
encode_node, decode_node = NODE.encode, NODE.decode
