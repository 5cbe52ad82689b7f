"""Reading health entries from etcd for the matrix (`meshhealth matrix`, GET /v1/matrix).

    matrix, invalid = await read_matrix(
        [MatrixSource("lab1", etcd1), MatrixSource("lab2", etcd2)], now=time.time()
    )

Each source is one etcd and the cluster whose health prefix is read there (None: every
cluster in that etcd). Sources are read concurrently, each with `timeout_s`; a source
that fails is listed in `matrix.unavailable` (its cluster's nodes have no row), the
others are shown. Values that do not decode are skipped and counted (`invalid`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import trio

from meshhealth import codec, defaults, keys
from meshhealth.documents.matrix import Matrix, NodeRef, build_matrix
from meshhealth.kvstore import Etcd, EtcdError
from meshhealth.model import HealthReport

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MatrixSource:
    cluster: str | None  # None: every cluster's entries in this etcd
    etcd: Etcd


async def read_reports(
    etcd: Etcd, cluster: str | None, *, timeout_s: float
) -> tuple[list[HealthReport], list[str]]:
    """The health reports under `cluster`'s prefix (all clusters: None), and one line
    per value skipped because it did not decode. EtcdError when etcd fails."""
    with trio.fail_after(timeout_s):  # TooSlowError; the etcd request's own deadline may be later
        kvs, _ = await etcd.get_prefix(keys.health_prefix(cluster))
    return codec.decode_entries(((kv.key, kv.value) for kv in kvs), HealthReport)


async def read_matrix(
    sources: Sequence[MatrixSource],
    *,
    now: float,
    extra_nodes: Iterable[NodeRef] = (),
    timeout_s: float = defaults.MATRIX_READ_TIMEOUT_S,
) -> tuple[Matrix, int]:
    """The matrix of every source's reports, and the number of values skipped."""
    results: dict[int, tuple[list[HealthReport], list[str]] | str] = {}

    async def read_one(index: int, source: MatrixSource) -> None:
        try:
            results[index] = await read_reports(source.etcd, source.cluster, timeout_s=timeout_s)
        except EtcdError as error:
            results[index] = str(error)
        except trio.TooSlowError:
            results[index] = f"etcd {source.etcd.description}: no answer within {timeout_s:g}s"

    async with trio.open_nursery() as nursery:
        for index, source in enumerate(sources):
            nursery.start_soon(read_one, index, source)
    reports: list[HealthReport] = []
    read: list[str] = []
    unavailable: dict[str, str] = {}
    skipped = 0
    for index, source in enumerate(sources):
        result = results[index]
        name = source.cluster or source.etcd.description
        if isinstance(result, str):
            unavailable[name] = result
            continue
        found, bad = result
        for line in bad:
            log.warning("skipping invalid health entry %s", line)
        skipped += len(bad)
        reports += found
        if source.cluster is not None:
            read.append(source.cluster)
    matrix = build_matrix(
        reports, now=now, extra_nodes=extra_nodes, source_clusters=read, unavailable=unavailable
    )
    return matrix, skipped
