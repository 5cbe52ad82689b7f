"""Every HTTP endpoint the agent serves, and the one rule that answers unknown ones.

    table = RouteTable(
        "admin API",
        [Route("/v1/status", "GET", status), Route("/v1/status/probe", "PUT", probe)],
        error=json_error,
        hint="try GET /v1/status",
    )
    response = await table.answer(request)

Each server of the agent (the admin API on its unix socket, /metrics, the web page with
its JSON) builds its table from `Route`s, and `RouteTable.answer` finds the handler by
path and method: an unknown path is 404 with a hint, a known path with another method
405 with `Allow`, in the server's own error format (JSON for the admin API, text for the
others). A GET route answers HEAD too (the server sends the head only). The WebSocket
feed is not a route: its upgrade is taken off the connection before HTTP is parsed
(web_server.py); its path is listed so that a plain GET of it says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from meshhealth.http_server import ErrorRenderer, HttpRequest, HttpResponse

Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    path: str  # exact, without a trailing slash (except "/")
    method: str  # "GET", "PUT"
    handler: Handler


class RouteTable:
    """The routes of one server; `answer` dispatches a request (pure but for handlers)."""

    def __init__(
        self, name: str, routes: Iterable[Route], *, error: ErrorRenderer, hint: str
    ) -> None:
        self.name = name
        self.error = error
        self.hint = hint
        self._routes: dict[str, dict[str, Handler]] = {}
        for route in routes:
            methods = self._routes.setdefault(route.path, {})
            if route.method in methods:
                raise ValueError(f"{name}: {route.method} {route.path} is routed twice")
            methods[route.method] = route.handler

    @property
    def endpoints(self) -> tuple[tuple[str, str], ...]:
        """(method, path) of every route, sorted by path."""
        return tuple(
            (method, path) for path in sorted(self._routes) for method in self._routes[path]
        )

    async def answer(self, request: HttpRequest) -> HttpResponse:
        path = request.path.rstrip("/") or "/"
        methods = self._routes.get(path)
        if methods is None:
            return self.error(404, f"no such endpoint: {request.path} ({self.hint})")
        handler = methods.get(request.method)
        if handler is None and request.method == "HEAD":
            handler = methods.get("GET")
        if handler is None:
            allowed = ", ".join(methods)
            refused = self.error(
                405, f"method {request.method} not allowed on {request.path} (allowed: {allowed})"
            )
            return HttpResponse(
                refused.status_code,
                refused.body,
                refused.content_type,
                (*refused.headers, ("Allow", allowed)),
            )
        return await handler(request)
