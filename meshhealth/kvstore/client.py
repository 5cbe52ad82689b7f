"""An async etcd v3 client on trio, over etcd3-fc's blocking gRPC client.

    async with open_etcd("http://127.0.0.1:2379") as etcd:
        kv, revision = await etcd.get("meshhealth/cluster-config/lab1")
        async with etcd.watch_prefix("meshhealth/", start_revision=revision + 1) as watch:
            async for batch in watch: ...

Every blocking gRPC call runs in a worker thread (`trio.to_thread.run_sync`) limited by
our own CapacityLimiter, with a gRPC deadline and a trio deadline a little later; a
call stuck in a thread is abandoned on cancel and ends at its gRPC deadline. Endpoint
selection and failover come from `etcd3.MultiEndpointEtcd3Client(failover=True)` with a
short retry time (the library's default parks a failed endpoint for 300 s).

A liveness task (started by `open_etcd`) asks every endpoint something cheap each
`liveness_interval_s` with a `liveness_timeout_s` deadline and keeps `etcd.health` up to
date: a SIGSTOPped etcd answers nothing and its watches hang silently, this is how we
notice. Failed requests mark etcd down at once; the next liveness answer marks it up.

Errors: `EtcdUnavailable` (etcd did not answer: refused, timed out, no endpoint left)
and `EtcdError` (its base class: etcd answered with an error). Messages are one line and
name the endpoint(s), e.g. `etcd http://127.0.0.1:2379 unreachable: connection refused`.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import etcd3
import etcd3.exceptions
import grpc
import trio
from etcd3 import etcdrpc

from meshhealth import defaults
from meshhealth.kvstore.endpoints import EtcdEndpoint, describe, parse_endpoints
from meshhealth.kvstore.errors import (
    EtcdError,
    EtcdUnavailable,
    RpcFailed,
    describe_rpc_error,
    prefix_range_end,
)
from meshhealth.kvstore.health import EtcdHealth, EtcdStats
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
from meshhealth.kvstore.watch import PrefixWatch

_T = TypeVar("_T")

# Key the liveness check reads (count only): any key works, this one says who asks.
LIVENESS_KEY = b"meshhealth/.liveness"

_CONNECTIVITY_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
# Codes after which etcd3 marks an endpoint failed (and fails over to another one).
_FAILED_ENDPOINT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL}
)


class Etcd:
    """An etcd connection for trio code. Create it with `open_etcd`.

    Attributes: `endpoints`, `health` (EtcdHealth), `stats` (EtcdStats),
    `request_timeout_s`.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        *,
        request_timeout_s: float = defaults.ETCD_REQUEST_TIMEOUT_S,
        liveness_interval_s: float = defaults.ETCD_LIVENESS_INTERVAL_S,
        liveness_timeout_s: float = defaults.ETCD_LIVENESS_TIMEOUT_S,
        threads: int = defaults.ETCD_THREADS,
    ) -> None:
        self.endpoints: tuple[EtcdEndpoint, ...] = parse_endpoints(endpoints)
        self.request_timeout_s = request_timeout_s
        self.liveness_interval_s = liveness_interval_s
        self.liveness_timeout_s = liveness_timeout_s
        self.health = EtcdHealth()
        self.stats = EtcdStats()
        self.liveness_running = False  # without it, watches do not wait for `health.up`
        self._limiter = trio.CapacityLimiter(threads)
        self._liveness_limiter = trio.CapacityLimiter(len(self.endpoints))
        self.watch_limiter = trio.CapacityLimiter(defaults.ETCD_MAX_WATCHES)
        self.watch_lock = threading.Lock()  # guards stats.watch_threads_busy
        self._url_by_netloc = {e.netloc: e.url for e in self.endpoints}
        reconnect_ms = int(defaults.ETCD_CHANNEL_RECONNECT_MAX_S * 1000)
        channel_options = [
            ("grpc.initial_reconnect_backoff_ms", min(100, reconnect_ms)),
            ("grpc.min_reconnect_backoff_ms", min(100, reconnect_ms)),
            ("grpc.max_reconnect_backoff_ms", reconnect_ms),
            ("grpc.enable_http_proxy", 0),  # etcd is reached directly, never via a proxy
        ]
        self._client = etcd3.MultiEndpointEtcd3Client(
            endpoints=[
                etcd3.Endpoint(
                    f"[{e.host}]" if ":" in e.host else e.host,
                    e.port,
                    secure=False,
                    time_retry=defaults.ETCD_ENDPOINT_RETRY_S,
                    opts=channel_options,
                )
                for e in self.endpoints
            ],
            timeout=request_timeout_s,
            failover=True,
        )

    @property
    def description(self) -> str:
        """`http://127.0.0.1:2379[,...]`: the endpoints as error messages name them."""
        return describe(self.endpoints)

    def close(self) -> None:
        """Close the gRPC channels (ends every stream still open)."""
        self._client.close()

    # --- the one path every request takes ---------------------------------------------

    def _channel(self) -> tuple[Any, str]:
        """A channel to a usable endpoint and that endpoint's URL (worker thread)."""
        try:
            channel = self._client.channel
        except etcd3.exceptions.NoServerAvailableError as error:
            raise RpcFailed(self.description, error) from None
        netloc = self._client.endpoint_in_use.netloc
        return channel, self._url_by_netloc.get(netloc, f"http://{netloc}")

    def _mark_failed(self, url: str, error: grpc.RpcError) -> None:
        # With one endpoint there is nothing to fail over to: marking it failed would
        # only refuse every request for ETCD_ENDPOINT_RETRY_S after etcd is back.
        if len(self.endpoints) > 1 and error.code() in _FAILED_ENDPOINT_CODES:
            for endpoint in self._client.endpoints.values():
                if self._url_by_netloc.get(endpoint.netloc) == url:
                    endpoint.fail()

    def _blocking(self, call: Callable[[Any, float], _T], timeout_s: float) -> _T:
        """Run `call(channel, timeout_s)` (worker thread), failing over on UNAVAILABLE."""
        attempts = len(self.endpoints)
        while True:
            attempts -= 1
            channel, url = self._channel()
            try:
                return call(channel, timeout_s)
            except grpc.RpcError as error:
                self._mark_failed(url, error)
                if error.code() == grpc.StatusCode.UNAVAILABLE and attempts > 0:
                    continue
                raise RpcFailed(url, error) from None

    async def _call(
        self, what: str, call: Callable[[Any, float], _T], *, timeout_s: float | None = None
    ) -> _T:
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        self.stats.requests += 1
        try:
            with trio.fail_after(timeout + defaults.ETCD_TRIO_DEADLINE_MARGIN_S):
                result = await trio.to_thread.run_sync(
                    self._blocking, call, timeout, limiter=self._limiter, abandon_on_cancel=True
                )
        except trio.TooSlowError:
            self.stats.errors += 1
            message = f"etcd {self.description} unreachable: no answer within {timeout:g}s"
            self.health.set_down(message)
            raise EtcdUnavailable(message) from None
        except RpcFailed as failed:
            self.stats.errors += 1
            error = failed.error
            detail = describe_rpc_error(error, timeout)
            if isinstance(error, grpc.RpcError) and error.code() not in _CONNECTIVITY_CODES:
                raise EtcdError(f"etcd {failed.url}: {what} failed: {detail}") from None
            message = f"etcd {failed.url} unreachable: {detail}"
            self.health.set_down(message)
            raise EtcdUnavailable(message) from None
        self.health.set_up()  # it answered
        return result

    def _meta(self) -> dict[str, Any]:
        return {"metadata": self._client.metadata, "credentials": self._client.call_credentials}

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

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every entry whose key starts with `prefix`, sorted by key, and the revision."""
        key = to_bytes(prefix)
        request = etcdrpc.RangeRequest(
            key=key,
            range_end=prefix_range_end(key),
            sort_order=etcdrpc.RangeRequest.ASCEND,
            sort_target=etcdrpc.RangeRequest.KEY,
        )
        response = await self._call(
            f"get prefix {prefix!r}",
            lambda ch, t: etcdrpc.KVStub(ch).Range(request, t, **self._meta()),
        )
        return [kv_from_message(raw) for raw in response.kvs], int(response.header.revision)

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
        try:
            channel, url = self._channel()
        except RpcFailed as failed:
            detail = describe_rpc_error(failed.error, self.request_timeout_s)
            raise EtcdUnavailable(f"etcd {failed.url} unreachable: {detail}") from None
        self.stats.watch_streams += 1
        call = etcdrpc.WatchStub(channel).Watch(iter([request]), **self._meta())
        return call, url

    # --- liveness ----------------------------------------------------------------------

    async def check_liveness(self) -> str | None:
        """Ask each endpoint a cheap question; None when one answers, else the failure.

        Goes straight to each endpoint's channel (ignoring failover marks) with the
        liveness deadline; an answer clears the endpoint's failure mark.
        """
        request = etcdrpc.RangeRequest(key=LIVENESS_KEY, count_only=True)
        timeout = self.liveness_timeout_s
        errors: list[str] = []
        for endpoint in self._client.endpoints.values():
            url = self._url_by_netloc.get(endpoint.netloc, endpoint.netloc)

            def ask(channel: Any = endpoint.channel) -> None:
                etcdrpc.KVStub(channel).Range(request, timeout, **self._meta())

            try:
                with trio.fail_after(timeout + defaults.ETCD_TRIO_DEADLINE_MARGIN_S):
                    await trio.to_thread.run_sync(
                        ask, limiter=self._liveness_limiter, abandon_on_cancel=True
                    )
            except trio.TooSlowError:
                errors.append(f"etcd {url} unreachable: no answer within {timeout:g}s")
                continue
            except grpc.RpcError as error:
                errors.append(f"etcd {url} unreachable: {describe_rpc_error(error, timeout)}")
                continue
            endpoint.last_failed = 0
            return None
        return "; ".join(errors)

    async def run_liveness(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep `health` current until cancelled (see meshhealth.kvstore.liveness)."""
        from meshhealth.kvstore.liveness import run_liveness

        await run_liveness(self, task_status=task_status)


@asynccontextmanager
async def open_etcd(
    endpoints: str | Sequence[str],
    *,
    request_timeout_s: float = defaults.ETCD_REQUEST_TIMEOUT_S,
    liveness_interval_s: float = defaults.ETCD_LIVENESS_INTERVAL_S,
    liveness_timeout_s: float = defaults.ETCD_LIVENESS_TIMEOUT_S,
    threads: int = defaults.ETCD_THREADS,
    liveness: bool = True,
) -> AsyncIterator[Etcd]:
    """An Etcd for the duration of the block, with its liveness task running.

    `endpoints`: "http://127.0.0.1:2379,http://10.0.0.2:2379" (also host:port), or a
    sequence of those; ValueError when malformed. Does not wait for etcd: the block
    starts at once, `etcd.health.up` says when etcd answers. `liveness=False` skips the
    liveness task (one-shot commands). Exceptions of the block propagate unwrapped.
    """
    etcd = Etcd(
        endpoints,
        request_timeout_s=request_timeout_s,
        liveness_interval_s=liveness_interval_s,
        liveness_timeout_s=liveness_timeout_s,
        threads=threads,
    )
    body_error: Exception | None = None
    try:
        async with trio.open_nursery() as nursery:
            if liveness:
                await nursery.start(etcd.run_liveness)
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
