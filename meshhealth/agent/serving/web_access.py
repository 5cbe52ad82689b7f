"""Who may read the web page, its JSON and its feed (pure).

    access = WebAccess.for_listen("10.77.0.1", 9963, node_ips=["10.77.0.1"], extra=[])
    access.host_allowed("10.77.0.1:9963")              # True
    access.origin_allowed("http://evil.example", peers) # False: a foreign page
    access.cors_origin("http://10.77.0.2:9963", peers)  # that origin: a peer's page

Against DNS rebinding a request is answered only when its `Host` names this page (the
listen address, this node's NodeIPs, a loopback name, `--web-allowed-hosts`) on its
port; against cross-site WebSocket hijacking an upgrade is accepted without `Origin`
(not a browser) or from this page or another agent's page of the mesh, which
`cors_origin` names back instead of `*`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import ip_address
from urllib.parse import urlsplit

# Names a browser uses for a port forwarded to this host's loopback: they cannot be
# rebound to another address by a foreign page.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_wildcard(host: str) -> bool:
    """Whether a listen address accepts connections on every address of the host."""
    return host in ("", "0.0.0.0", "::")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """`name[:port]`, `[v6]:port`, `v6` -> (lower-case name, port or None); None when it
    does not parse."""
    value = value.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif value.count(":") > 1:  # a bare IPv6 address
        name, port_text = value, None
    else:
        name, sep, port = value.partition(":")
        port_text = port if sep else None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return name, int(port_text)


def _normal(name: str) -> str:
    try:
        return str(ip_address(name))
    except ValueError:
        return name.lower()


@dataclass(frozen=True, slots=True)
class WebAccess:
    """The page's port and the host names it answers to (lower-case, no brackets)."""

    port: int
    hosts: frozenset[str]
    https: bool = False  # a Host without a port means 443, not 80

    @staticmethod
    def for_listen(
        host: str,
        port: int,
        *,
        node_ips: Iterable[str | None],
        extra: Iterable[str] = (),
        https: bool = False,
    ) -> WebAccess:
        names = {_normal(ip) for ip in node_ips if ip}
        if not is_wildcard(host):
            names.add(_normal(host))
        names |= LOOPBACK_NAMES
        names |= {_normal(name) for name in extra}
        return WebAccess(port, frozenset(names), https)

    def _ours(self, name: str, port: int | None, default_port: int) -> bool:
        return _normal(name) in self.hosts and (port or default_port) == self.port

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's `Host` names this page (absent: no)."""
        parsed = _split_host(header) if header is not None else None
        return parsed is not None and self._ours(parsed[0], parsed[1], 443 if self.https else 80)

    def _peer(self, origin: str, peer_ips: Iterable[str | None]) -> bool:
        parts = urlsplit(origin)
        if parts.scheme not in _DEFAULT_PORTS or parts.hostname is None:
            return False
        try:
            port = parts.port or _DEFAULT_PORTS[parts.scheme]
        except ValueError:
            return False
        peers = {_normal(ip) for ip in peer_ips if ip}
        return port == self.port and _normal(parts.hostname) in peers

    def _same(self, origin: str) -> bool:
        parts = urlsplit(origin)
        if parts.scheme not in _DEFAULT_PORTS or parts.hostname is None:
            return False
        try:
            port = parts.port
        except ValueError:
            return False
        return self._ours(parts.hostname, port, _DEFAULT_PORTS[parts.scheme])

    def origin_allowed(self, origin: str | None, peer_ips: Iterable[str | None]) -> bool:
        """Whether a browser page from `origin` may open the feed (absent: not a browser,
        allowed; `null`, a foreign site: not)."""
        if origin is None:
            return True
        return self._same(origin) or self._peer(origin, peer_ips)

    def cors_origin(self, origin: str | None, peer_ips: Iterable[str | None]) -> str | None:
        """The origin to name in `Access-Control-Allow-Origin` (another agent's page of
        the mesh), or None: no cross-origin read."""
        if origin is None or self._same(origin) or not self._peer(origin, peer_ips):
            return None
        return origin
