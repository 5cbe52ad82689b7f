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

A table with a `guard` (the bearer token of `--web-token-file`, `--metrics-token-file`:
bearer_token.py) asks it before every route not marked `public` (the page's own files):
the guard's refusal (401) is the answer. This is the one place the token is checked
for routes; the web page's feed upgrade, which is not a route, asks the same guard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from meshhealth.http_server import ErrorRenderer, HttpRequest, HttpResponse

Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
# None: the request may be answered; else the refusal to send instead.
Guard = Callable[[HttpRequest], HttpResponse | None]


@dataclass(frozen=True, slots=True)
class Route:
    path: str  # exact, without a trailing slash (except "/")
    method: str  # "GET", "PUT"
    handler: Handler
    public: bool = False  # answered without asking the table's guard


class RouteTable:
    """The routes of one server; `answer` dispatches a request (pure but for handlers)."""

    def __init__(
        self,
        name: str,
        routes: Iterable[Route],
        *,
        error: ErrorRenderer,
        hint: str,
        guard: Guard | None = None,
    ) -> None:
        self.name = name
        self.error = error
        self.hint = hint
        self.guard = guard
        self._routes: dict[str, dict[str, Route]] = {}
        for route in routes:
            methods = self._routes.setdefault(route.path, {})
            if route.method in methods:
                raise ValueError(f"{name}: {route.method} {route.path} is routed twice")
            methods[route.method] = route

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
        route = methods.get(request.method)
        if route is None and request.method == "HEAD":
            route = methods.get("GET")
        if route is None:
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
        if self.guard is not None and not route.public:
            unauthorized = self.guard(request)
            if unauthorized is not None:
                return unauthorized
        return await route.handler(request)
