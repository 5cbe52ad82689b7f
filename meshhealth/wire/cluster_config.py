"""The cluster-config entry (`cluster-config/<cluster>`, no lease): a cluster's numeric
id (1..255, as Cilium's cluster-id) and the capabilities its agents share.
"""

from __future__ import annotations

from collections.abc import Mapping

from meshhealth.model import ClusterConfig
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import SCHEMA_VERSION, pack, unpack_map
from meshhealth.wire.fields import Field

MIN_CLUSTER_ID = 1  # like Cilium's cluster-id; 0 is invalid
MAX_CLUSTER_ID = 255
MAX_CAPABILITIES = 64

FIELDS = (
    Field("name", f.cluster_name),
    Field("id", f.integer(MIN_CLUSTER_ID, MAX_CLUSTER_ID)),
    Field("capabilities", f.list_of(f.text(), MAX_CAPABILITIES)),
)


def encode_cluster_config(c: ClusterConfig) -> bytes:
    return pack("cluster-config", cluster_config_to_wire(c), _canonical)


def decode_cluster_config(data: bytes) -> ClusterConfig:
    return _from_wire(unpack_map(data))


def cluster_config_to_wire(c: ClusterConfig) -> dict[str, object]:
    return {"v": SCHEMA_VERSION, **f.write(c, FIELDS)}


def _canonical(m: Mapping[str, object]) -> dict[str, object]:
    return cluster_config_to_wire(_from_wire(m))


def _from_wire(m: Mapping[str, object]) -> ClusterConfig:
    return ClusterConfig(**f.read(m, FIELDS))
