"""The exceptions of the kvstore layer (messages are one line naming the endpoint)."""

from __future__ import annotations


class EtcdError(Exception):
    """etcd answered with an error, or did not answer (EtcdUnavailable). One line."""


class EtcdUnavailable(EtcdError):
    """etcd did not answer in time, refused the connection, or no endpoint is left."""


def prefix_range_end(prefix: bytes) -> bytes:
    """The etcd range_end that selects every key starting with `prefix`."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"  # all keys
