"""One small HTTP GET from a given source address: an agent asking a peer's responder.

    status, body = await http_get("10.0.0.7", 4240, "/v1/indirect?...", source_ip=node_ip)

The socket is bound to `source_ip` before it connects, so the peer sees this node's
NodeIP as the source (the address it checks requests against), whatever route the
kernel would pick. The caller owns the deadline (wrap the call in a cancel scope).
Network failures raise OSError; an answer that is not HTTP, is cut short or has a body
over `max_body_bytes` raises FetchError. One request per connection (Connection: close).
"""

from __future__ import annotations

import ipaddress

import h11
import trio

from meshhealth.probe.http import MAX_HEAD_BYTES, RECEIVE_CHUNK_BYTES, USER_AGENT, host_header


class FetchError(Exception):
    """The peer answered something we cannot use (one line)."""


async def http_get(
    ip: str, port: int, target: str, *, source_ip: str | None, max_body_bytes: int
) -> tuple[int, bytes]:
    """GET `target` from ip:port; returns (status code, body)."""
    address = ipaddress.ip_address(ip)
    family = trio.socket.AF_INET6 if address.version == 6 else trio.socket.AF_INET
    sock = trio.socket.socket(family, trio.socket.SOCK_STREAM)
    try:
        if source_ip is not None:
            await sock.bind((source_ip, 0))
        await sock.connect((ip, port))
        stream = trio.SocketStream(sock)
        try:
            return await _exchange(stream, host_header(address, port), target, max_body_bytes)
        except trio.BrokenResourceError as exc:
            if isinstance(exc.__cause__, OSError):
                raise exc.__cause__ from None
            raise FetchError("connection broken") from None
    finally:
        sock.close()


async def _exchange(
    stream: trio.SocketStream, host: str, target: str, max_body_bytes: int
) -> tuple[int, bytes]:
    conn = h11.Connection(our_role=h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
    request = h11.Request(
        method="GET",
        target=target,
        headers=[("Host", host), ("User-Agent", USER_AGENT), ("Connection", "close")],
    )
    await stream.send_all((conn.send(request) or b"") + (conn.send(h11.EndOfMessage()) or b""))
    status_code: int | None = None
    body = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            raise FetchError("the answer is not HTTP") from None
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(RECEIVE_CHUNK_BYTES))
        elif isinstance(event, h11.Response):
            status_code = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body_bytes:
                raise FetchError(f"the answer is larger than {max_body_bytes} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert status_code is not None
            return status_code, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            raise FetchError("the peer closed before answering")
