"""`GET /metrics` over TCP: the registry's text exposition for Prometheus (h11).

    port = await nursery.start(serve_metrics, "127.0.0.1", 9962, registry)

`GET /metrics` (and `GET /`) -> 200 `text/plain; version=0.0.4` (HEAD: its head); other
methods 405, other paths 404 (route_table.py). With `tls` (`--metrics-cert`,
`--metrics-key`: server_tls.py) the port speaks HTTPS only; with `token`
(`--metrics-token-file`: bearer_token.py) every request needs `Authorization: Bearer`
(401 otherwise).
"""

from __future__ import annotations

import ssl

import trio

from meshhealth import defaults
from meshhealth.agent.serving.bearer_token import BearerToken
from meshhealth.agent.serving.route_table import Route, RouteTable
from meshhealth.agent.serving.server_tls import tls_listener
from meshhealth.http_server import (
    HttpRequest,
    HttpResponse,
    ServerLimits,
    bound_port,
    open_tcp_listener,
    serve_http,
)
from meshhealth.metrics import CONTENT_TYPE, Registry

TEXT = "text/plain; charset=utf-8"


def metrics_routes(registry: Registry, token: BearerToken | None = None) -> RouteTable:
    """`GET /metrics` and `GET /`: the registry's exposition (with `token`: only to
    requests that carry it)."""

    async def expose(_: HttpRequest) -> HttpResponse:
        return HttpResponse(200, registry.expose().encode(), CONTENT_TYPE)

    routes = [Route("/metrics", "GET", expose), Route("/", "GET", expose)]
    guard = (lambda request: token.refusal(request.headers)) if token is not None else None
    return RouteTable("metrics", routes, error=text_error, hint="try /metrics", guard=guard)


def text_error(status_code: int, message: str) -> HttpResponse:
    return HttpResponse(status_code, f"{message}\n".encode(), TEXT)


async def serve_metrics(
    host: str,
    port: int,
    registry: Registry,
    *,
    max_connections: int = defaults.METRICS_MAX_CONNECTIONS,
    read_timeout_s: float = defaults.METRICS_READ_TIMEOUT_S,
    tls: ssl.SSLContext | None = None,
    token: BearerToken | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; `task_status.started(port)` gives the bound port (port 0:
    any free one). Bind errors are raised as OSError before `started`."""
    listener = await open_tcp_listener(host, port)  # ValueError for a name, OSError
    port_bound = bound_port(listener)

    table = metrics_routes(registry, token)
    task_status.started(port_bound)
    await serve_http(
        tls_listener(listener, tls),
        table.answer,
        text_error,
        ServerLimits(
            max_connections=max_connections,
            read_timeout_s=read_timeout_s,
            per_source=defaults.METRICS_MAX_PER_SOURCE,
        ),
        name=f"metrics {host}:{port_bound}",
    )
