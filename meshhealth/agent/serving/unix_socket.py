"""Serving on a unix socket file: the admin API's and the live feed's.

The socket exists from the moment the listener is open. It is created with `mode` in a
directory made if missing; a stale socket file (nobody answers on it) is replaced, a
live one is refused; the file is removed on exit unless someone has replaced it since.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from meshhealth import defaults


class AdminSocketError(Exception):
    """The socket path cannot be used; str() is one line for the user."""


async def _someone_answers(socket_path: str) -> bool:
    """True when a server accepts connections on this unix socket."""
    try:
        with trio.fail_after(defaults.ADMIN_SOCKET_LIVE_CHECK_TIMEOUT_S):
            stream = await trio.open_unix_socket(socket_path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except trio.TooSlowError:
        return True  # something holds it and does not answer quickly: not ours to remove
    await stream.aclose()
    return True


async def prepare_socket_path(socket_path: str) -> None:
    """Create the parent directory; remove a stale socket file; refuse a live one."""
    parent = os.path.dirname(socket_path) or "."
    try:
        await trio.Path(parent).mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise AdminSocketError(f"cannot create {parent}: {exc.strerror or exc}") from exc
    try:
        info = os.lstat(socket_path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise AdminSocketError(f"{socket_path} exists and is not a socket: refusing to start")
    if await _someone_answers(socket_path):
        raise AdminSocketError(f"another agent is serving {socket_path}: refusing to start")
    os.unlink(socket_path)


async def _bind_unix_listener(socket_path: str, mode: int) -> tuple[trio.SocketListener, int]:
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await sock.bind(socket_path)
        os.chmod(socket_path, mode)
        sock.listen(defaults.UNIX_SOCKET_BACKLOG)
        inode = os.stat(socket_path).st_ino
    except OSError as exc:
        sock.close()
        raise AdminSocketError(f"cannot serve on {socket_path}: {exc.strerror or exc}") from exc
    return trio.SocketListener(sock), inode


def _remove_if_ours(socket_path: str, inode: int) -> None:
    """Remove the socket file unless someone else has replaced it since."""
    try:
        if os.stat(socket_path).st_ino == inode:
            os.unlink(socket_path)
    except FileNotFoundError:
        pass


@asynccontextmanager
async def unix_listener(socket_path: str, mode: int) -> AsyncIterator[trio.SocketListener]:
    """A listener on `socket_path` (prepared as the module says) for the `async with`
    block; on the way out the file is removed (if still ours) and the socket closed.
    AdminSocketError when the path is in use or cannot be bound."""
    await prepare_socket_path(socket_path)
    listener, inode = await _bind_unix_listener(socket_path, mode)
    try:
        yield listener
    finally:
        # Unlink first: any await here would re-raise the cancel before it ran.
        _remove_if_ours(socket_path, inode)
        listener.socket.close()
