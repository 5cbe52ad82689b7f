"""Small helpers to do things inside a named network namespace (`ip netns` style).

A socket belongs to the network namespace of the thread that created it, for its whole
lifetime. So to get a socket inside namespace NAME, a short-lived dedicated thread enters
NAME with setns(CLONE_NEWNET) and creates the socket; the thread then ends (it is never
reused: trio's worker-thread cache would keep a thread stuck in the wrong namespace).
The caller's own thread never changes namespace.

`os.setns` only exists from Python 3.12, so this uses libc's setns through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NETNS_RUN_DIR = "/run/netns"  # where `ip netns add NAME` mounts the namespace
CLONE_NEWNET = 0x40000000

_libc: ctypes.CDLL | None = None


def netns_path(netns: str) -> str:
    """The path `ip netns add` uses for namespace `netns` (a plain name, no slashes)."""
    if not netns or "/" in netns or netns in (".", ".."):
        raise ValueError(f"invalid network namespace name: {netns!r}")
    return os.path.join(NETNS_RUN_DIR, netns)


def _setns(fd: int, nstype: int) -> None:
    global _libc  # noqa: PLW0603 - loaded once, lazily
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def call_in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """Run `fn()` in a fresh thread that has entered network namespace `netns`.

    With `netns=None` it is just `fn()` in the calling thread. Blocks until `fn` returns
    (meant for quick calls such as creating a socket). Exceptions from `fn`, and OSError
    when the namespace does not exist or cannot be entered, reach the caller.
    """
    if netns is None:
        return fn()
    path = netns_path(netns)
    result: list[T] = []
    error: list[BaseException] = []

    def enter_and_call() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd, CLONE_NEWNET)
            finally:
                os.close(fd)
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread below
            error.append(exc)

    thread = threading.Thread(target=enter_and_call, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def socket_in_netns(netns: str | None, family: int, type: int, proto: int = 0) -> socket.socket:
    """A stdlib socket created inside network namespace `netns` (None: the current one)."""
    return call_in_netns(netns, lambda: socket.socket(family, type, proto))
