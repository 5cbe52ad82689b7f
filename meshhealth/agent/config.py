"""Agent configuration: one table of options, three sources, one resolver (pure).

Precedence: command-line flag > `MESHHEALTH_<NAME>` environment variable > TOML config file
(`--config PATH` / `MESHHEALTH_CONFIG`) > the default from meshhealth.defaults.

The argparse flags, the environment variable names and the TOML keys are all derived from
OPTIONS, so they cannot drift apart; docs/agent.md is checked against it by a test.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from meshhealth import defaults
from meshhealth.keys import validate_cluster_name, validate_node_name

HEALTH_MODES = ("loopback", "netns", "none")


class ConfigError(ValueError):
    """A bad option value; the message names the source (flag, env var or file)."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    etcd: tuple[str, ...]
    cluster: str
    node: str
    node_ip: str
    health_ip: str | None
    cidrs: tuple[str, ...]
    socket: str
    interval_s: float
    timeout_s: float
    http_port: int
    metrics_listen: tuple[str, int] | None
    health_mode: str
    route_cidrs: bool
    max_in_flight: int
    lease_ttl_s: int
    mesh: tuple[tuple[str, tuple[str, ...]], ...] = ()
    mesh_dir: str | None = None
    cluster_id: int | None = None  # None: derived from the cluster name (clustermesh)
    spread_fraction: float = defaults.ROUND_SPREAD_FRACTION
    icmp_count: int = defaults.ICMP_COUNT
    stats_window: int = defaults.STATS_WINDOW
    feed_listen: tuple[str, int] | None = None
    health_netns: str | None = None  # None: mh-health-<cluster>-<node>

    @property
    def spread_s(self) -> float:
        return self.interval_s * self.spread_fraction


# --- value parsers: str (flag/env) or TOML value -> typed value; raise ValueError ---------


def _as_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value.strip()


def _number(value: object) -> float:
    """A float from a flag/env string or a TOML number (a TOML bool is not a number)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {value!r}") from None


def _positive_float(value: object) -> float:
    number = _number(value)
    if not number > 0 or number == float("inf"):
        raise ValueError(f"must be a positive number, got {value!r}")
    return number


def _positive_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if not isinstance(value, int | str):
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None
    if number <= 0:
        raise ValueError(f"must be a positive integer, got {value!r}")
    return number


def _port(value: object) -> int:
    port = _positive_int(value)
    if port > 65535:
        raise ValueError(f"not a port number (1-65535): {value!r}")
    return port


def _fraction(value: object) -> float:
    number = _number(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def _ip(value: object) -> str:
    try:
        return str(ipaddress.ip_address(_as_str(value)))
    except ValueError:
        raise ValueError(f"not an IP address: {value!r}") from None


def _cidr(value: object) -> str:
    try:
        return str(ipaddress.ip_network(_as_str(value), strict=True))
    except ValueError as exc:
        raise ValueError(f"not a CIDR ({exc}): {value!r}") from None


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = _as_str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean (true/false): {value!r}")


def _endpoints(value: object) -> tuple[str, ...]:
    """`http://a:2379,http://b:2379` (or a TOML list) -> ('http://a:2379', ...)."""
    items: list[str] = []
    raw = value if isinstance(value, list | tuple) else [value]
    for item in raw:
        items.extend(part.strip() for part in _as_str(item).split(",") if part.strip())
    if not items:
        raise ValueError("no etcd endpoint given")
    for item in items:
        hostport = item.split("://", 1)[-1]
        if ":" not in hostport:
            raise ValueError(f"etcd endpoint needs host:port: {item!r}")
    return tuple(items)


def _listen(value: object) -> tuple[str, int]:
    """`IP:PORT` or `[IPv6]:PORT`; the port is required, so the last colon splits
    (unlike `responder --listen`, meshhealth.addresses.parse_listen)."""
    text = _as_str(value)
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected IP:PORT, got {value!r}")
    return _ip(host), _port(port)


def _netns_name(value: object) -> str:
    """A network namespace name: a file name under /run/netns."""
    name = _as_str(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", name):
        raise ValueError(f"not a namespace name (letters, digits, . _ -; <= 64): {value!r}")
    return name


def _cluster_id(value: object) -> int:
    number = _positive_int(value)
    if number > 255:
        raise ValueError(f"must be 1..255, got {value!r}")
    return number


def _health_mode(value: object) -> str:
    mode = _as_str(value).lower()
    if mode not in HEALTH_MODES:
        raise ValueError(f"must be one of {', '.join(HEALTH_MODES)}, got {value!r}")
    return mode


def _mesh(value: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`NAME=URLS` items (flag repeated, env `;`-separated, TOML table or list)."""
    pairs: list[tuple[str, tuple[str, ...]]] = []
    if isinstance(value, Mapping):
        items = [f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in value.items()]
    elif isinstance(value, list | tuple):
        items = [_as_str(v) for v in value]
    else:
        items = [part for part in _as_str(value).split(";") if part.strip()]
    for item in items:
        name, sep, urls = item.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=URLS, got {item!r}")
        pairs.append((validate_cluster_name(name.strip()), _endpoints(urls)))
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class Option:
    name: str  # attribute of AgentConfig, TOML key; flag is --name-with-dashes
    parse: Callable[[object], Any]
    default: Any
    help: str
    repeatable: bool = False
    flag_only_bool: bool = False  # a switch (--route-cidrs)
    metavar: str | None = None
    flag_name: str | None = None  # when the flag is not derived from the name

    @property
    def flag(self) -> str:
        return "--" + (self.flag_name or self.name.removesuffix("_s").replace("_", "-"))

    @property
    def env(self) -> str:
        return "MESHHEALTH_" + self.flag.removeprefix("--").replace("-", "_").upper()


OPTIONS: tuple[Option, ...] = (
    Option(
        "etcd",
        _endpoints,
        (defaults.DEFAULT_ETCD,),
        "etcd endpoints, comma-separated",
        metavar="URLS",
    ),
    Option(
        "cluster",
        lambda v: validate_cluster_name(_as_str(v)),
        defaults.DEFAULT_CLUSTER,
        "cluster name",
        metavar="NAME",
    ),
    Option(
        "node",
        lambda v: validate_node_name(_as_str(v)),
        None,
        "node name (default: the host name)",
        metavar="NAME",
    ),
    Option(
        "node_ip",
        _ip,
        None,
        "this node's IP (probed by peers; the responder listens here)",
        metavar="IP",
    ),
    Option(
        "health_ip", _ip, None, "the health endpoint's IP (from --cidr in netns mode)", metavar="IP"
    ),
    Option(
        "cidrs",
        _cidr,
        (),
        "a pod CIDR of this node (repeatable)",
        repeatable=True,
        metavar="CIDR",
        flag_name="cidr",
    ),
    Option("socket", _as_str, defaults.ADMIN_SOCKET, "admin API unix socket", metavar="PATH"),
    Option(
        "interval_s",
        _positive_float,
        defaults.PROBE_INTERVAL_S,
        "seconds between probe rounds",
        metavar="SECONDS",
    ),
    Option(
        "timeout_s",
        _positive_float,
        defaults.PROBE_TIMEOUT_S,
        "per-probe timeout, seconds",
        metavar="SECONDS",
    ),
    Option(
        "http_port",
        _port,
        defaults.HTTP_PORT,
        "port of the /hello responder (all nodes)",
        metavar="PORT",
    ),
    Option(
        "metrics_listen", _listen, None, "serve Prometheus metrics on IP:PORT", metavar="IP:PORT"
    ),
    Option(
        "feed_listen",
        _listen,
        None,
        "also serve the live WebSocket feed (meshhealth watch --url) on IP:PORT",
        metavar="IP:PORT",
    ),
    Option(
        "health_mode",
        _health_mode,
        "netns",
        "health endpoint: netns (own namespace, root), loopback (127.x, tests), none",
        metavar="MODE",
    ),
    Option(
        "route_cidrs",
        _bool,
        False,
        "program routes to peers' CIDRs via their NodeIPs",
        flag_only_bool=True,
    ),
    Option(
        "max_in_flight",
        _positive_int,
        defaults.MAX_PROBES_IN_FLIGHT,
        "most probes in flight at once",
        metavar="N",
    ),
    Option(
        "lease_ttl_s",
        _positive_int,
        defaults.LEASE_TTL_S,
        "etcd lease TTL of this node's entries, seconds",
        metavar="SECONDS",
    ),
    Option(
        "mesh",
        _mesh,
        (),
        "a remote cluster NAME=URLS (repeatable)",
        repeatable=True,
        metavar="NAME=URLS",
    ),
    Option(
        "mesh_dir",
        _as_str,
        None,
        "directory with one file per remote cluster (its etcd URLs)",
        metavar="DIR",
    ),
    Option(
        "cluster_id",
        _cluster_id,
        None,
        "numeric cluster id 1..255, unique among meshed clusters "
        "(default: derived from the cluster name)",
        metavar="ID",
    ),
    Option(
        "health_netns",
        _netns_name,
        None,
        "namespace of the health endpoint in netns mode (default: mh-health-<cluster>-<node>)",
        metavar="NAME",
    ),
    Option(
        "spread_fraction",
        _fraction,
        defaults.ROUND_SPREAD_FRACTION,
        "fraction of the interval over which a round's probes start",
        metavar="F",
    ),
    Option(
        "icmp_count",
        _positive_int,
        defaults.ICMP_COUNT,
        "ICMP echo requests per probe",
        metavar="N",
    ),
    Option(
        "stats_window",
        _positive_int,
        defaults.STATS_WINDOW,
        "results kept per path for loss and percentiles",
        metavar="N",
    ),
)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags from OPTIONS. Defaults stay None so the resolver can tell 'not given'."""
    parser.add_argument("--config", metavar="FILE", help="TOML config file (MESHHEALTH_CONFIG)")
    for option in OPTIONS:
        help_text = f"{option.help} [{option.env}; default: {_show_default(option)}]"
        if option.flag_only_bool:
            parser.add_argument(
                option.flag,
                dest=option.name,
                action="store_const",
                const="true",
                default=None,
                help=help_text,
            )
        elif option.repeatable:
            parser.add_argument(
                option.flag,
                dest=option.name,
                action="append",
                default=None,
                metavar=option.metavar,
                help=help_text,
            )
        else:
            parser.add_argument(
                option.flag, dest=option.name, default=None, metavar=option.metavar, help=help_text
            )


def _show_default(option: Option) -> str:
    if option.default is None or option.default == ():
        return {
            "node": "host name",
            "cluster_id": "from the cluster name",
            "health_netns": "mh-health-<cluster>-<node>",
        }.get(option.name, "none")
    if isinstance(option.default, tuple):
        return ",".join(str(item) for item in option.default)
    if isinstance(option.default, bool):
        return "off"
    return str(option.default)


def _parse_one(option: Option, value: object, where: str) -> Any:
    try:
        if option.repeatable and option.name != "mesh":
            values = (
                value
                if isinstance(value, list | tuple)
                else [part for part in _as_str(value).split(",") if part.strip()]
            )
            return tuple(option.parse(item) for item in values)
        return option.parse(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def resolve_config(
    flags: Mapping[str, object],
    env: Mapping[str, str],
    file_values: Mapping[str, object],
    *,
    file_name: str = "config file",
    hostname: Callable[[], str] = socket.gethostname,
) -> AgentConfig:
    """Merge the three sources over the defaults; validate the whole; raise ConfigError."""
    unknown = sorted(set(file_values) - set(OPTIONS_BY_NAME) - {"config"})
    if unknown:
        raise ConfigError(f"{file_name}: unknown key {unknown[0]!r}")
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if flags.get(option.name) is not None:
            values[option.name] = _parse_one(option, flags[option.name], option.flag)
        elif option.env in env:
            values[option.name] = _parse_one(option, env[option.env], option.env)
        elif option.name in file_values:
            values[option.name] = _parse_one(
                option, file_values[option.name], f"{file_name}: {option.name}"
            )
        else:
            values[option.name] = option.default
    if values["node"] is None:
        try:
            values["node"] = validate_node_name(hostname().split(".")[0].lower())
        except ValueError as exc:
            raise ConfigError(f"--node: the host name is not a valid node name ({exc})") from None
    if values["node_ip"] is None:
        raise ConfigError("--node-ip: required (the address peers probe, e.g. --node-ip 10.0.0.5)")
    mode = values["health_mode"]
    if mode != "none" and values["health_ip"] is None:
        raise ConfigError(
            f"--health-ip: required with --health-mode {mode} (or --health-mode none)"
        )
    if mode == "loopback" and not ipaddress.ip_address(values["health_ip"]).is_loopback:
        raise ConfigError(
            f"--health-ip: loopback mode needs a loopback address, got {values['health_ip']}"
        )
    if mode == "none":
        values["health_ip"] = None
    if values["timeout_s"] >= values["interval_s"]:
        raise ConfigError(
            "--timeout: must be shorter than --interval "
            f"({values['timeout_s']} >= {values['interval_s']})"
        )
    names = [name for name, _ in values["mesh"]]
    if values["cluster"] in names:
        raise ConfigError(f"--mesh: {values['cluster']!r} is this agent's own cluster")
    if len(set(names)) != len(names):
        raise ConfigError("--mesh: a remote cluster is named twice")
    return AgentConfig(**values)
