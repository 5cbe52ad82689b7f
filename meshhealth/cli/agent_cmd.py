"""`meshhealth agent`: the long-running prober of one node."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from meshhealth import defaults
from meshhealth.agent.config import ConfigError
from meshhealth.agent.config_sources import add_agent_arguments, load_agent_config
from meshhealth.cli.common import print_error

DESCRIPTION = f"""\
Run the meshhealth agent of this node: register it in etcd, discover peers, probe every
peer's NodeIP and HealthIP over ICMP and HTTP every interval, answer peers' probes on
NodeIP:{defaults.HTTP_PORT}, and serve the admin API on a unix socket (from the first
second). SIGTERM/SIGINT: the node leaves etcd at once, the socket is removed, exit 0.

Every flag also reads from MESHHEALTH_<FLAG> and from a TOML file (--config); flags win.

examples:
  meshhealth agent --etcd http://10.0.0.1:2379 --node-ip 10.0.0.5 \\
      --health-ip 10.200.5.2 --cidr 10.200.5.0/24
  meshhealth agent --cluster lab1 --node node1 --node-ip 127.0.1.1 \\
      --health-mode loopback --health-ip 127.0.2.1 --socket /tmp/node1.sock --interval 2
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "agent",
        help="run the node agent (probes peers, serves status)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_agent_arguments(parser)
    parser.add_argument(
        "--log-level",
        default=os.environ.get("MESHHEALTH_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr [MESHHEALTH_LOG_LEVEL; default: info]",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_agent_config(vars(args), os.environ)
    except ConfigError as exc:
        print_error("agent", str(exc))
        return 2
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s %(levelname)s {config.cluster}/{config.node} %(name)s: %(message)s",
        stream=sys.stderr,
    )
    import trio

    from meshhealth.agent.app import AgentStartError, run_agent_until_signal
    from meshhealth.gc_tuning import tune_gc_for_probing

    tune_gc_for_probing()  # probe rounds allocate many short-lived objects: see docs
    try:
        trio.run(run_agent_until_signal, config)
    except AgentStartError as exc:
        print_error("agent", str(exc))
        return 2
    return 0
