"""The agent's options, one row each: name, parser, default, help (pure data).

The argparse flags (`Option.flag`), the environment variables (`Option.env`), the TOML
keys (`Option.name`) and docs/configuration.md all come from OPTIONS; config.py resolves
them into an AgentConfig. A new option is one row here (its parser from values.py),
one field of AgentConfig and, when its default needs a reason, one constant in
meshhealth.defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meshhealth import defaults
from meshhealth.agent.config import values


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
        "web_allowed_hosts",
        values.host_names,
        (),
        "more host names the web page answers to (its listen address, this node's NodeIPs "
        "and loopback names always): a request with another Host is refused (DNS rebinding)",
        metavar="NAME,...",
    ),
    Option(
        "web_cert",
        values.as_str,
        None,
        "serve the web page over HTTPS (and its feed over wss) with this certificate "
        "chain (PEM); needs --web-key",
        metavar="FILE",
    ),
    Option(
        "web_key",
        values.as_str,
        None,
        "the key of --web-cert (PEM, readable by its owner only)",
        metavar="FILE",
    ),
    Option(
        "web_token_file",
        values.as_str,
        None,
        "the web page's JSON and feed need this bearer token (the file holds it, owner-"
        "only); open the page once as /?token=TOKEN",
        metavar="FILE",
    ),
    Option(
        "metrics_cert",
        values.as_str,
        None,
        "serve /metrics over HTTPS with this certificate chain (PEM); needs --metrics-key",
        metavar="FILE",
    ),
    Option(
        "metrics_key",
        values.as_str,
        None,
        "the key of --metrics-cert (PEM, readable by its owner only)",
        metavar="FILE",
    ),
    Option(
        "metrics_token_file",
        values.as_str,
        None,
        "/metrics needs Authorization: Bearer with this token (the file holds it, owner-only)",
        metavar="FILE",
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
        "route_cidrs_within",
        values.cidr_list,
        (),
        "with --route-cidrs: route only peer CIDRs inside these networks (default: any "
        "not broader than /16 or /48; never one covering a NodeIP, this node's or etcd's "
        "address)",
        metavar="CIDR,...",
        default_text="any not broader than /16, /48",
    ),
    Option(
        "allowed_node_cidrs",
        values.cidr_list,
        (),
        "probe (and take indirect-probe requests from) only peers whose NodeIPs and "
        "HealthIPs are inside these networks (default: any but loopback, link-local, "
        "multicast, unspecified)",
        metavar="CIDR,...",
        default_text="any unicast",
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
        "endpoint_user",
        values.user_name,
        defaults.ENDPOINT_USER,
        "user the health endpoint's responder runs as once its sockets are open (with "
        "its primary group, no capabilities, no_new_privs) when the agent is root; a "
        "user with uid 0 keeps root without capabilities",
        metavar="USER",
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
        "udp_source_ports",
        values.udp_source_ports,
        defaults.UDP_PROBE_SOURCE_PORTS,
        "UDP echo datagrams sent to each NodeIP per round, each from its own source port "
        "(path node/udp; 0: no UDP probe)",
        metavar="N",
    ),
    Option(
        "udp_port",
        values.port,
        defaults.UDP_ECHO_PORT,
        "UDP port of the echo responder (all nodes; the /hello port's number by default)",
        metavar="PORT",
    ),
    Option(
        "probe_tcp_ports",
        values.tcp_ports,
        (),
        "TCP ports to connect to on each NodeIP every round, comma-separated (paths "
        f"node/tcp:PORT; at most {defaults.TCP_PROBE_MAX_PORTS}); refused and timed out "
        "are told apart",
        metavar="PORTS",
        default_text="none",
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
