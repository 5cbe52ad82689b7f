"""Follow a prefix: list it, then watch it from the listed revision, for as long as the
caller's task runs.

Every reader that keeps a copy of a prefix (discovery, retained nodes, peer nodes, the
health reports of the aggregator and of `watch --etcd`) uses this one loop, so the rule
is written once: a list that fails waits for etcd's health to change or for a back-off
delay and lists again; a watch that cannot resume (the revision was compacted, the store
was restored) lists again; other watch interruptions resume from the last revision
inside PrefixWatch. The caller gets the whole prefix at every (re)list and every batch
of events in between; it never sees an etcd error, only a line saying why a list failed
(`on_error`, once per distinct reason).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import NoReturn

import trio

from meshhealth import defaults
from meshhealth.backoff import Backoff
from meshhealth.kvstore.client import Etcd
from meshhealth.kvstore.errors import EtcdError
from meshhealth.kvstore.messages import KV
from meshhealth.kvstore.watch import ResyncNeeded, WatchEvent

log = logging.getLogger(__name__)


async def follow_prefix(
    etcd: Etcd,
    prefix: str,
    *,
    what: str,
    on_list: Callable[[Sequence[KV]], None],
    on_events: Callable[[Sequence[WatchEvent]], None],
    on_error: Callable[[str], None] | None = None,
    list_timeout_s: float | None = None,
) -> NoReturn:
    """List `prefix` (`on_list(kvs)`, the whole prefix: replace what you hold), then
    watch it (`on_events(events)` per batch), until cancelled.

    `what` names the reader in log lines ("discovery of cluster c1"). A failed list is
    reported through `on_error(reason)` when the reason differs from the last one (by
    default a debug log line) and retried. `list_timeout_s` bounds each list (the
    request's own deadline may be later); a list that takes longer failed.
    """
    backoff = Backoff(defaults.ETCD_RECONNECT_MIN_S, defaults.ETCD_RECONNECT_MAX_S)
    last_error = ""
    while True:
        try:
            with trio.fail_after(math.inf if list_timeout_s is None else list_timeout_s):
                kvs, revision = await etcd.get_prefix(prefix)
        except (EtcdError, trio.TooSlowError) as error:
            if isinstance(error, trio.TooSlowError):
                why = f"etcd {etcd.description}: no answer in {list_timeout_s}s"
            else:
                why = str(error) or type(error).__name__
            if why != last_error:
                last_error = why
                if on_error is None:
                    log.debug("%s: %s (retrying)", what, error)
                else:
                    on_error(last_error)
            with trio.move_on_after(backoff.next_delay_s()):
                await etcd.health.wait_changed()
            continue
        backoff.reset()
        last_error = ""
        on_list(kvs)
        try:
            async with etcd.watch_prefix(prefix, start_revision=revision + 1) as watch:
                async for batch in watch:
                    on_events(batch.events)
        except ResyncNeeded as error:
            log.warning("%s: %s; listing again", what, error)
