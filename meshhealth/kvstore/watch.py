"""A prefix watch that survives etcd restarts: `Etcd.watch_prefix` returns one.

    async with etcd.watch_prefix(prefix, start_revision=list_revision + 1) as watch:
        async for batch in watch:          # WatchBatch: the events of one watch response
            ...

Each gRPC Watch stream is read by a worker thread, one response at a time. When the
stream fails (etcd killed: the stream errors; etcd stopped or partitioned: the liveness
check reports etcd down while the stream hangs silently) the stream is cancelled and
re-opened from the last revision seen + 1 once etcd is up again, so no event is lost
or repeated. When that cannot work the iterator raises a `ResyncNeeded`, and the caller
lists the prefix again and starts a new watch:

- `Compacted`: the revision to resume from was compacted away;
- `StoreReset`: etcd's revision went backwards (a wiped or different etcd).

Leaving the `async with` (or cancelling a read) cancels the gRPC call, which ends the
reading thread; `Etcd.stats.watch_threads_busy` counts threads still reading.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
import trio
from etcd3 import etcdrpc
from etcd3.etcdrpc import kv_pb2

from meshhealth import defaults
from meshhealth.backoff import Backoff
from meshhealth.kvstore.errors import EtcdError, EtcdUnavailable, prefix_range_end

if TYPE_CHECKING:
    from meshhealth.kvstore.client import Etcd

log = logging.getLogger(__name__)


class ResyncNeeded(Exception):
    """The watch cannot resume without losing events: list again, then watch again."""

    def __init__(self, revision: int, reason: str) -> None:
        super().__init__(f"{reason} (revision {revision})")
        self.revision = revision
        self.reason = reason


class Compacted(ResyncNeeded):
    """The start revision was compacted; `revision` is the compaction revision."""


class StoreReset(ResyncNeeded):
    """etcd's revision is behind the last one seen; `revision` is etcd's current one."""


class EventKind(enum.StrEnum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: EventKind
    key: str
    value: bytes  # empty for DELETE
    mod_revision: int


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """The events of one watch response. Live, that is one revision (an etcd transaction
    is never split: a registration arrives whole); catching up, several revisions."""

    events: tuple[WatchEvent, ...]
    revision: int  # the highest mod_revision in `events`


_ENDED = object()  # the stream ended without an error
_PENDING = object()  # no response read (cancelled: etcd down, or the caller)


class PrefixWatch:
    """Async iterator of WatchBatch for every key under a prefix; resumes by itself.

    `next_revision` is where a new stream would start; `restarts` counts streams
    re-opened after a loss. Not safe for two concurrent readers.
    """

    def __init__(self, etcd: Etcd, prefix: str, *, start_revision: int) -> None:
        if start_revision < 1:
            raise ValueError(f"start_revision must be >= 1, got {start_revision}")
        self._etcd = etcd
        self.prefix = prefix
        self.next_revision = start_revision
        self.restarts = 0
        self._call: Any = None
        self._url = ""
        self._closed = False
        self._delay_s = 0.0  # wait before the next open (back-off after a loss)
        self._backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)

    async def __aenter__(self) -> PrefixWatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._drop_call()

    def __aiter__(self) -> PrefixWatch:
        return self

    async def __anext__(self) -> WatchBatch:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._call is None:
                await self._open()
                continue
            response = await self._receive()
            if response is _PENDING:  # etcd reported down while the stream was quiet
                self._lost("etcd reported down")
                continue
            if response is _ENDED:
                self._lost("stream ended")
                continue
            if isinstance(response, grpc.RpcError):
                self._lost(f"stream failed: {response.code().name.lower()}")
                if response.code() == grpc.StatusCode.UNAUTHENTICATED:
                    self._etcd.drop_token()  # expired: the next open asks for a new one
                if response.code() == grpc.StatusCode.UNAVAILABLE:
                    self._etcd.stream_lost(self._url)
                continue
            batch = self._handle(response)
            if batch is not None:
                return batch

    def _handle(self, response: Any) -> WatchBatch | None:
        if response.compact_revision:
            self._drop_call()
            raise Compacted(int(response.compact_revision), f"watch of {self.prefix!r} compacted")
        if response.created:
            self._backoff.reset()
            current = int(response.header.revision)
            if current < self.next_revision - 1:
                self._drop_call()
                raise StoreReset(
                    current,
                    f"etcd revision went back from {self.next_revision - 1} to {current}",
                )
        if response.canceled:
            self._lost(f"watch cancelled by etcd: {response.cancel_reason or 'no reason'}")
            return None
        if not response.events:
            return None
        events = tuple(
            WatchEvent(
                kind=EventKind.DELETE if raw.type == kv_pb2.Event.DELETE else EventKind.PUT,
                key=bytes(raw.kv.key).decode("utf-8", "backslashreplace"),
                value=bytes(raw.kv.value),
                mod_revision=int(raw.kv.mod_revision),
            )
            for raw in response.events
        )
        revision = max(e.mod_revision for e in events)
        self.next_revision = max(self.next_revision, revision + 1)
        return WatchBatch(events, revision)

    async def _open(self) -> None:
        if self._delay_s:
            await trio.sleep(self._delay_s)
            self._delay_s = 0.0
        if self._etcd.liveness_running:
            await self._etcd.health.wait_until(True)
        try:
            await self._etcd.prepare_stream()
        except EtcdError as error:
            log.debug("cannot open watch of %r yet: %s", self.prefix, error)
            self._delay_s = self._backoff.next_delay_s()
            return
        request = etcdrpc.WatchRequest(
            create_request=etcdrpc.WatchCreateRequest(
                key=self.prefix.encode(),
                range_end=prefix_range_end(self.prefix.encode()),
                start_revision=self.next_revision,
            )
        )
        try:
            self._call, self._url = self._etcd.open_watch_stream(request)
        except EtcdUnavailable as error:
            log.debug("cannot open watch of %r yet: %s", self.prefix, error)
            self._delay_s = self._backoff.next_delay_s()

    async def _receive(self) -> object:
        call = self._call
        result: object = _PENDING

        async def read(cancel_scope: trio.CancelScope) -> None:
            nonlocal result
            result = await trio.to_thread.run_sync(
                self._next_blocking, call, limiter=self._etcd.watch_limiter, abandon_on_cancel=True
            )
            cancel_scope.cancel()

        async def until_down(cancel_scope: trio.CancelScope) -> None:
            await self._etcd.health.wait_until(False)
            cancel_scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, nursery.cancel_scope)
                nursery.start_soon(until_down, nursery.cancel_scope)
        finally:
            if result is _PENDING:
                # The reading thread is abandoned: cancel the call so it ends, and never
                # read this stream again (a response it took would be lost). The next
                # read re-opens from next_revision.
                self._drop_call()
        return result

    def _next_blocking(self, call: Any) -> object:
        """Worker thread: the next response, _ENDED, or the grpc.RpcError."""
        with self._etcd.watch_lock:
            self._etcd.stats.watch_threads_busy += 1
        try:
            return next(call)
        except StopIteration:
            return _ENDED
        except grpc.RpcError as error:
            return error
        finally:
            with self._etcd.watch_lock:
                self._etcd.stats.watch_threads_busy -= 1

    def _lost(self, reason: str) -> None:
        self._drop_call()
        self._delay_s = self._backoff.next_delay_s()  # reset by the next `created`
        if not self._closed:
            self.restarts += 1
            log.info(
                "watch of %r lost (%s); resuming from revision %d",
                self.prefix,
                reason,
                self.next_revision,
            )

    def _drop_call(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
