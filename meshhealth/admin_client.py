"""Client of the agent's admin API (unix socket, HTTP/JSON), used by the CLI.

    status, doc = await admin_request("/run/meshhealth/health.sock", "GET", "/v1/status",
                                      timeout_s=5.0)

Every failure to get a JSON answer is an `AdminUnavailable` whose message is one line
naming the socket and what to check. Answers with an error status (404, 504, ...) are
returned as they are: the caller decides.
"""

from __future__ import annotations

import errno
import json
from typing import Any

import h11
import trio

from meshhealth import __version__, defaults

_CHECK = "is `meshhealth agent` running? check `systemctl status meshhealth` / the lab"


class AdminUnavailable(Exception):
    """The agent could not be reached or did not answer properly. str() is one line."""


def socket_path_from_host(host: str) -> str:
    """`unix:///run/x.sock` or a plain path -> the path; anything else: ValueError."""
    if host.startswith("unix://"):
        path = host[len("unix://") :]
    elif "://" in host:
        raise ValueError(f"unsupported host {host!r}: only unix://PATH is supported")
    else:
        path = host
    if not path:
        raise ValueError(f"no socket path in {host!r}")
    return path


def _why(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOENT:
        return f"no such file ({_CHECK})"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return f"connection refused: a stale socket, the agent is not serving it ({_CHECK})"
    if isinstance(exc, PermissionError) or exc.errno == errno.EACCES:
        return "permission denied (run as root or as a member of the socket's group)"
    return exc.strerror or str(exc)


async def _exchange(socket_path: str, method: str, path: str) -> tuple[int, bytes]:
    stream = await trio.open_unix_socket(socket_path)
    async with stream:
        conn = h11.Connection(h11.CLIENT)
        request = h11.Request(
            method=method,
            target=path,
            headers=[
                ("Host", "localhost"),
                ("User-Agent", f"meshhealth/{__version__}"),
                ("Accept", "application/json"),
                ("Content-Length", "0"),
                ("Connection", "close"),
            ],
        )
        await stream.send_all((conn.send(request) or b"") + (conn.send(h11.EndOfMessage()) or b""))
        status_code = 0
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(64 * 1024)))
            elif isinstance(event, h11.Response):
                status_code = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > defaults.ADMIN_MAX_ANSWER_BYTES:
                    raise ValueError(f"answer over {defaults.ADMIN_MAX_ANSWER_BYTES} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return status_code, bytes(body)
            elif isinstance(event, h11.ConnectionClosed):
                raise ValueError("the agent closed the connection before answering")


async def admin_request(
    socket_path: str, method: str, path: str, *, timeout_s: float
) -> tuple[int, dict[str, Any]]:
    """One request; (HTTP status, decoded JSON object). AdminUnavailable otherwise."""
    where = f"cannot reach the meshhealth agent at {socket_path}"
    try:
        with trio.fail_after(timeout_s):
            status_code, body = await _exchange(socket_path, method, path)
    except trio.TooSlowError:
        raise AdminUnavailable(
            f"{where}: no answer within {timeout_s:g}s (is the agent stuck or overloaded?)"
        ) from None
    except OSError as exc:
        raise AdminUnavailable(f"{where}: {_why(exc)}") from None
    except trio.BrokenResourceError:
        raise AdminUnavailable(f"{where}: the connection was reset") from None
    except (h11.ProtocolError, ValueError) as exc:
        raise AdminUnavailable(f"{where}: invalid answer ({exc})") from None
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdminUnavailable(f"{where}: the answer is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise AdminUnavailable(f"{where}: the answer is not a JSON object")
    return status_code, doc
