"""The cluster-config entry (`cluster-config/<cluster>`, no lease): a cluster's numeric
id (1..255, as Cilium's cluster-id) and the capabilities its agents share.
"""

from __future__ import annotations

from meshhealth.model import ClusterConfig
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import Field

MIN_CLUSTER_ID = 1  # like Cilium's cluster-id; 0 is invalid
MAX_CLUSTER_ID = 255
MAX_CAPABILITIES = 64

FIELDS = (
    Field("name", f.cluster_name),
    Field("id", f.integer(MIN_CLUSTER_ID, MAX_CLUSTER_ID)),
    Field("capabilities", f.list_of(f.text(), MAX_CAPABILITIES)),
)
CLUSTER_CONFIG = Codec.of("cluster-config", ClusterConfig, FIELDS)
encode_cluster_config, decode_cluster_config = CLUSTER_CONFIG.encode, CLUSTER_CONFIG.decode
