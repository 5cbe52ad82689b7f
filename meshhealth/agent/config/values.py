"""Value parsers of the agent's options: a flag/env string or a TOML value -> typed value.

Pure. Each raises ValueError with a message fit for users; meshhealth.agent.config.agent_config adds
the source (flag, environment variable or file key). Where the project already has a
validator for a kind of value (node and cluster names in meshhealth.wire.keys, IP addresses
in meshhealth.wire.keys.canonical_ip, etcd endpoints in meshhealth.kvstore.endpoints), the
parser delegates to it, so a value the agent accepts at start is one the rest of the code
accepts too.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from meshhealth.defaults import (
    MTU_PROBE_AUTO,
    MTU_PROBE_OFF,
    TCP_PROBE_MAX_PORTS,
    UDP_PROBE_MAX_SOURCE_PORTS,
)
from meshhealth.kvstore.endpoints import parse_endpoints
from meshhealth.wire.keys import canonical_ip, validate_cluster_name, validate_node_name

HEALTH_MODES = ("loopback", "netns", "none")


def as_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value.strip()


def number(value: object) -> float:
    """A float from a flag/env string or a TOML number (a TOML bool is not a number)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {value!r}") from None


def positive_float(value: object) -> float:
    result = number(value)
    if not result > 0 or result == float("inf"):
        raise ValueError(f"must be a positive number, got {value!r}")
    return result


def non_negative_float(value: object) -> float:
    result = number(value)
    if not result >= 0 or result == float("inf"):
        raise ValueError(f"must be a number >= 0, got {value!r}")
    return result


def _integer(value: object) -> int:
    """An int, or the text of one (a bool is not an integer)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None


def _at_most(result: int, high: int, problem: str) -> int:
    """`result` when it is at most `high`, else ValueError(problem)."""
    if result > high:
        raise ValueError(problem)
    return result


def positive_int(value: object) -> int:
    result = _integer(value)
    if result <= 0:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return result


# Smallest don't-fragment probe: IPv6 and ICMPv6 headers + the 16-byte cookie.
MIN_MTU_PROBE_BYTES = 40 + 8 + 16
MAX_MTU_PROBE_BYTES = 65_535


def mtu_probe_size(value: object) -> int:
    """`auto` (defaults.MTU_PROBE_AUTO: the route's MTU), `off` or 0 (MTU_PROBE_OFF), or
    the IP packet size in bytes."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
        return MTU_PROBE_AUTO if value.strip().lower() == "auto" else MTU_PROBE_OFF
    size = non_negative_int(value)
    if size and not MIN_MTU_PROBE_BYTES <= size <= MAX_MTU_PROBE_BYTES:
        raise ValueError(
            f"must be auto, off (0) or {MIN_MTU_PROBE_BYTES}..{MAX_MTU_PROBE_BYTES} bytes, "
            f"got {value!r}"
        )
    return size


def non_negative_int(value: object) -> int:
    """An integer >= 0 (0 turns a feature off)."""
    result = _integer(value)
    if result < 0:
        raise ValueError(f"must be 0 or more, got {value!r}")
    return result


def port(value: object) -> int:
    return _at_most(positive_int(value), 65535, f"not a port number (1-65535): {value!r}")


def udp_source_ports(value: object) -> int:
    """Echo datagrams per UDP probe, each from its own source port; 0 turns it off."""
    high = UDP_PROBE_MAX_SOURCE_PORTS
    return _at_most(non_negative_int(value), high, f"must be 0..{high}, got {value!r}")


def tcp_ports(value: object) -> tuple[int, ...]:
    """`10250,22` (or a TOML list) -> (10250, 22): the ports the TCP connect probe opens
    on every NodeIP, in the order given, each once; `` (empty): none."""
    raw = value if isinstance(value, list | tuple) else [value]
    items = [p.strip() for item in raw for p in str(item).split(",") if p.strip()]
    ports = tuple(dict.fromkeys(port(item) for item in items))
    if len(ports) > TCP_PROBE_MAX_PORTS:
        raise ValueError(f"at most {TCP_PROBE_MAX_PORTS} ports, got {len(ports)}")
    return ports


def fraction(value: object) -> float:
    result = number(value)
    if not 0.0 <= result <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return result


def ip(value: object) -> str:
    """An IP address as the key and wire validators accept it (meshhealth.wire.keys)."""
    text = as_str(value)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"not an IP address: {value!r}") from None
    return canonical_ip(text)  # refuses scoped and IPv4-mapped addresses, says why


def cidr(value: object) -> str:
    try:
        return str(ipaddress.ip_network(as_str(value), strict=True))
    except ValueError as exc:
        raise ValueError(f"not a CIDR ({exc}): {value!r}") from None


def cidr_list(value: object) -> tuple[str, ...]:
    """`10.0.0.0/8,fd00::/8` (or a TOML list) -> ('10.0.0.0/8', 'fd00::/8'); host bits
    are refused, like --cidr's."""
    raw = value if isinstance(value, list | tuple) else [value]
    items = [part.strip() for item in raw for part in as_str(item).split(",") if part.strip()]
    if not items:
        raise ValueError("expected one or more CIDRs, comma-separated")
    return tuple(dict.fromkeys(cidr(item) for item in items))


def boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = as_str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean (true/false): {value!r}")


def endpoints(value: object) -> tuple[str, ...]:
    """`http://a:2379,http://b:2379` (or a TOML list) -> ('http://a:2379', ...).

    Each item is checked by meshhealth.kvstore.endpoints (the parser the etcd client
    uses), and must name its port: the agent never guesses one.
    """
    items: list[str] = []
    raw = value if isinstance(value, list | tuple) else [value]
    for item in raw:
        items.extend(part.strip() for part in as_str(item).split(",") if part.strip())
    if not items:
        raise ValueError("no etcd endpoint given")
    for item in items:
        hostport = item.split("://", 1)[-1]
        if ":" not in hostport:
            raise ValueError(f"etcd endpoint needs host:port: {item!r}")
        parse_endpoints(item)
    return tuple(items)


_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)


def host_names(value: object) -> tuple[str, ...]:
    """`mesh.example.com,10.0.0.5` (or a TOML list) -> lower-case DNS names and IP
    addresses, each checked."""
    raw = value if isinstance(value, list | tuple) else [value]
    items = [p.strip().lower() for item in raw for p in as_str(item).split(",") if p.strip()]
    for item in items:
        try:
            ipaddress.ip_address(item)
        except ValueError:
            if not _HOST_NAME.fullmatch(item):
                raise ValueError(f"not a host name or IP address: {item!r}") from None
    return tuple(items)


def listen(value: object) -> tuple[str, int]:
    """`IP:PORT` or `[IPv6]:PORT`; the port is required, so the last colon splits
    (unlike `responder --listen`, meshhealth.addresses.parse_listen)."""
    text = as_str(value)
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
    else:
        host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected IP:PORT, got {value!r}")
    return ip(host), port(port_text)


def netns_name(value: object) -> str:
    """A network namespace name: a file name under /run/netns."""
    name = as_str(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", name):
        raise ValueError(f"not a namespace name (letters, digits, . _ -; <= 64): {value!r}")
    return name


def user_name(value: object) -> str:
    """A user of this host (in the passwd database)."""
    import pwd

    name = as_str(value)
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"no such user on this host: {value!r}") from None
    return name


def cluster_id(value: object) -> int:
    return _at_most(positive_int(value), 255, f"must be 1..255, got {value!r}")


def cluster_name(value: object) -> str:
    return validate_cluster_name(as_str(value))


def node_name(value: object) -> str:
    return validate_node_name(as_str(value))


def health_mode(value: object) -> str:
    mode = as_str(value).lower()
    if mode not in HEALTH_MODES:
        raise ValueError(f"must be one of {', '.join(HEALTH_MODES)}, got {value!r}")
    return mode


def mesh(value: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`NAME=URLS` items (flag repeated, env `;`-separated, TOML table or list)."""
    pairs: list[tuple[str, tuple[str, ...]]] = []
    if isinstance(value, Mapping):
        items = [f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [as_str(v) for v in value]
    else:
        items = [part for part in as_str(value).split(";") if part.strip()]
    for item in items:
        name, sep, urls = item.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=URLS, got {item!r}")
        pairs.append((validate_cluster_name(name.strip()), endpoints(urls)))
    return tuple(pairs)
