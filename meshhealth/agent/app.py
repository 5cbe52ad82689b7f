"""The agent process: its components started in one nursery, stopped on a signal.

    trio.run(run_agent_until_signal, config)        # `meshhealth agent`

`build_components` (meshhealth.agent.components) makes the parts; this module starts
each with `nursery.start`, in the order users need:

1. the admin API, so `meshhealth status` answers within a second, before etcd is
   reachable or a round has run; then the live feed and /metrics;
2. the /hello responder that peers probe (and ask for indirect probes);
3. etcd: the registrar, discovery, the clustermesh, the publisher (and with
   --route-cidrs the node entries and the routes), then the cluster view: the
   aggregator election, the aggregator and the summary follower;
4. the health endpoint, before the first round (probing our own endpoint before it
   was started would report it down);
5. indirect probes (asking peers about failed paths), the agent's work between rounds
   (the paths' suspicion timer, changes of verdicts and summaries), then the prober
   loop, whose first round starts at once.

Nothing here waits on etcd or on a round. A problem users must fix (socket in use,
port taken, name taken, a bad mesh configuration) is an AgentStartError: one line.
"""

from __future__ import annotations

import functools
import logging
import signal
import ssl
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial

import trio

from meshhealth import defaults
from meshhealth.addresses import format_address
from meshhealth.agent.cluster_view.timeline import read_cluster_events
from meshhealth.agent.components import AgentComponents, build_components
from meshhealth.agent.config.agent_config import AgentConfig
from meshhealth.agent.etcd_access import agent_etcd_access
from meshhealth.agent.membership.clustermesh import MeshConfigError
from meshhealth.agent.membership.mesh_dir import load_remote_specs
from meshhealth.agent.membership.registrar import NodeNameTaken
from meshhealth.agent.serving.admin_api import serve_admin_api
from meshhealth.agent.serving.bearer_token import BearerToken, TokenFileError
from meshhealth.agent.serving.feed_server import serve_feed_tcp, serve_feed_unix
from meshhealth.agent.serving.metrics_server import serve_metrics
from meshhealth.agent.serving.server_tls import ServerTlsError, server_ssl_context
from meshhealth.agent.serving.unix_socket import AdminSocketError
from meshhealth.agent.serving.web_server import WebData, serve_web
from meshhealth.documents.feed import feed_socket_path
from meshhealth.kvstore import open_etcd
from meshhealth.kvstore.etcd_config import EtcdConfigError
from meshhealth.probe.icmp import Pinger, open_pinger
from meshhealth.probe.icmp_socket import PingerPermissionError
from meshhealth.probe.responder import serve_responder
from meshhealth.probe.udp_responder import EchoGate, serve_udp_echo

log = logging.getLogger("meshhealth.agent")


class AgentStartError(Exception):
    """The agent cannot run (socket in use, port taken, name taken); one line for users."""


async def _open_pinger_or_none(stack: AsyncExitStack) -> Pinger | None:
    """ICMP needs a raw socket; without the right the agent still probes over HTTP."""
    pinger = await stack.enter_async_context(open_pinger())
    try:
        pinger.open_socket_for("127.0.0.1")
    except PingerPermissionError as error:
        log.error("%s: ICMP paths will show as errors, HTTP probes go on", error)
        return None
    return pinger


async def _start(
    nursery: trio.Nursery, what: str, serve: Callable[..., Awaitable[object]], *args: object
) -> object:
    """Start a server task; a socket it cannot bind becomes one line for the user."""
    try:
        return await nursery.start(serve, *args)
    except AdminSocketError as error:
        raise AgentStartError(str(error)) from None
    except OSError as error:
        raise AgentStartError(f"cannot {what}: {error.strerror}") from None


def served_security(
    cert: str | None, key: str | None, token_file: str | None, what: str
) -> tuple[ssl.SSLContext | None, BearerToken | None]:
    """The TLS context and the bearer token of the web page or /metrics, from their
    files; a file that cannot be used is an AgentStartError naming it."""
    try:
        tls = server_ssl_context(cert, key) if cert is not None and key is not None else None
        token = BearerToken.from_file(token_file, what) if token_file is not None else None
    except (ServerTlsError, TokenFileError) as error:
        raise AgentStartError(f"--{what}: {error}") from None
    return tls, token


def web_data(parts: AgentComponents) -> WebData:
    """What `--web-listen` serves, from the agent's own components."""
    return WebData(
        local=(parts.config.cluster, parts.config.node),
        interval_s=parts.config.interval_s,
        status=parts.status.document,
        read_matrix=parts.matrix.read,
        read_events=functools.partial(
            read_cluster_events, parts.aggregator.etcd, parts.config.cluster
        ),
        history=parts.agent.history,
        feed=parts.feed,
        nodes=parts.probe_targets.nodes,
        node_ips=(parts.config.node_ip, parts.config.node_ip_secondary),
        allowed_hosts=parts.config.web_allowed_hosts,
    )


async def _start_serving(nursery: trio.Nursery, parts: AgentComponents) -> None:
    """The admin API, the live feed, /metrics, the /hello responder and the UDP echo."""
    config = parts.config
    await _start(nursery, "serve the admin API", serve_admin_api, config.socket, parts.admin)
    log.info("admin API on unix:%s", config.socket)
    feed_path = feed_socket_path(config.socket)
    await _start(nursery, "serve the feed", serve_feed_unix, feed_path, parts.feed)
    log.info("live feed on unix:%s", feed_path)
    if config.feed_listen is not None:
        host, port = config.feed_listen
        what = f"serve the feed on {host}:{port}"
        await _start(
            nursery,
            what,
            partial(
                serve_feed_tcp,
                node_ips=(config.node_ip, config.node_ip_secondary),
                peer_ips=web_data(parts).peer_ips,
            ),
            host,
            port,
            parts.feed,
        )
    if config.web_listen is not None:
        host, port = config.web_listen
        what = f"serve the web page on {host}:{port}"
        tls, token = served_security(config.web_cert, config.web_key, config.web_token_file, "web")
        serve = partial(serve_web, tls=tls, token=token)
        await _start(nursery, what, serve, host, port, web_data(parts))
    if config.metrics_listen is not None:
        host, port = config.metrics_listen
        what = f"serve metrics on {host}:{port}"
        tls, token = served_security(
            config.metrics_cert, config.metrics_key, config.metrics_token_file, "metrics"
        )
        serve = partial(serve_metrics, tls=tls, token=token)
        await _start(nursery, what, serve, host, port, parts.registry)
    for node_ip in (config.node_ip, config.node_ip_secondary):
        if node_ip is None:
            continue
        await _start(
            nursery,
            f"listen on {format_address(node_ip, config.http_port)}",
            partial(
                serve_responder,
                node_name=config.node,
                stats=parts.responder_stats,
                extra_routes=[parts.indirect_server.route(parts.indirect_budget_s)],
                reserved=defaults.RESPONDER_RESERVED_FOR_NODES,
                trusted=parts.indirect_server.is_registered,
            ),
            node_ip,
            config.http_port,
        )
        await _start(
            nursery,
            f"listen on {format_address(node_ip, config.udp_port)}/udp",
            partial(
                serve_udp_echo,
                gate=EchoGate(trusted=parts.indirect_server.is_registered),
                stats=parts.udp_echo_stats,
            ),
            node_ip,
            config.udp_port,
        )


async def _start_membership(nursery: trio.Nursery, parts: AgentComponents) -> None:
    """Registration, discovery, the clustermesh, publishing, and routes to peers."""
    await nursery.start(parts.registrar.run)
    await nursery.start(parts.discovery.run)
    await nursery.start(parts.retained.run)
    await nursery.start(parts.mesh.run)
    await nursery.start(parts.publisher.run)
    await nursery.start(parts.rollups.run)
    if parts.routes is not None and parts.peer_nodes is not None:
        await nursery.start(parts.routes.run)
        await nursery.start(parts.peer_nodes.run)
    await nursery.start(parts.election.run)
    await nursery.start(parts.aggregator.run)
    await nursery.start(parts.summaries.run)


async def run_agent(
    config: AgentConfig,
    *,
    task_status: trio.TaskStatus[AgentComponents] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until cancelled. Raises AgentStartError for problems users must fix."""
    async with AsyncExitStack() as stack:
        try:
            access = agent_etcd_access(config)
        except EtcdConfigError as error:
            raise AgentStartError(str(error)) from None
        etcd = await stack.enter_async_context(open_etcd(access))
        pinger = await _open_pinger_or_none(stack)
        try:
            mesh_specs = load_remote_specs(config.mesh, config.mesh_dir, config.cluster)
        except MeshConfigError as error:
            raise AgentStartError(str(error)) from None
        parts = build_components(config, etcd, pinger, mesh_specs)
        nursery = await stack.enter_async_context(trio.open_nursery())
        await _start_serving(nursery, parts)
        await _start_membership(nursery, parts)
        if parts.endpoint is not None:
            # started() comes when the responder is ready or its first attempt failed
            # (bounded by ENDPOINT_READY_TIMEOUT_S); the admin API answers meanwhile.
            await nursery.start(parts.endpoint.run)
        await nursery.start(parts.indirect.run)
        await nursery.start(parts.agent.run)
        await nursery.start(parts.loop.run)
        log.info(
            "agent %s/%s up: node_ip=%s health_ip=%s secondary=%s/%s interval=%ss",
            config.cluster,
            config.node,
            config.node_ip,
            config.health_ip,
            config.node_ip_secondary,
            config.health_ip_secondary,
            config.interval_s,
        )
        task_status.started(parts)


async def run_agent_until_signal(config: AgentConfig) -> None:
    """`meshhealth agent`: run until SIGTERM/SIGINT, then shut down cleanly."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_agent, config)

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        log.info("%s: shutting down", signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
        except* (AgentStartError, NodeNameTaken) as group:
            raise AgentStartError(str(_first_leaf(group))) from None


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
