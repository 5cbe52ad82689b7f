"""The aggregator claim (`state/aggregator/v1/<cluster>`, under the holder's lease): the
one agent of a cluster that reads every health report and publishes the summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from meshhealth.wire import fields as f
from meshhealth.wire.envelope import SCHEMA_VERSION, pack, unpack_map
from meshhealth.wire.fields import Field


@dataclass(frozen=True, slots=True)
class AggregatorClaim:
    """Who aggregates `cluster`: the holder's node name, and since when (unix s)."""

    cluster: str
    node: str
    since: float


FIELDS = (
    Field("cluster", f.cluster_name),
    Field("node", f.node_name),
    Field("since", f.seconds),
)


def encode_claim(claim: AggregatorClaim) -> bytes:
    return pack("aggregator claim", claim_to_wire(claim), lambda m: claim_to_wire(_claim(m)))


def decode_claim(data: bytes) -> AggregatorClaim:
    return _claim(unpack_map(data))


def claim_to_wire(claim: AggregatorClaim) -> dict[str, object]:
    return {"v": SCHEMA_VERSION, **f.write(claim, FIELDS)}


def _claim(m: Mapping[str, object]) -> AggregatorClaim:
    return AggregatorClaim(**f.read(m, FIELDS))
