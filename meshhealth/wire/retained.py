"""The retained node entry (`state/retained/v1/<cluster>/<node>`, no lease): a node's
entry kept after its agent stops, so others can tell a dead agent from a removed node.
On the wire: the node entry's fields, then `down_since` (nil while the agent is alive).
"""

from __future__ import annotations

from collections.abc import Mapping

from meshhealth.model import RetainedNode
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import pack, unpack_map
from meshhealth.wire.fields import Field
from meshhealth.wire.node import node_from_wire, node_to_wire

FIELDS = (Field("down_since", f.nullable(f.seconds)),)


def encode_retained(r: RetainedNode) -> bytes:
    return pack("retained node", retained_to_wire(r), lambda m: retained_to_wire(_from_wire(m)))


def decode_retained(data: bytes) -> RetainedNode:
    return _from_wire(unpack_map(data))


def retained_to_wire(r: RetainedNode) -> dict[str, object]:
    return {**node_to_wire(r.node), **f.write(r, FIELDS)}


def _from_wire(m: Mapping[str, object]) -> RetainedNode:
    return RetainedNode(node_from_wire(m), **f.read(m, FIELDS))
