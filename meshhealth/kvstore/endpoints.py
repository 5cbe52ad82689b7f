"""Parse etcd endpoint lists ("https://127.0.0.1:2379,https://10.0.0.2:2379"). Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_CLIENT_PORT = 2379


@dataclass(frozen=True, slots=True)
class EtcdEndpoint:
    """One etcd client URL: `url` is what users wrote, normalised (`https://host:port`).

    `scheme` is `http` or `https` (TLS); a `host:port` without one takes the default
    scheme the caller gives (https when TLS files are configured)."""

    host: str
    port: int
    scheme: str = "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}"

    @property
    def secure(self) -> bool:
        return self.scheme == "https"

    @property
    def netloc(self) -> str:
        """`host:port` as gRPC wants it (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoints(
    spec: str | Sequence[str], *, default_scheme: str = "http"
) -> tuple[EtcdEndpoint, ...]:
    """Parse a comma-separated endpoint list (or a sequence of them) into endpoints.

    Accepts `http://host:port`, `https://host:port`, `host:port` (`default_scheme`),
    `host` (port 2379), IPv6 as `[::1]:2379`. Raises ValueError naming the bad item for
    anything else, and for a list that mixes http and https. Duplicates are dropped;
    order is kept.
    """
    items = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    endpoints: list[EtcdEndpoint] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        endpoint = _parse_one(item, default_scheme)
        if endpoint not in endpoints:
            endpoints.append(endpoint)
    if not endpoints:
        raise ValueError("no etcd endpoint given (expected e.g. http://127.0.0.1:2379)")
    if len({e.scheme for e in endpoints}) > 1:
        raise ValueError(
            f"etcd endpoints {describe(endpoints)}: mix http:// and https:// "
            "(one etcd cluster speaks one of them)"
        )
    return tuple(endpoints)


def _parse_one(item: str, default_scheme: str) -> EtcdEndpoint:
    rest = item
    scheme = default_scheme
    if "://" in item:
        scheme, rest = item.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(
                f"etcd endpoint {item!r}: unknown scheme {scheme!r}, use http:// or https://"
            )
    rest = rest.rstrip("/")
    if "/" in rest or "@" in rest or "?" in rest:
        raise ValueError(f"etcd endpoint {item!r}: expected {scheme}://host:port")
    host, port_text = _split_host_port(rest, item)
    port = DEFAULT_CLIENT_PORT
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"etcd endpoint {item!r}: invalid port {port_text!r}")
        port = int(port_text)
    if not host:
        raise ValueError(f"etcd endpoint {item!r}: missing host")
    return EtcdEndpoint(host=host, port=port, scheme=scheme)


def _split_host_port(text: str, item: str) -> tuple[str, str | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"etcd endpoint {item!r}: unclosed '[' in IPv6 address")
        host, tail = text[1:end], text[end + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"etcd endpoint {item!r}: invalid IPv6 address {host!r}") from None
        if not tail:
            return host, None
        if not tail.startswith(":"):
            raise ValueError(f"etcd endpoint {item!r}: expected ':port' after ']'")
        return host, tail[1:]
    if text.count(":") > 1:
        raise ValueError(f"etcd endpoint {item!r}: write IPv6 addresses as [addr]:port")
    if ":" in text:
        host, port_text = text.split(":", 1)
        return host, port_text
    return text, None


def describe(endpoints: Sequence[EtcdEndpoint]) -> str:
    """`http://a:2379,http://b:2379`: how error messages name the endpoints."""
    return ",".join(e.url for e in endpoints)
