"""The admin API: HTTP/JSON on a unix socket, what `meshhealth status` talks to.

    GET /v1/healthz        {"status": "ok", "started_at", "uptime_s", "etcd": {...}}
    GET /v1/status         the status document (docs/status.md); never waits on a round
    PUT /v1/status/probe   a round now; answers when it ends, with the fresh document
                           (504 after `probe_timeout_s`; the round itself goes on)
    GET /v1/matrix         the cluster-wide matrix (docs/clustermesh.md), read from etcd

Errors: unknown path 404, wrong method 405 (with `Allow`) (route_table.py), malformed
request 400, a body too large 413, all `{"error": "..."}`.

The socket exists from the moment `serve_admin_api` has started (before etcd or the
first round): the lesson of cilium-health's `dial unix ...: no such file or directory`.
It is created with mode `defaults.ADMIN_SOCKET_MODE` in a directory made if missing; a
stale socket file (nobody answers on it) is replaced, a live one is refused; the file
is removed on exit (meshhealth.agent.serving.unix_socket).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import trio

from meshhealth import defaults
from meshhealth.agent.serving.route_table import Route, RouteTable
from meshhealth.agent.serving.unix_socket import unix_listener
from meshhealth.documents.matrix_json import MatrixDocument
from meshhealth.documents.status_schema import HealthzDocument, StatusDocument
from meshhealth.http_server import HttpRequest, HttpResponse, ServerLimits, serve_http

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A JSON document the handler has encoded already (UTF-8), sent as it is: the
    status document splices cached JSON instead of encoding 400 KiB per request."""

    data: bytes


class AdminHandler(Protocol):
    """What the agent app provides to the admin API.

    `healthz` and `status` read the last state and return at once. `probe_now` asks for
    a round that starts after the call and returns the document once it has ended. The
    round must run in the agent's own nursery: the admin API cancels `probe_now` when
    its deadline passes (or on shutdown), and that cancel must only stop the waiting.
    """

    def healthz(self) -> HealthzDocument: ...

    def status(self) -> StatusDocument | EncodedJson: ...

    async def probe_now(self) -> StatusDocument | EncodedJson: ...

    async def matrix(self) -> MatrixDocument:
        """The cluster-wide matrix document (meshhealth.documents.matrix_json.matrix_document), read
        from the health entries in etcd of this cluster and every meshed one."""
        ...


def json_response(
    status_code: int,
    doc: Mapping[str, object] | EncodedJson,
    headers: tuple[tuple[str, str], ...] = (),
) -> HttpResponse:
    if isinstance(doc, EncodedJson):
        body = doc.data + b"\n"
    else:
        body = json.dumps(doc, ensure_ascii=False).encode() + b"\n"
    return HttpResponse(status_code, body, JSON, headers)


def json_error(status_code: int, message: str) -> HttpResponse:
    return json_response(status_code, {"error": message})


def admin_routes(handler: AdminHandler, *, probe_timeout_s: float) -> RouteTable:
    """The admin API's endpoints (the module's docstring lists them)."""

    async def healthz(_: HttpRequest) -> HttpResponse:
        return json_response(200, handler.healthz())

    async def status(_: HttpRequest) -> HttpResponse:
        return json_response(200, handler.status())

    async def matrix(_: HttpRequest) -> HttpResponse:
        return json_response(200, await handler.matrix())

    async def probe(_: HttpRequest) -> HttpResponse:
        with trio.move_on_after(probe_timeout_s):
            return json_response(200, await handler.probe_now())
        return json_error(
            504,
            f"the probe round did not finish within {probe_timeout_s:g}s; "
            "GET /v1/status shows the last results",
        )

    routes = [
        Route("/v1/healthz", "GET", healthz),
        Route("/v1/status", "GET", status),
        Route("/v1/status/probe", "PUT", probe),
        Route("/v1/matrix", "GET", matrix),
    ]
    return RouteTable("admin API", routes, error=json_error, hint="try GET /v1/status")


async def serve_admin_api(
    socket_path: str,
    handler: AdminHandler,
    *,
    mode: int = defaults.ADMIN_SOCKET_MODE,
    probe_timeout_s: float = defaults.ADMIN_PROBE_TIMEOUT_S,
    read_timeout_s: float = defaults.ADMIN_READ_TIMEOUT_S,
    max_connections: int = defaults.ADMIN_MAX_CONNECTIONS,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin API until cancelled. `task_status.started(socket_path)` once the
    socket accepts connections. AdminSocketError (before `started`) when the path is in
    use or cannot be bound."""

    table = admin_routes(handler, probe_timeout_s=probe_timeout_s)
    async with unix_listener(socket_path, mode) as listener:
        task_status.started(socket_path)
        await serve_http(
            listener,
            table.answer,
            json_error,
            ServerLimits(max_connections=max_connections, read_timeout_s=read_timeout_s),
            name=f"admin API {socket_path}",
        )
