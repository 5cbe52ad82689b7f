"""The /hello responder in one thread, without trio: the health endpoint's process.

`meshhealth responder` (the health endpoint's child of every agent) only answers
`GET /hello`; trio alone would make that process twice its size (docs/performance.md,
"Process size"). So it runs this loop on `selectors` and non-blocking sockets, with h11,
and answers exactly what the agent's trio responder answers (meshhealth.probe.hello_reply)
under the same protections (meshhealth.probe.responder's docstring):
- at most `max_connections` at once; when full, a new connection is accepted and closed;
- one deadline of `read_timeout_s` per request cycle (waiting, reading, writing):
  slowloris and idle keep-alive clients are dropped;
- request heads capped by h11, bodies by RESPONDER_MAX_BODY_BYTES (413);
- after an error reply, a lingering close (half-close, drain briefly).

Idle, it sleeps in `select()` with no timeout: no wake-up until a client, a stop signal
or its parent's exit (a pidfd) makes one of its descriptors readable.
"""

from __future__ import annotations

import errno
import ipaddress
import selectors
import socket
import time
from dataclasses import dataclass, field
from http import HTTPStatus

import h11

from meshhealth import defaults
from meshhealth.probe.hello_reply import Reply, error_reply, route

# accept() errors that mean "out of resources": pause accepting instead of spinning.
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def open_listener(host: str, port: int) -> socket.socket:
    """A non-blocking TCP listener on one IP literal (ValueError for anything else;
    OSError for bind errors), with the options trio's listeners have."""
    address = ipaddress.ip_address(host)
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(slots=True)
class _Client:
    sock: socket.socket
    conn: h11.Connection
    deadline: float  # monotonic: end of this request cycle (or of the linger)
    outgoing: bytes = b""  # the reply still to write
    request: h11.Request | None = None  # of this cycle, once its head is read
    body_bytes: int = 0
    lingering: bool = False  # after an error reply: draining before the close
    close_after: bool = False  # close (lingering) once `outgoing` is written
    drained: int = 0


@dataclass(slots=True)
class HelloServer:
    """Serves `listener` (and `more_listeners`: a dual-stack endpoint's other address)
    until one of `stop_fds` is readable (`serve_forever` returns the first that was).
    Single-threaded; owns and closes client sockets, not the listeners nor the stop
    descriptors."""

    listener: socket.socket
    node_name: str = ""
    max_connections: int = defaults.RESPONDER_MAX_CONNECTIONS
    read_timeout_s: float = defaults.RESPONDER_READ_TIMEOUT_S
    stop_fds: tuple[int, ...] = ()
    more_listeners: tuple[socket.socket, ...] = ()
    _clients: dict[int, _Client] = field(default_factory=dict)
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _accept_paused_until: float | None = None
    _paused: list[socket.socket] = field(default_factory=list)

    @property
    def listeners(self) -> tuple[socket.socket, ...]:
        return (self.listener, *self.more_listeners)

    def serve_forever(self) -> int:
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        for listener in self.listeners:
            self._selector.register(listener, selectors.EVENT_READ)
        for fd in self.stop_fds:
            self._selector.register(fd, selectors.EVENT_READ)
        try:
            while True:
                for key, mask in self._selector.select(self._timeout_s()):
                    if key.fd in self.stop_fds:
                        return key.fd
                    if key.fileobj in self.listeners:
                        self._accept_all(key.fileobj)
                    else:
                        client = self._clients.get(key.fd)
                        if client is not None and client.sock is key.fileobj:
                            self._on_ready(client, mask)
                self._expire(time.monotonic())
        finally:
            for client in list(self._clients.values()):
                self._close(client)
            self._selector.close()

    def _timeout_s(self) -> float | None:
        """Until the next deadline; None (sleep until an event) when nothing is due."""
        due = [client.deadline for client in self._clients.values()]
        if self._accept_paused_until is not None:
            due.append(self._accept_paused_until)
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _accept_all(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                # Out of descriptors: stop watching the listener for a moment.
                self._selector.unregister(listener)
                self._paused.append(listener)
                pause_s = defaults.HTTP_SERVER_ACCEPT_BACKOFF_S
                self._accept_paused_until = time.monotonic() + pause_s
                return
            if len(self._clients) >= self.max_connections:
                sock.close()  # full: a fast reset rather than a wait in the backlog
                continue
            sock.setblocking(False)
            conn = h11.Connection(
                h11.SERVER, max_incomplete_event_size=defaults.RESPONDER_MAX_HEAD_BYTES
            )
            client = _Client(sock, conn, time.monotonic() + self.read_timeout_s)
            self._clients[sock.fileno()] = client
            self._selector.register(sock, selectors.EVENT_READ)

    def _expire(self, now: float) -> None:
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            self._accept_paused_until = None
            for listener in self._paused:
                self._selector.register(listener, selectors.EVENT_READ)
            self._paused.clear()
        for client in [c for c in self._clients.values() if c.deadline <= now]:
            self._close(client)  # a cycle (or a linger) ran out of time

    def _on_ready(self, client: _Client, mask: int) -> None:
        try:
            if mask & selectors.EVENT_WRITE:
                self._write(client)
            elif client.lingering:
                self._drain(client)
            else:
                self._read(client)
        except OSError:  # reset by the peer, broken pipe: the client is gone
            self._close(client)

    def _read(self, client: _Client) -> None:
        data = client.sock.recv(defaults.RESPONDER_RECEIVE_CHUNK_BYTES)
        client.conn.receive_data(data)
        self._advance(client)

    def _advance(self, client: _Client) -> None:
        """Take h11's events until it needs data or a reply is ready to write."""
        conn = client.conn
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    if conn.their_state is h11.CLOSED:  # pragma: no cover - h11 says closed
                        self._close(client)
                    return
                if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    self._close(client)
                    return
                if isinstance(event, h11.Data):
                    client.body_bytes += len(event.data)
                    if client.body_bytes > defaults.RESPONDER_MAX_BODY_BYTES:
                        self._reply(client, error_reply(413), close=True)
                        return
                elif isinstance(event, h11.Request):
                    client.request = event
                elif isinstance(event, h11.EndOfMessage) and client.request is not None:
                    method, target = client.request.method, client.request.target
                    self._reply(client, route(method, target, self.node_name))
                    return
        except h11.RemoteProtocolError as exc:
            if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):  # pragma: no cover
                self._close(client)
                return
            self._reply(client, error_reply(exc.error_status_hint), close=True)

    def _reply(self, client: _Client, reply: Reply, *, close: bool = False) -> None:
        client.outgoing = response_bytes(client.conn, reply, close=close)
        client.close_after = close
        self._selector.modify(client.sock, selectors.EVENT_WRITE)
        self._write(client)

    def _write(self, client: _Client) -> None:
        if client.outgoing:
            sent = client.sock.send(client.outgoing)
            client.outgoing = client.outgoing[sent:]
        if client.outgoing:
            return  # the rest when the socket is writable again
        conn = client.conn
        if client.close_after:
            client.sock.shutdown(socket.SHUT_WR)
            client.lingering = True
            client.deadline = time.monotonic() + defaults.RESPONDER_LINGER_S
            self._selector.modify(client.sock, selectors.EVENT_READ)
            return
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            self._close(client)  # `Connection: close`, or HTTP/1.0
            return
        conn.start_next_cycle()  # keep-alive: a new cycle, a new deadline
        client.request = None
        client.body_bytes = 0
        client.deadline = time.monotonic() + self.read_timeout_s
        self._selector.modify(client.sock, selectors.EVENT_READ)
        self._advance(client)  # a pipelined request may already be buffered

    def _drain(self, client: _Client) -> None:
        chunk = client.sock.recv(defaults.RESPONDER_RECEIVE_CHUNK_BYTES)
        client.drained += len(chunk)
        if not chunk or client.drained >= defaults.RESPONDER_LINGER_MAX_BYTES:
            self._close(client)

    def _close(self, client: _Client) -> None:
        if self._clients.pop(client.sock.fileno(), None) is not None:
            self._selector.unregister(client.sock)
        client.sock.close()


def response_bytes(conn: h11.Connection, reply: Reply, *, close: bool) -> bytes:
    """The whole response to write, as meshhealth.http_server.send_response sends it."""
    headers = [*reply.headers, ("Connection", "close")] if close else list(reply.headers)
    try:
        reason = HTTPStatus(reply.status_code).phrase.encode()
    except ValueError:
        reason = b""
    data = conn.send(h11.Response(status_code=reply.status_code, headers=headers, reason=reason))
    data = data or b""
    if not reply.head_only:
        data += conn.send(h11.Data(data=reply.body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    return data
