"""Agent configuration: the resolver over three sources (pure), for the table of
options in options.py.

Precedence: command-line flag > `MESHHEALTH_<NAME>` environment variable > TOML config file
(`--config PATH` / `MESHHEALTH_CONFIG`) > the default from meshhealth.defaults.

The argparse flags, the environment variable names and the TOML keys are all derived from
OPTIONS (meshhealth.agent.config.sources turns them into flags and reads the file), so
they cannot drift apart; docs/configuration.md is generated from OPTIONS and checked by a
test. A new option is one field of AgentConfig, one row of OPTIONS (its parser from
meshhealth.agent.config.values) and, when it has a default worth a reason, one constant
in meshhealth.defaults.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meshhealth import defaults
from meshhealth.agent.config import values
from meshhealth.agent.config.options import OPTIONS, OPTIONS_BY_NAME, Option
from meshhealth.wire.keys import validate_node_name

HEALTH_MODES = values.HEALTH_MODES
# The etcd user's password comes from a file or from this variable, never from a flag.
ENV_ETCD_PASSWORD = "MESHHEALTH_ETCD_PASSWORD"


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
    # the don't-fragment MTU probe to each NodeIP: bytes, MTU_PROBE_AUTO or MTU_PROBE_OFF
    mtu_probe_size: int = defaults.MTU_PROBE_SIZE
    # the UDP echo probe to each NodeIP: datagrams (source ports) per probe, 0: none;
    # and the port the echo responder listens on (every node's)
    udp_source_ports: int = defaults.UDP_PROBE_SOURCE_PORTS
    udp_port: int = defaults.UDP_ECHO_PORT
    # TCP connect probes to each NodeIP: the operator's ports (none by default)
    probe_tcp_ports: tuple[int, ...] = ()
    stats_window: int = defaults.STATS_WINDOW
    feed_listen: tuple[str, int] | None = None
    health_netns: str | None = None  # None: mh-health-<cluster>-<node>
    endpoint_user: str = defaults.ENDPOINT_USER  # the responder's user (when root)
    web_listen: tuple[str, int] | None = None  # the live web page (docs/ui.md)
    web_allowed_hosts: tuple[str, ...] = ()  # more Host names it answers to
    # TLS and the bearer token of the web page and of /metrics (docs/security.md)
    web_cert: str | None = None
    web_key: str | None = None
    web_token_file: str | None = None
    metrics_cert: str | None = None
    metrics_key: str | None = None
    metrics_token_file: str | None = None
    # the probe plan (docs/scale.md): targets per node past the full-mesh size, or a
    # full mesh at any size
    probe_targets: int = defaults.PLAN_PROBE_TARGETS
    full_mesh: bool = False
    # indirect probes (docs/indirect-probes.md): helpers asked per failed target (0: never
    # ask), and how often each peer may ask this agent (requests per second)
    indirect_helpers: int = defaults.INDIRECT_HELPERS
    indirect_rate: float = defaults.INDIRECT_RATE_PER_S
    # forged node entries (docs/security.md): the networks peer CIDRs may be routed in,
    # and the networks peers' NodeIPs and HealthIPs must be in (() = the built-in rules)
    route_cidrs_within: tuple[str, ...] = ()
    allowed_node_cidrs: tuple[str, ...] = ()
    agent_down_retention_s: float = defaults.AGENT_DOWN_RETENTION_S
    # etcd TLS and user (meshhealth.agent.etcd_access turns them into an EtcdAccess);
    # `etcd` is () when it comes from the --etcd-config file.
    etcd_config: str | None = None
    etcd_ca: str | None = None
    etcd_cert: str | None = None
    etcd_key: str | None = None
    etcd_user: str | None = None
    etcd_password_file: str | None = None
    etcd_password: str | None = field(default=None, repr=False)  # MESHHEALTH_ETCD_PASSWORD
    # Dual stack: the node's and its health endpoint's address of the other family.
    node_ip_secondary: str | None = None
    health_ip_secondary: str | None = None

    @property
    def spread_s(self) -> float:
        return self.interval_s * self.spread_fraction


def _parse_one(option: Option, value: object, where: str) -> Any:
    try:
        if option.repeatable and option.name != "mesh":
            items = (
                value
                if isinstance(value, list | tuple)
                else [part for part in values.as_str(value).split(",") if part.strip()]
            )
            return tuple(option.parse(item) for item in items)
        return option.parse(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _family(ip: str) -> int:
    return ipaddress.ip_address(ip).version


def _check_dual_stack(chosen: Mapping[str, Any]) -> None:
    """The secondary addresses are of the other family, and pair with the primary ones
    family by family (what the node entry in etcd requires, docs/kvstore.md)."""
    node_ip, node_ip2 = chosen["node_ip"], chosen["node_ip_secondary"]
    health_ip, health_ip2 = chosen["health_ip"], chosen["health_ip_secondary"]
    if node_ip2 is None:
        if health_ip2 is not None:
            raise ConfigError("--health-ip-secondary: needs --node-ip-secondary")
        return
    if _family(node_ip2) == _family(node_ip):
        raise ConfigError(
            f"--node-ip-secondary: must be of the other family than --node-ip, got {node_ip2}"
        )
    if health_ip is not None and _family(health_ip) != _family(node_ip):
        raise ConfigError(
            f"--health-ip: a dual-stack node's HealthIP is of --node-ip's family, got {health_ip}"
        )
    if health_ip2 is not None and _family(health_ip2) != _family(node_ip2):
        raise ConfigError(
            f"--health-ip-secondary: must be of --node-ip-secondary's family, got {health_ip2}"
        )


def _check_served_files(chosen: Mapping[str, Any]) -> None:
    """A certificate comes with its key, and both (and a token file) with the port they
    protect."""
    for server in ("web", "metrics"):
        cert, key = chosen[f"{server}_cert"], chosen[f"{server}_key"]
        if (cert is None) != (key is None):
            given, missing = ("cert", "key") if key is None else ("key", "cert")
            raise ConfigError(f"--{server}-{given}: needs --{server}-{missing}")
        if chosen[f"{server}_listen"] is None:
            for what in ("cert", "key", "token_file"):
                if chosen[f"{server}_{what}"] is not None:
                    flag = f"--{server}-{what.replace('_', '-')}"
                    raise ConfigError(f"{flag}: needs --{server}-listen")


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
    chosen: dict[str, Any] = {}
    given: set[str] = set()
    for option in OPTIONS:
        if flags.get(option.name) is not None:
            chosen[option.name] = _parse_one(option, flags[option.name], option.flag)
        elif option.env in env:
            chosen[option.name] = _parse_one(option, env[option.env], option.env)
        elif option.name in file_values:
            chosen[option.name] = _parse_one(
                option, file_values[option.name], f"{file_name}: {option.name}"
            )
        else:
            chosen[option.name] = option.default
            continue
        given.add(option.name)
    if chosen["etcd_config"] is not None and "etcd" not in given:
        chosen["etcd"] = ()  # the endpoints of the etcd configuration file
    chosen["etcd_password"] = env.get(ENV_ETCD_PASSWORD) or None
    _check_served_files(chosen)
    if chosen["node"] is None:
        try:
            chosen["node"] = validate_node_name(hostname().split(".")[0].lower())
        except ValueError as exc:
            raise ConfigError(f"--node: the host name is not a valid node name ({exc})") from None
    if chosen["node_ip"] is None:
        raise ConfigError("--node-ip: required (the address peers probe, e.g. --node-ip 10.0.0.5)")
    mode = chosen["health_mode"]
    if mode != "none" and chosen["health_ip"] is None:
        raise ConfigError(
            f"--health-ip: required with --health-mode {mode} (or --health-mode none)"
        )
    for name in ("health_ip", "health_ip_secondary"):
        ip = chosen[name]
        if mode == "loopback" and ip is not None and not ipaddress.ip_address(ip).is_loopback:
            flag = OPTIONS_BY_NAME[name].flag
            raise ConfigError(f"{flag}: loopback mode needs a loopback address, got {ip}")
    if mode == "none":
        chosen["health_ip"] = None
        chosen["health_ip_secondary"] = None
    _check_dual_stack(chosen)
    if chosen["timeout_s"] >= chosen["interval_s"]:
        raise ConfigError(
            "--timeout: must be shorter than --interval "
            f"({chosen['timeout_s']} >= {chosen['interval_s']})"
        )
    names = [name for name, _ in chosen["mesh"]]
    if chosen["cluster"] in names:
        raise ConfigError(f"--mesh: {chosen['cluster']!r} is this agent's own cluster")
    if len(set(names)) != len(names):
        raise ConfigError("--mesh: a remote cluster is named twice")
    return AgentConfig(**chosen)
