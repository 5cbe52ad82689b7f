"""`meshhealth agent`: the long-running prober of one node."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Awaitable, Callable

from meshhealth import defaults
from meshhealth.agent.config.agent_config import ENV_ETCD_PASSWORD, AgentConfig, ConfigError
from meshhealth.agent.config.sources import add_agent_arguments, load_agent_config
from meshhealth.cli.common import print_error, refuse_password_flag
from meshhealth.log_format import LOG_FORMATS, configure_logging

log = logging.getLogger("meshhealth.agent")

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
    refuse_password_flag(parser)
    parser.add_argument(
        "--log-level",
        default=os.environ.get("MESHHEALTH_LOG_LEVEL", "info"),
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr [MESHHEALTH_LOG_LEVEL; default: info]",
    )
    parser.add_argument(
        "--log-format",
        default=os.environ.get("MESHHEALTH_LOG_FORMAT", "text"),
        choices=["text", "json"],
        help="log lines as text, or one JSON object per line with stable field names (ts, "
        "level, logger, msg, cluster, node, event, ...) [MESHHEALTH_LOG_FORMAT; default: text]",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.log_format not in LOG_FORMATS:  # from MESHHEALTH_LOG_FORMAT: argparse never saw it
        print_error("agent", f"MESHHEALTH_LOG_FORMAT: {args.log_format!r} is not one of text, json")
        return 2
    try:
        config = load_agent_config(vars(args), os.environ)
    except ConfigError as exc:
        print_error("agent", str(exc))
        return 2
    # The password is in the config now: no child (`ip`, the health endpoint) inherits it.
    os.environ.pop(ENV_ETCD_PASSWORD, None)
    configure_logging(
        args.log_format, level=args.log_level, cluster=config.cluster, node=config.node
    )
    from meshhealth.agent.app import run_agent_until_signal
    from meshhealth.agent.capability_needs import keep_only_needed
    from meshhealth.gc_tuning import tune_gc_for_probing

    log.info("%s", keep_only_needed(config))  # before trio: still one thread

    tune_gc_for_probing()  # probe rounds allocate many short-lived objects: see docs
    return run_agent_process(config, run_agent_until_signal)


def run_agent_process(config: AgentConfig, runner: Callable[[AgentConfig], Awaitable[None]]) -> int:
    """trio.run the agent; a start-up error is one line and exit 2, whatever the timing.

    A start-up error (socket in use, port taken, node name taken) cancels every other
    task of the agent; one of them may fail on its way out at the same moment (a
    `nursery.start` cut short, a child process gone), and then the error reaches us
    inside an exception group next to that consequence. The start-up error is the cause:
    it is what users read; the rest is logged at debug level.
    """
    import trio

    try:
        trio.run(runner, config)
    except BaseException as exc:  # re-raised below unless it holds a start-up error
        cause = start_error_in(exc)
        if cause is None:
            raise
        for other in _leaves(exc):
            if other is not cause:
                log.debug("while the agent stopped: %r", other)
        print_error("agent", str(cause))
        return 2
    return 0


def start_error_in(error: BaseException) -> BaseException | None:
    """The first start-up error among the leaves of `error` (itself when it is one)."""
    from meshhealth.agent.app import AgentStartError
    from meshhealth.agent.membership.registrar import NodeNameTaken

    for leaf in _leaves(error):
        if isinstance(leaf, AgentStartError | NodeNameTaken):
            return leaf
    return None


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for child in error.exceptions for leaf in _leaves(child)]
    return [error]
