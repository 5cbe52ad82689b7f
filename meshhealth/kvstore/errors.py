"""The exceptions of the kvstore layer (messages are one line naming the endpoint)."""

from __future__ import annotations

import etcd3.exceptions
import grpc

from meshhealth import defaults


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


class RpcFailed(Exception):
    """Raised in worker threads; turned into EtcdError/EtcdUnavailable in trio.

    `reason`: a better description than the gRPC error's (TLS, authentication), and
    `down`: whether it means etcd cannot be used (bad certificate, bad password)."""

    def __init__(
        self, url: str, error: BaseException, *, reason: str | None = None, down: bool = False
    ) -> None:
        super().__init__(url, error)
        self.url = url
        self.error = error
        self.reason = reason
        self.down = down


def describe_rpc_error(error: BaseException, timeout_s: float) -> str:
    """A short, lowercase description of a gRPC failure (`connection refused`)."""
    if isinstance(error, grpc.RpcError):
        code = error.code()
        details = str(error.details() or "").strip().splitlines()
        text = details[0] if details else ""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"no answer within {timeout_s:g}s"
        if "connection refused" in text.lower():
            return "connection refused"
        if code == grpc.StatusCode.UNAVAILABLE:
            return f"unavailable: {text[:200]}" if text else "unavailable"
        return f"{code.name.lower()}: {text[:200]}"
    if isinstance(error, etcd3.exceptions.NoServerAvailableError):
        return f"all endpoints failed in the last {defaults.ETCD_ENDPOINT_RETRY_S:g}s"
    return f"{type(error).__name__}: {error}"[:200]
