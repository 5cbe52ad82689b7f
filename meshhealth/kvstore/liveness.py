"""The liveness check: is etcd answering? Keeps `Etcd.health` current.

A SIGSTOPped or partitioned etcd answers nothing and its watch streams hang silently;
only asking tells. Every `liveness_interval_s` (while up) the check asks each endpoint
a cheap question with a `liveness_timeout_s` deadline; while down it asks again with
back-off from ETCD_RECONNECT_MIN_S up to the interval. A failed request elsewhere marks
etcd down at once, and this check confirms or clears that soon after.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from meshhealth import defaults
from meshhealth.backoff import Backoff
from meshhealth.log_format import event_fields

if TYPE_CHECKING:
    from meshhealth.kvstore.client import Etcd

log = logging.getLogger(__name__)


async def run_liveness(
    etcd: Etcd, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Check `etcd` until cancelled; `etcd.liveness_running` is True meanwhile."""
    interval_s = etcd.liveness_interval_s
    backoff = Backoff(min(defaults.ETCD_RECONNECT_MIN_S, interval_s), interval_s)
    etcd.liveness_running = True
    task_status.started()
    try:
        await _check_forever(etcd, backoff)
    finally:
        etcd.liveness_running = False


async def _check_forever(etcd: Etcd, backoff: Backoff) -> None:
    health = etcd.health
    while True:
        fresh_s = health.answered_at + etcd.liveness_interval_s - trio.current_time()
        if health.up and fresh_s > 0:
            # Another request answered within the interval: nothing to ask yet.
            delay_s = fresh_s
        elif (error := await etcd.check_liveness()) is None:
            if not health.up:
                log.info(
                    "etcd %s is up",
                    etcd.description,
                    extra=event_fields("etcd-up", etcd=etcd.description),
                )
            health.set_up()
            backoff.reset()
            delay_s = etcd.liveness_interval_s
        else:
            if health.up or health.changes == 0:
                log.warning(
                    "%s",
                    error,
                    extra=event_fields("etcd-down", etcd=etcd.description, error=str(error)),
                )
            health.set_down(error)
            delay_s = backoff.next_delay_s()
        with trio.move_on_after(delay_s):
            if health.up:
                # A failed request marks etcd down at once: check again soon.
                await health.wait_until(False)
                await trio.sleep(backoff.next_delay_s())
            else:
                await trio.sleep_forever()
