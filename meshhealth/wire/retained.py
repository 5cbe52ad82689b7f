"""The retained node entry (`state/retained/v1/<cluster>/<node>`, no lease): a node's
entry kept after its agent stops, so others can tell a dead agent from a removed node.
On the wire: the node entry's fields, then `down_since` (nil while the agent is alive).
"""

from __future__ import annotations

from meshhealth.model import RetainedNode
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.node import NODE

FIELDS = (f.time_field("down_since", allow_nil=True),)
RETAINED = Codec(
    "retained node",
    lambda m: RetainedNode(NODE.read(m), **f.read(m, FIELDS)),
    lambda r: {**NODE.write(r.node), **f.write(r, FIELDS)},
)
encode_retained, decode_retained = RETAINED.encode, RETAINED.decode
