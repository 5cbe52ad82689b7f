"""The road every etcd request takes: channels, TLS, authentication, failover, errors.

`EtcdTransport` (the base of `Etcd`) owns an `etcd3.MultiEndpointEtcd3Client` used only
for its channels and endpoint selection (failover with a short retry time; the
library's default parks a failed endpoint for 300 s). Every blocking gRPC call runs in
a worker thread (`trio.to_thread.run_sync`) limited by our own CapacityLimiter, with a
gRPC deadline and a trio deadline a little later; a call stuck in a thread is
abandoned on cancel and ends at its gRPC deadline.

TLS: the channels are built from the files of `EtcdAccess.tls` (checked first, see
meshhealth.kvstore.tls). `reconnect()` builds new channels from the files as they are
now (the agent calls it when they change); the old channels are closed a request
timeout later, so calls in flight finish. When the files cannot be used the transport
has no channels: every request fails at once with the reason, the agent keeps
running and `health` says why.

Authentication: with `EtcdAccess.auth` the transport asks etcd for a token (the
password is read from its file each time), sends it with every call, and asks for a
new one when etcd says the token is invalid or expired, then retries the call once
(meshhealth.kvstore.auth holds the token).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import etcd3
import etcd3.exceptions
import grpc
import trio
from etcd3 import etcdrpc

from meshhealth import defaults
from meshhealth.kvstore.auth import Tokens
from meshhealth.kvstore.endpoints import EtcdEndpoint, describe, parse_endpoints
from meshhealth.kvstore.errors import EtcdError, EtcdUnavailable, RpcFailed, describe_rpc_error
from meshhealth.kvstore.etcd_config import EtcdAccess
from meshhealth.kvstore.health import EtcdHealth, EtcdStats
from meshhealth.kvstore.tls import (
    TlsSetupError,
    diagnose_handshake,
    files_fingerprint,
    load_credentials,
    looks_like_tls_failure,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# grpc's blocking calls (a watch stream's next response, a unary call) wait on a
# condition in slices of grpc._common.MAXIMUM_WAIT_TIMEOUT (0.1 s), so that a main thread
# blocked there still sees Ctrl-C. Ours block only in worker threads, and a response, a
# cancel or the call's deadline wakes the condition at once: waking 10 times a second per
# open watch only burned CPU (a third of an idle agent's). Longer slices change nothing
# else.
if hasattr(grpc, "_common") and hasattr(grpc._common, "MAXIMUM_WAIT_TIMEOUT"):
    grpc._common.MAXIMUM_WAIT_TIMEOUT = defaults.GRPC_WAIT_SLICE_S

TRIO_DEADLINE_MARGIN_S = defaults.ETCD_TRIO_DEADLINE_MARGIN_S

_CONNECTIVITY_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
# Codes after which etcd3 marks an endpoint failed (and fails over to another one).
_FAILED_ENDPOINT_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL}
)


def as_access(target: str | Sequence[str] | EtcdAccess) -> EtcdAccess:
    """`target` as an EtcdAccess (an endpoint list means plain http, no user)."""
    return target if isinstance(target, EtcdAccess) else EtcdAccess(parse_endpoints(target))


class EtcdTransport:
    """Channels, credentials and the request path of one etcd cluster."""

    def __init__(
        self,
        target: str | Sequence[str] | EtcdAccess,
        *,
        request_timeout_s: float = defaults.ETCD_REQUEST_TIMEOUT_S,
        liveness_interval_s: float = defaults.ETCD_LIVENESS_INTERVAL_S,
        liveness_timeout_s: float = defaults.ETCD_LIVENESS_TIMEOUT_S,
        threads: int = defaults.ETCD_THREADS,
    ) -> None:
        self.access = as_access(target)
        self.endpoints: tuple[EtcdEndpoint, ...] = self.access.endpoints
        self.request_timeout_s = request_timeout_s
        self.liveness_interval_s = liveness_interval_s
        self.liveness_timeout_s = liveness_timeout_s
        self.health = EtcdHealth()
        self.stats = EtcdStats()
        self.liveness_running = False  # without it, watches do not wait for `health.up`
        self._limiter = trio.CapacityLimiter(threads)
        self._liveness_limiter = trio.CapacityLimiter(len(self.endpoints))
        self._by_netloc = {e.netloc: e for e in self.endpoints}
        self.tokens = Tokens(self.access.auth, self.stats)
        self._client: Any = None
        self.retired: list[Any] = []  # replaced clients, closed once their calls ended
        self.setup_error: str | None = None  # no channels: why (the TLS files)
        self.files_error: str | None = None  # the files as they are now cannot be used
        self.files_fingerprint = files_fingerprint(self.access.watched_files())
        self.reconnect()

    @property
    def description(self) -> str:
        """`https://127.0.0.1:2379[,...]`: the endpoints as error messages name them."""
        return describe(self.endpoints)

    @property
    def endpoint_in_use(self) -> str | None:
        """The URL of the endpoint requests go to now (None before the first)."""
        client = self._client
        if client is None or client.endpoint_in_use is None:
            return None
        endpoint = self._by_netloc.get(client.endpoint_in_use.netloc)
        return endpoint.url if endpoint is not None else None

    # --- channels ----------------------------------------------------------------------

    def _build_client(self) -> Any:
        credentials = load_credentials(self.access.tls) if self.access.tls else None
        reconnect_ms = int(defaults.ETCD_CHANNEL_RECONNECT_MAX_S * 1000)
        options = [
            ("grpc.initial_reconnect_backoff_ms", min(100, reconnect_ms)),
            ("grpc.min_reconnect_backoff_ms", min(100, reconnect_ms)),
            ("grpc.max_reconnect_backoff_ms", reconnect_ms),
            ("grpc.enable_http_proxy", 0),  # etcd is reached directly, never via a proxy
            ("grpc.max_receive_message_length", defaults.ETCD_MAX_RECEIVE_BYTES),
        ]
        return etcd3.MultiEndpointEtcd3Client(
            endpoints=[
                etcd3.Endpoint(
                    f"[{e.host}]" if ":" in e.host else e.host,
                    e.port,
                    secure=credentials is not None,
                    creds=credentials,
                    time_retry=defaults.ETCD_ENDPOINT_RETRY_S,
                    opts=options,
                )
                for e in self.endpoints
            ],
            timeout=self.request_timeout_s,
            failover=True,
        )

    def reconnect(self) -> bool:
        """New channels from the TLS files as they are now (the old ones go to
        `retired`). False, with `files_error` set, when the files cannot be used: the
        channels we have stay (they were built from usable files); without any,
        `setup_error` is the reason every request fails."""
        self.files_fingerprint = files_fingerprint(self.access.watched_files())
        try:
            client = self._build_client()
        except TlsSetupError as error:
            self.files_error = f"etcd {self.description}: {error}"
            if self._client is None:
                self.setup_error = self.files_error
            return False
        old, self._client = self._client, client
        self.setup_error = self.files_error = None
        self.tokens.reset()
        if old is not None:
            self.retired.append(old)
            self.stats.reconnects += 1
        return True

    def close_retired(self) -> None:
        retired, self.retired = self.retired, []
        for client in retired:
            client.close()

    def close(self) -> None:
        """Close the gRPC channels (ends every stream still open)."""
        self.close_retired()
        if self._client is not None:
            self._client.close()

    def _channel(self) -> tuple[Any, EtcdEndpoint]:
        """A channel to a usable endpoint and that endpoint (worker thread)."""
        client = self._client
        if client is None:
            raise RpcFailed(self.description, ValueError(self.setup_error), reason="", down=True)
        try:
            channel = client.channel
        except etcd3.exceptions.NoServerAvailableError as error:
            raise RpcFailed(self.description, error) from None
        netloc = client.endpoint_in_use.netloc
        return channel, self._by_netloc[netloc]

    def _mark_failed(self, endpoint: EtcdEndpoint, error: grpc.RpcError) -> None:
        # With one endpoint there is nothing to fail over to: marking it failed would
        # only refuse every request for ETCD_ENDPOINT_RETRY_S after etcd is back.
        if len(self.endpoints) > 1 and error.code() in _FAILED_ENDPOINT_CODES:
            client_endpoint = self._client.endpoints.get(endpoint.netloc)
            if client_endpoint is not None:
                client_endpoint.fail()

    # --- the one path every request takes ----------------------------------------------

    def drop_token(self) -> None:
        """Forget the token (etcd refused it): the next call asks for a new one."""
        self.tokens.drop()

    def _meta(self) -> dict[str, Any]:
        return self.tokens.metadata()

    def _explain(self, endpoint: EtcdEndpoint, error: grpc.RpcError, timeout_s: float) -> str:
        """A reason better than gRPC's for TLS and authentication failures; '' if none."""
        code, details = error.code(), str(error.details() or "")
        tls = self.access.tls
        handshake = code == grpc.StatusCode.UNAVAILABLE and looks_like_tls_failure(details)
        if handshake and endpoint.secure and tls is not None:
            reason = diagnose_handshake(endpoint, tls, timeout_s)
            return reason or "TLS handshake failed"
        user = self.access.auth.user if self.access.auth else ""
        if "user name is empty" in details and not user:
            return "etcd requires authentication: give an etcd user and its password"
        if "authentication failed" in details or code == grpc.StatusCode.UNAUTHENTICATED:
            return f"authentication failed for user {user!r}: invalid user or password"
        if code == grpc.StatusCode.PERMISSION_DENIED and user:
            return f"permission denied for user {user!r}"
        return ""

    def _attempt(self, call: Callable[[Any, float], _T], timeout_s: float) -> _T:
        """`call(channel, timeout_s)` on one endpoint, asking for a new token once if
        etcd refuses ours (worker thread)."""
        channel, endpoint = self._channel()
        for retry in (False, True):
            try:
                self.tokens.ensure(channel, endpoint, timeout_s)
                return call(channel, timeout_s)
            except grpc.RpcError as error:
                invalid_token = error.code() == grpc.StatusCode.UNAUTHENTICATED
                if invalid_token and self.access.auth is not None and not retry:
                    self.tokens.refused()
                    continue
                raise _Failed(endpoint, error) from None
        raise AssertionError("unreachable")

    def _blocking(self, call: Callable[[Any, float], _T], timeout_s: float) -> _T:
        """Run `call(channel, timeout_s)` (worker thread), failing over on UNAVAILABLE."""
        attempts = len(self.endpoints)
        while True:
            attempts -= 1
            try:
                return self._attempt(call, timeout_s)
            except _Failed as failed:
                error, endpoint = failed.error, failed.endpoint
                self._mark_failed(endpoint, error)
                if error.code() == grpc.StatusCode.UNAVAILABLE and attempts > 0:
                    continue
                reason = self._explain(endpoint, error, timeout_s)
                down = bool(reason) and error.code() != grpc.StatusCode.PERMISSION_DENIED
                raise RpcFailed(endpoint.url, error, reason=reason, down=down) from None

    def fail(self, message: str, *, down: bool) -> EtcdError:
        """Count a failed request; mark etcd down when it is not answering."""
        self.stats.errors += 1
        if down:
            self.health.set_down(message)
            return EtcdUnavailable(message)
        return EtcdError(message)

    async def _call(
        self, what: str, call: Callable[[Any, float], _T], *, timeout_s: float | None = None
    ) -> _T:
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        self.stats.requests += 1
        if self.setup_error is not None:
            raise self.fail(self.setup_error, down=True)
        try:
            with trio.fail_after(timeout + TRIO_DEADLINE_MARGIN_S):
                result = await trio.to_thread.run_sync(
                    self._blocking, call, timeout, limiter=self._limiter, abandon_on_cancel=True
                )
        except trio.TooSlowError:
            message = f"etcd {self.description} unreachable: no answer within {timeout:g}s"
            raise self.fail(message, down=True) from None
        except RpcFailed as failed:
            raise self.failure(what, failed, timeout) from None
        self.health.set_up()  # it answered
        return result

    def failure(self, what: str, failed: RpcFailed, timeout_s: float) -> EtcdError:
        """The one-line error for a failed call (and etcd marked down if it is)."""
        if failed.reason is not None and failed.down:
            return self.fail(self.setup_error or f"etcd {failed.url}: {failed.reason}", down=True)
        if failed.reason:
            return self.fail(f"etcd {failed.url}: {what} failed: {failed.reason}", down=False)
        error = failed.error
        detail = describe_rpc_error(error, timeout_s)
        if isinstance(error, grpc.RpcError) and error.code() not in _CONNECTIVITY_CODES:
            return self.fail(f"etcd {failed.url}: {what} failed: {detail}", down=False)
        if isinstance(error, etcd3.exceptions.NoServerAvailableError) and self.health.changes:
            # Every member was marked failed just now: the reason is the last error seen
            # (a refused certificate, a refused connection), not "all failed".
            known = self.health.last_error
            if not self.health.up and known and "all endpoints failed" not in known:
                detail = f"{detail} (last error: {known})"
        return self.fail(f"etcd {failed.url} unreachable: {detail}", down=True)

    def stream_lost(self, url: str) -> None:
        """A stream to `url` failed with UNAVAILABLE. With one endpoint etcd is down;
        with several, only that member is (marked failed: the next stream and request
        go to another one, and etcd stays up)."""
        if len(self.endpoints) == 1:
            self.health.set_down(f"etcd {url} unreachable: watch stream lost")
            return
        for netloc, endpoint in self._by_netloc.items():
            client_endpoint = self._client.endpoints.get(netloc) if self._client else None
            if endpoint.url == url and client_endpoint is not None:
                client_endpoint.fail()

    async def prepare_stream(self) -> None:
        """Before opening a stream: make sure a token is there (authentication)."""
        if self.tokens.needed:
            await self._call("authenticate", lambda channel, timeout_s: None)

    # --- liveness ------------------------------------------------------------------------

    async def check_liveness(self) -> str | None:
        """Ask each endpoint a cheap question; None when one answers, else the failure.

        Goes straight to each endpoint's channel (ignoring failover marks) with the
        liveness deadline, the one in use first; an answer clears the endpoint's failure
        mark, a failure sets it, so requests leave a dead or partitioned member before
        they time out on it.
        """
        if self.setup_error is not None:
            return self.setup_error
        request = etcdrpc.RangeRequest(key=LIVENESS_KEY, count_only=True)
        timeout = self.liveness_timeout_s
        errors: list[str] = []
        client = self._client
        in_use = client.endpoint_in_use
        ordered = sorted(client.endpoints.items(), key=lambda item: item[1] is not in_use)
        for netloc, client_endpoint in ordered:
            endpoint = self._by_netloc[netloc]

            def ask(
                channel: Any = client_endpoint.channel, endpoint: EtcdEndpoint = endpoint
            ) -> None:
                try:
                    self.tokens.ensure(channel, endpoint, timeout)
                    etcdrpc.KVStub(channel).Range(request, timeout, **self._meta())
                except grpc.RpcError as error:
                    if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                        self.tokens.drop()
                    reason = self._explain(endpoint, error, timeout)
                    raise RpcFailed(endpoint.url, error, reason=reason) from None

            try:
                with trio.fail_after(timeout + TRIO_DEADLINE_MARGIN_S):
                    await trio.to_thread.run_sync(
                        ask, limiter=self._liveness_limiter, abandon_on_cancel=True
                    )
            except trio.TooSlowError:
                errors.append(f"etcd {endpoint.url} unreachable: no answer within {timeout:g}s")
                if len(ordered) > 1:
                    client_endpoint.fail()
                continue
            except RpcFailed as failed:
                if len(ordered) > 1:
                    client_endpoint.fail()
                if failed.reason:
                    errors.append(f"etcd {failed.url}: {failed.reason}")
                else:
                    detail = describe_rpc_error(failed.error, timeout)
                    errors.append(f"etcd {failed.url} unreachable: {detail}")
                continue
            client_endpoint.last_failed = 0
            return None
        return "; ".join(errors)


# Key the liveness check reads (count only): any key works, this one says who asks.
LIVENESS_KEY = b"meshhealth/.liveness"


class _Failed(Exception):
    """A gRPC error on one endpoint (worker thread, inside `_blocking`)."""

    def __init__(self, endpoint: EtcdEndpoint, error: grpc.RpcError) -> None:
        super().__init__(endpoint.url)
        self.endpoint = endpoint
        self.error = error
