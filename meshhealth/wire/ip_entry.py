"""The ip entry (`state/ip/v1/<cluster>/<ip>`, under the owning node's lease): which
node and security identity an address (a health or pod IP) belongs to.
"""

from __future__ import annotations

from meshhealth.model import IPEntry
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import Field

MIN_IDENTITY = 1
MAX_IDENTITY = 2**32 - 1
MAX_LABELS = 64

FIELDS = (
    Field("ip", f.ip),
    Field("host_ip", f.ip),
    Field("node", f.node_name),
    Field("identity", f.integer(MIN_IDENTITY, MAX_IDENTITY)),
    Field("labels", f.list_of(f.text(), MAX_LABELS)),
)
IP_ENTRY = Codec.of("ip entry", IPEntry, FIELDS)
encode_ip_entry, decode_ip_entry = IP_ENTRY.encode, IP_ENTRY.decode
