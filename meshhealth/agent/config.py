"""Agent configuration: one table of options and one resolver over three sources (pure).

Precedence: command-line flag > `MESHHEALTH_<NAME>` environment variable > TOML config file
(`--config PATH` / `MESHHEALTH_CONFIG`) > the default from meshhealth.defaults.

The argparse flags, the environment variable names and the TOML keys are all derived from
OPTIONS (meshhealth.agent.config_sources turns them into flags and reads the file), so
they cannot drift apart; docs/configuration.md is generated from OPTIONS and checked by a
test. A new option is one field of AgentConfig, one row of OPTIONS (its parser from
meshhealth.agent.config_values) and, when it has a default worth a reason, one constant
in meshhealth.defaults.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meshhealth import defaults
from meshhealth.agent import config_values as values
from meshhealth.keys import validate_node_name

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
    stats_window: int = defaults.STATS_WINDOW
    feed_listen: tuple[str, int] | None = None
    health_netns: str | None = None  # None: mh-health-<cluster>-<node>
    web_listen: tuple[str, int] | None = None  # the live web page (docs/ui.md)
    # the probe plan (docs/scale.md): targets per node past the full-mesh size, or a
    # full mesh at any size
    probe_targets: int = defaults.PLAN_PROBE_TARGETS
    full_mesh: bool = False
    # indirect probes (docs/indirect-probes.md): helpers asked per failed target (0: never
    # ask), and how often each peer may ask this agent (requests per second)
    indirect_helpers: int = defaults.INDIRECT_HELPERS
    indirect_rate: float = defaults.INDIRECT_RATE_PER_S
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
    default_text: str | None = None  # how --help and the docs show a computed default

    @property
    def flag(self) -> str:
        return "--" + (self.flag_name or self.name.removesuffix("_s").replace("_", "-"))

    @property
    def env(self) -> str:
        return "MESHHEALTH_" + self.flag.removeprefix("--").replace("-", "_").upper()


OPTIONS: tuple[Option, ...] = (
    Option(
        "etcd",
        values.endpoints,
        (defaults.DEFAULT_ETCD,),
        "etcd endpoints, comma-separated",
        metavar="URLS",
    ),
    Option(
        "etcd_config",
        values.as_str,
        None,
        "etcd configuration file, Cilium's shape: endpoints, trusted-ca-file, cert-file, "
        "key-file (--etcd and the --etcd-* files override it)",
        metavar="FILE",
    ),
    Option(
        "etcd_ca", values.as_str, None, "CA certificate (PEM) that signs etcd's", metavar="FILE"
    ),
    Option("etcd_cert", values.as_str, None, "client certificate (PEM) for etcd", metavar="FILE"),
    Option("etcd_key", values.as_str, None, "client key (PEM) for etcd", metavar="FILE"),
    Option("etcd_user", values.as_str, None, "etcd user name", metavar="NAME"),
    Option(
        "etcd_password_file",
        values.as_str,
        None,
        "file with the etcd user's password (or MESHHEALTH_ETCD_PASSWORD; never a flag)",
        metavar="FILE",
    ),
    Option(
        "cluster",
        values.cluster_name,
        defaults.DEFAULT_CLUSTER,
        "cluster name",
        metavar="NAME",
    ),
    Option(
        "node",
        values.node_name,
        None,
        "node name (default: the host name)",
        metavar="NAME",
        default_text="host name",
    ),
    Option(
        "node_ip",
        values.ip,
        None,
        "this node's IP (probed by peers; the responder listens here)",
        metavar="IP",
    ),
    Option(
        "health_ip",
        values.ip,
        None,
        "the health endpoint's IP (from --cidr in netns mode)",
        metavar="IP",
    ),
    Option(
        "node_ip_secondary",
        values.ip,
        None,
        "dual stack: this node's IP of the other family (probed too; the responder listens "
        "on both)",
        metavar="IP",
    ),
    Option(
        "health_ip_secondary",
        values.ip,
        None,
        "dual stack: the health endpoint's IP of the other family (needs --node-ip-secondary)",
        metavar="IP",
    ),
    Option(
        "cidrs",
        values.cidr,
        (),
        "a pod CIDR of this node (repeatable)",
        repeatable=True,
        metavar="CIDR",
        flag_name="cidr",
    ),
    Option("socket", values.as_str, defaults.ADMIN_SOCKET, "admin API unix socket", metavar="PATH"),
    Option(
        "interval_s",
        values.positive_float,
        defaults.PROBE_INTERVAL_S,
        "seconds between probe rounds",
        metavar="SECONDS",
    ),
    Option(
        "timeout_s",
        values.positive_float,
        defaults.PROBE_TIMEOUT_S,
        "per-probe timeout, seconds",
        metavar="SECONDS",
    ),
    Option(
        "http_port",
        values.port,
        defaults.HTTP_PORT,
        "port of the /hello responder (all nodes)",
        metavar="PORT",
    ),
    Option(
        "metrics_listen",
        values.listen,
        None,
        "serve Prometheus metrics on IP:PORT",
        metavar="IP:PORT",
    ),
    Option(
        "feed_listen",
        values.listen,
        None,
        "also serve the live WebSocket feed (meshhealth watch --url) on IP:PORT",
        metavar="IP:PORT",
    ),
    Option(
        "web_listen",
        values.listen,
        None,
        "serve the live web page of the mesh (docs/ui.md) on IP:PORT",
        metavar="IP:PORT",
    ),
    Option(
        "health_mode",
        values.health_mode,
        "netns",
        "health endpoint: netns (own namespace, root), loopback (127.x, tests), none",
        metavar="MODE",
    ),
    Option(
        "route_cidrs",
        values.boolean,
        False,
        "program routes to peers' CIDRs via their NodeIPs",
        flag_only_bool=True,
    ),
    Option(
        "probe_targets",
        values.positive_int,
        defaults.PLAN_PROBE_TARGETS,
        "nodes each agent probes per round past the full-mesh size, and so probers per "
        "node (docs/scale.md)",
        metavar="K",
    ),
    Option(
        "full_mesh",
        values.boolean,
        False,
        "probe every node every round at any cluster size (no subset plan)",
        flag_only_bool=True,
    ),
    Option(
        "max_in_flight",
        values.positive_int,
        defaults.MAX_PROBES_IN_FLIGHT,
        "most probes in flight at once",
        metavar="N",
    ),
    Option(
        "lease_ttl_s",
        values.positive_int,
        defaults.LEASE_TTL_S,
        "etcd lease TTL of this node's entries, seconds",
        metavar="SECONDS",
    ),
    Option(
        "agent_down_retention_s",
        values.non_negative_float,
        defaults.AGENT_DOWN_RETENTION_S,
        "how long a node whose agent's lease expired without a clean leave stays in view "
        "as agent-down, seconds (0: not at all)",
        metavar="SECONDS",
    ),
    Option(
        "mesh",
        values.mesh,
        (),
        "a remote cluster NAME=URLS (repeatable)",
        repeatable=True,
        metavar="NAME=URLS",
    ),
    Option(
        "mesh_dir",
        values.as_str,
        None,
        "directory with one file per remote cluster (its etcd URLs)",
        metavar="DIR",
    ),
    Option(
        "cluster_id",
        values.cluster_id,
        None,
        "numeric cluster id 1..255, unique among meshed clusters "
        "(default: derived from the cluster name)",
        metavar="ID",
        default_text="from the cluster name",
    ),
    Option(
        "health_netns",
        values.netns_name,
        None,
        "namespace of the health endpoint in netns mode (default: mh-health-<cluster>-<node>)",
        metavar="NAME",
        default_text="mh-health-<cluster>-<node>",
    ),
    Option(
        "spread_fraction",
        values.fraction,
        defaults.ROUND_SPREAD_FRACTION,
        "fraction of the interval over which a round's probes start",
        metavar="F",
    ),
    Option(
        "icmp_count",
        values.positive_int,
        defaults.ICMP_COUNT,
        "ICMP echo requests per probe",
        metavar="N",
    ),
    Option(
        "mtu_probe_size",
        values.mtu_probe_size,
        defaults.MTU_PROBE_SIZE,
        "IP packet size of the don't-fragment ICMP probe sent to each NodeIP next to the "
        "small ones (path node/icmp-df): auto (the MTU of the route to the target), "
        "off (or 0), or bytes",
        metavar="SIZE",
        default_text="auto",
    ),
    Option(
        "stats_window",
        values.positive_int,
        defaults.STATS_WINDOW,
        "results kept per path for loss and percentiles",
        metavar="N",
    ),
    Option(
        "indirect_helpers",
        values.non_negative_int,
        defaults.INDIRECT_HELPERS,
        "other agents asked to probe a target whose direct probe failed (0: never ask; "
        "docs/indirect-probes.md)",
        metavar="N",
    ),
    Option(
        "indirect_rate",
        values.positive_float,
        defaults.INDIRECT_RATE_PER_S,
        "indirect probe requests per second one peer may make of this agent",
        metavar="PER_S",
    ),
)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}


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
