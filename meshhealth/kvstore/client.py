"""An async etcd v3 client on trio: key-value requests, leases and watches.

    async with open_etcd("https://127.0.0.1:2379") as etcd:
        kv, revision = await etcd.get("meshhealth/cluster-config/lab1")
        async with etcd.watch_prefix("meshhealth/", start_revision=revision + 1) as watch:
            async for batch in watch: ...

How a request travels (threads, deadlines, failover, TLS, tokens) is
meshhealth.kvstore.transport's, the base class of `Etcd`. `open_etcd` also starts a
liveness task (a SIGSTOPped etcd answers nothing and its watches hang silently: cheap
requests on a deadline keep `etcd.health` true) and a task that reconnects when the TLS
or password files change. Errors are `EtcdError` (etcd answered with an error) and its
subclass `EtcdUnavailable` (no answer), with one-line messages naming the endpoints.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import grpc
import trio
from etcd3 import etcdrpc

from meshhealth import defaults
from meshhealth.kvstore.errors import (
    EtcdError,
    EtcdUnavailable,
    RpcFailed,
    describe_rpc_error,
    prefix_range_end,
)
from meshhealth.kvstore.etcd_config import EtcdAccess
from meshhealth.kvstore.messages import (
    KV,
    Compare,
    KeyAbsent,
    Op,
    Put,
    TxnResult,
    compare_message,
    kv_from_message,
    op_message,
    to_bytes,
)
from meshhealth.kvstore.transport import EtcdTransport
from meshhealth.kvstore.watch import PrefixWatch

MAX_WATCHES = defaults.ETCD_MAX_WATCHES

log = logging.getLogger(__name__)


class Etcd(EtcdTransport):
    """An etcd connection for trio code. Create it with `open_etcd`.

    Attributes: `endpoints`, `access`, `health` (EtcdHealth), `stats` (EtcdStats),
    `request_timeout_s`, `endpoint_in_use`.
    """

    def __init__(
        self,
        target: str | Sequence[str] | EtcdAccess,
        *,
        request_timeout_s: float = defaults.ETCD_REQUEST_TIMEOUT_S,
        liveness_interval_s: float = defaults.ETCD_LIVENESS_INTERVAL_S,
        liveness_timeout_s: float = defaults.ETCD_LIVENESS_TIMEOUT_S,
        threads: int = defaults.ETCD_THREADS,
    ) -> None:
        super().__init__(
            target,
            request_timeout_s=request_timeout_s,
            liveness_interval_s=liveness_interval_s,
            liveness_timeout_s=liveness_timeout_s,
            threads=threads,
        )
        self.watch_limiter = trio.CapacityLimiter(MAX_WATCHES)
        self.watch_lock = threading.Lock()  # guards stats.watch_threads_busy

    # --- key-value ---------------------------------------------------------------------

    async def get(self, key: str) -> tuple[KV | None, int]:
        """The entry under `key` (None when absent) and the store revision of the read."""
        request = etcdrpc.RangeRequest(key=to_bytes(key))
        response = await self._call(
            f"get {key!r}",
            lambda ch, t: etcdrpc.KVStub(ch).Range(request, t, **self._meta()),
        )
        kv = kv_from_message(response.kvs[0]) if response.kvs else None
        return kv, int(response.header.revision)

    async def get_prefix(
        self, prefix: str, *, page_keys: int = defaults.ETCD_LIST_PAGE_KEYS
    ) -> tuple[list[KV], int]:
        """Every entry whose key starts with `prefix`, sorted by key, and the revision.

        Read in pages of at most `page_keys` keys, each from the last key + "\\0", all at
        the revision of the first page (one consistent snapshot). A page larger than the
        receive limit (defaults.ETCD_MAX_RECEIVE_BYTES: a few big values) is asked for
        again with half as many keys; a single value larger than the limit is left out,
        with a warning, and counted in `stats.oversized_values`. Values larger than
        defaults.MAX_VALUE_BYTES are returned as they are: the codec refuses them, and
        each reader counts and logs them like any other invalid value.
        """
        key = to_bytes(prefix)
        end = prefix_range_end(key)
        kvs: list[KV] = []
        revision = 0
        limit = max(1, page_keys)
        while True:
            request = etcdrpc.RangeRequest(
                key=key,
                range_end=end,
                limit=limit,
                revision=revision,
                sort_order=etcdrpc.RangeRequest.ASCEND,
                sort_target=etcdrpc.RangeRequest.KEY,
            )
            response = await self._call(f"get prefix {prefix!r}", self._range_or_none(request))
            if response is None:  # larger than the receive limit
                if limit > 1:
                    limit = max(1, limit // 2)  # and so for the rest of this listing
                    continue
                key = await self._skip_oversized(prefix, key, end, revision)
                if not key:
                    break
                continue
            revision = revision or int(response.header.revision)
            kvs.extend(kv_from_message(raw) for raw in response.kvs)
            if not response.more or not response.kvs:
                break
            key = bytes(response.kvs[-1].key) + b"\0"
        return kvs, revision

    def _range_or_none(self, request: Any) -> Any:
        """A Range call (worker thread) that returns None when the answer is larger than
        the receive limit, instead of failing the request."""

        def call(channel: Any, timeout_s: float) -> Any:
            try:
                return etcdrpc.KVStub(channel).Range(request, timeout_s, **self._meta())
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    return None
                raise

        return call

    async def _skip_oversized(self, prefix: str, key: bytes, end: bytes, revision: int) -> bytes:
        """Log and count the one key at `key`.. whose value alone is too large to
        receive; the key to go on from (b"" when none is left)."""
        request = etcdrpc.RangeRequest(
            key=key, range_end=end, limit=1, revision=revision, keys_only=True
        )
        response = await self._call(
            f"get prefix {prefix!r}",
            lambda ch, t: etcdrpc.KVStub(ch).Range(request, t, **self._meta()),
        )
        if not response.kvs:
            return b""
        skipped = bytes(response.kvs[0].key)
        self.stats.oversized_values += 1
        log.warning(
            "etcd %s: skipping %r: its value is larger than %d bytes",
            self.description,
            skipped.decode("utf-8", "backslashreplace"),
            defaults.ETCD_MAX_RECEIVE_BYTES,
        )
        return skipped + b"\0"

    async def put(self, key: str, value: bytes, *, lease_id: int | None = None) -> int:
        """Write `value` under `key` (attached to `lease_id`); returns the new revision."""
        request = etcdrpc.PutRequest(key=to_bytes(key), value=value, lease=lease_id or 0)
        response = await self._call(
            f"put {key!r}",
            lambda ch, t: etcdrpc.KVStub(ch).Put(request, t, **self._meta()),
        )
        return int(response.header.revision)

    async def delete(self, key: str) -> bool:
        """Delete `key`; True when it existed."""
        request = etcdrpc.DeleteRangeRequest(key=to_bytes(key))
        response = await self._call(
            f"delete {key!r}",
            lambda ch, t: etcdrpc.KVStub(ch).DeleteRange(request, t, **self._meta()),
        )
        return int(response.deleted) > 0

    async def txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """One etcd transaction: if every compare holds run `success`, else `failure`."""
        request = etcdrpc.TxnRequest(
            compare=[compare_message(c) for c in compare],
            success=[op_message(op) for op in success],
            failure=[op_message(op) for op in failure],
        )
        response = await self._call(
            "transaction",
            lambda ch, t: etcdrpc.KVStub(ch).Txn(request, t, **self._meta()),
        )
        gets = tuple(
            tuple(kv_from_message(raw) for raw in item.response_range.kvs)
            for item in response.responses
            if item.WhichOneof("response") == "response_range"
        )
        return TxnResult(bool(response.succeeded), int(response.header.revision), gets)

    async def put_if_absent(self, key: str, value: bytes, *, lease_id: int | None = None) -> bool:
        """Write `key` only if it does not exist (atomically); True when written."""
        result = await self.txn([KeyAbsent(key)], [Put(key, value, lease_id)])
        return result.succeeded

    # --- leases ------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        """A new lease of `ttl_s` seconds; returns its id."""
        request = etcdrpc.LeaseGrantRequest(TTL=int(ttl_s), ID=0)
        response = await self._call(
            "lease grant",
            lambda ch, t: etcdrpc.LeaseStub(ch).LeaseGrant(request, t, **self._meta()),
        )
        if response.error:
            raise EtcdError(f"etcd {self.description}: lease grant failed: {response.error}")
        return int(response.ID)

    async def lease_keepalive_once(self, lease_id: int) -> int:
        """Refresh the lease once; returns its new TTL in seconds, 0 when it is gone."""

        def keepalive(ch: Any, t: float) -> int:
            request = etcdrpc.LeaseKeepAliveRequest(ID=lease_id)
            stream = etcdrpc.LeaseStub(ch).LeaseKeepAlive(iter([request]), t, **self._meta())
            ttl = 0
            for response in stream:
                ttl = int(response.TTL)
                break
            stream.cancel()
            return ttl

        return await self._call("lease keepalive", keepalive)

    async def lease_time_to_live(self, lease_id: int) -> tuple[int, int]:
        """(remaining TTL, granted TTL) in seconds; remaining is -1 when the lease is gone."""
        request = etcdrpc.LeaseTimeToLiveRequest(ID=lease_id, keys=False)
        response = await self._call(
            "lease time-to-live",
            lambda ch, t: etcdrpc.LeaseStub(ch).LeaseTimeToLive(request, t, **self._meta()),
        )
        return int(response.TTL), int(response.grantedTTL)

    async def lease_revoke(self, lease_id: int) -> bool:
        """Revoke the lease (its keys are deleted at once); False if it was already gone."""

        def revoke(ch: Any, t: float) -> bool:
            request = etcdrpc.LeaseRevokeRequest(ID=lease_id)
            try:
                etcdrpc.LeaseStub(ch).LeaseRevoke(request, t, **self._meta())
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    return False
                raise
            return True

        return await self._call("lease revoke", revoke)

    # --- watches -----------------------------------------------------------------------

    def watch_prefix(self, prefix: str, *, start_revision: int) -> PrefixWatch:
        """Watch every key under `prefix` from `start_revision` on (resumes by itself).

        Use as `async with etcd.watch_prefix(p, start_revision=r) as watch:` and
        `async for batch in watch:`; see `PrefixWatch`.
        """
        return PrefixWatch(self, prefix, start_revision=start_revision)

    def open_watch_stream(self, request: Any) -> tuple[Any, str]:
        """Start a gRPC Watch stream with `request` (does not block; EtcdUnavailable when
        every endpoint failed recently)."""
        if self.setup_error is not None:
            raise EtcdUnavailable(self.setup_error)
        try:
            channel, endpoint = self._channel()
        except RpcFailed as failed:
            detail = describe_rpc_error(failed.error, self.request_timeout_s)
            raise EtcdUnavailable(f"etcd {failed.url} unreachable: {detail}") from None
        self.stats.watch_streams += 1
        call = etcdrpc.WatchStub(channel).Watch(iter([request]), **self._meta())
        return call, endpoint.url

    async def run_liveness(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep `health` current until cancelled (see meshhealth.kvstore.liveness)."""
        from meshhealth.kvstore.liveness import run_liveness

        await run_liveness(self, task_status=task_status)


@asynccontextmanager
async def open_etcd(
    target: str | Sequence[str] | EtcdAccess,
    *,
    request_timeout_s: float = defaults.ETCD_REQUEST_TIMEOUT_S,
    liveness_interval_s: float = defaults.ETCD_LIVENESS_INTERVAL_S,
    liveness_timeout_s: float = defaults.ETCD_LIVENESS_TIMEOUT_S,
    threads: int = defaults.ETCD_THREADS,
    liveness: bool = True,
    files_poll_s: float = defaults.ETCD_FILES_POLL_S,
) -> AsyncIterator[Etcd]:
    """An Etcd for the duration of the block, with its liveness task running.

    `target`: "http://127.0.0.1:2379,http://10.0.0.2:2379" (also host:port), a
    sequence of those (ValueError when malformed), or an EtcdAccess (endpoints, TLS
    files, user). Does not wait for etcd: the block starts at once, `etcd.health.up`
    says when etcd answers. `liveness=False` skips the liveness task and the watch of
    the TLS files (one-shot commands). Exceptions of the block propagate unwrapped.
    """
    etcd = Etcd(
        target,
        request_timeout_s=request_timeout_s,
        liveness_interval_s=liveness_interval_s,
        liveness_timeout_s=liveness_timeout_s,
        threads=threads,
    )
    body_error: Exception | None = None
    try:
        async with trio.open_nursery() as nursery:
            if liveness:
                from meshhealth.kvstore.reload import watch_files

                await nursery.start(etcd.run_liveness)
                if etcd.access.watched_files():
                    await nursery.start(watch_files, etcd, files_poll_s)
            try:
                yield etcd
            except Exception as error:  # re-raised below, outside the nursery's group
                body_error = error
            finally:
                nursery.cancel_scope.cancel()
    finally:
        etcd.close()
    if body_error is not None:
        raise body_error
