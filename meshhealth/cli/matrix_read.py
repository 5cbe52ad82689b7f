"""The N x N matrix as the commands that read etcd get it (`matrix`, `diagnose`): an etcd
client per `--etcd`/`--mesh` source, the reports read, and one line on stderr for what
was left out, or the exit code when no etcd answers.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from meshhealth.cli.common import (
    EXIT_UNAVAILABLE,
    etcd_sources_from_args,
    etcd_timeout_from_args,
    print_error,
    usage_error,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AsyncExitStack

    from meshhealth.documents.matrix import Matrix
    from meshhealth.kvstore.etcd_config import EtcdAccess
    from meshhealth.matrix_source import MatrixRead, MatrixSource


def read_matrix_from_args(args: argparse.Namespace, command: str) -> Matrix | int:
    """The matrix of the reports `add_etcd_source_options` point at, read now; or the
    exit code after a one-line error (usage error, no etcd could be read)."""
    import time
    from contextlib import AsyncExitStack

    import trio

    from meshhealth.matrix_source import read_matrix

    try:
        wanted = etcd_sources_from_args(args)
        timeout_s = etcd_timeout_from_args(args)
    except ValueError as error:
        return usage_error(command, str(error))

    async def fetch() -> MatrixRead:
        async with AsyncExitStack() as stack:
            sources = await open_sources(stack, wanted, timeout_s)
            return await read_matrix(
                sources, now=time.time(), timeout_s=timeout_s, registered_only=True
            )

    return matrix_or_exit(trio.run(fetch), len(wanted), command)


async def open_sources(
    stack: AsyncExitStack, wanted: Sequence[tuple[str | None, EtcdAccess]], timeout_s: float
) -> list[MatrixSource]:
    """An etcd client per source of `etcd_sources_from_args`, closed with `stack`."""
    from meshhealth.kvstore import open_etcd
    from meshhealth.matrix_source import MatrixSource

    return [
        MatrixSource(
            cluster,
            await stack.enter_async_context(
                open_etcd(urls, request_timeout_s=timeout_s, liveness=False)
            ),
        )
        for cluster, urls in wanted
    ]


def matrix_or_exit(read: MatrixRead, sources: int, command: str) -> Matrix | int:
    """The matrix `read` holds, after one line on stderr for each thing left out; or
    EXIT_UNAVAILABLE after one line when none of the `sources` etcds could be read."""
    from meshhealth.matrix_source import ignored_line

    matrix = read.matrix
    if read.skipped:
        print_error(
            command, f"skipped {read.skipped} health entries that do not decode (see the log above)"
        )
    if read.ignored:
        print_error(command, ignored_line(read.ignored))
    if len(matrix.unavailable) == sources:
        print_error(command, "; ".join(matrix.unavailable.values()))
        return EXIT_UNAVAILABLE
    return matrix
