"""What the /hello responder answers (pure, no I/O library): shared by the agent's
responder on trio (meshhealth.probe.responder) and the health endpoint's one-thread
server (meshhealth.probe.hello_server), so both answer byte for byte alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from meshhealth import __version__, defaults

# The same as meshhealth.http_server.SERVER_HEADER, which this module cannot import
# (it loads trio): tests/probe/test_hello_server.py checks they agree.
SERVER_HEADER = f"meshhealth/{__version__}"


@dataclass(frozen=True, slots=True)
class Reply:
    status_code: int
    headers: tuple[tuple[str, str], ...]
    body: bytes  # its length is the Content-Length, even for HEAD
    head_only: bool = False  # a HEAD answer: headers only


def hello_body(node_name: str) -> bytes:
    """The /hello body: small JSON that says who answered. Pure."""
    doc = {"status": "ok", "node": node_name, "version": __version__}
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def route(method: bytes, target: bytes, node_name: str) -> Reply:
    """What to answer to `method target`. Pure."""
    path = target.split(b"?", 1)[0]
    head_only = method == b"HEAD"
    if path != defaults.HTTP_PATH.encode():
        return _text_reply(404, b"not found\n", head_only=head_only)
    if method not in (b"GET", b"HEAD"):
        return _text_reply(405, b"method not allowed\n", extra=(("Allow", "GET, HEAD"),))
    body = hello_body(node_name)
    return Reply(200, _headers("application/json", len(body)), body, head_only)


def text_reply(status_code: int, reason: str) -> Reply:
    """A one-line text answer (the agent's other routes refuse with these). Pure."""
    return _text_reply(status_code, reason.splitlines()[0].encode() + b"\n")


def json_reply(body: bytes) -> Reply:
    """200 with a JSON body (the agent's other routes answer with these). Pure."""
    return Reply(200, _headers("application/json", len(body)), body)


def error_reply(status_code: int) -> Reply:
    """The answer to a request we could not parse (400, 431) or take (413). Pure."""
    return _text_reply(status_code, f"error {status_code}\n".encode())


def _text_reply(
    status_code: int,
    body: bytes,
    extra: tuple[tuple[str, str], ...] = (),
    *,
    head_only: bool = False,
) -> Reply:
    headers = _headers("text/plain; charset=utf-8", len(body)) + extra
    return Reply(status_code, headers, body, head_only)


def _headers(content_type: str, length: int) -> tuple[tuple[str, str], ...]:
    return (
        ("Content-Type", content_type),
        ("Content-Length", str(length)),
        ("Server", SERVER_HEADER),
    )
