"""Reconnect when the TLS files or the password file change (certificate rotation).

The files are polled (inode, mtime, size of each, every `poll_s`): the project has no
inotify binding among its dependencies, a poll every couple of seconds costs a few
`stat` calls, and it also sees a Kubernetes secret update (a symlink swap) or a file
that comes back after being missing. When the fingerprint changes the transport builds
new channels from the files as they are now; calls still running on the old channels
finish (the old ones are closed one request timeout later); watches re-open on the
new channels from where they were. Files that cannot be used (half written, a key
that does not match yet) leave the old channels in place when there are some; without
any, etcd stays down with the reason until the files are fixed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from meshhealth.kvstore.tls import files_fingerprint
from meshhealth.kvstore.transport import TRIO_DEADLINE_MARGIN_S

if TYPE_CHECKING:
    from meshhealth.kvstore.transport import EtcdTransport

log = logging.getLogger(__name__)


async def watch_files(
    etcd: EtcdTransport,
    poll_s: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Poll `etcd.access.watched_files()` until cancelled; reconnect on a change."""
    paths = etcd.access.watched_files()
    task_status.started()
    async with trio.open_nursery() as nursery:
        while True:
            await trio.sleep(poll_s)
            if files_fingerprint(paths) == etcd.files_fingerprint:
                continue
            if etcd.reconnect():
                log.info("etcd %s: TLS or password files changed: reconnected", etcd.description)
                nursery.start_soon(_close_later, etcd, etcd.request_timeout_s)
            else:
                log.warning("%s (the files changed; waiting for usable ones)", etcd.files_error)


async def _close_later(etcd: EtcdTransport, delay_s: float) -> None:
    await trio.sleep(delay_s + TRIO_DEADLINE_MARGIN_S)
    etcd.close_retired()
