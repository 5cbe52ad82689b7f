"""The aggregator claim (`state/aggregator/v1/<cluster>`, under the holder's lease): the
one agent of a cluster that reads every health report and publishes the summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import Field


@dataclass(frozen=True, slots=True)
class AggregatorClaim:
    """Who aggregates `cluster`: the holder's node name, and since when (unix s)."""

    cluster: str
    node: str
    since: float


FIELDS = (Field("cluster", f.cluster_name), Field("node", f.node_name), f.time_field("since"))
CLAIM = Codec.of("aggregator claim", AggregatorClaim, FIELDS)
encode_claim, decode_claim = CLAIM.encode, CLAIM.decode
