"""The ip entry (`state/ip/v1/<cluster>/<ip>`, under the owning node's lease): which
node and security identity an address (a health or pod IP) belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshhealth.model import IPEntry
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import SCHEMA_VERSION, pack, unpack_map
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


def encode_ip_entry(e: IPEntry) -> bytes:
    return pack("ip entry", ip_entry_to_wire(e), lambda m: ip_entry_to_wire(_from_wire(m)))


def decode_ip_entry(data: bytes) -> IPEntry:
    return _from_wire(unpack_map(data))


def ip_entry_to_wire(e: IPEntry) -> dict[str, object]:
    return {"v": SCHEMA_VERSION, **f.write(e, FIELDS)}


def _from_wire(m: Mapping[str, object]) -> IPEntry:
    return IPEntry(**f.read(m, FIELDS))
