"""Every HTTP endpoint the agent serves, and the one rule that answers unknown ones.

    table = RouteTable("admin API", [Route("/v1/status", "GET", status), ...],
                       error=json_error, hint="try GET /v1/status")
    response = await table.answer(request)

Each server of the agent builds its table from `Route`s: an unknown path is 404 with a
hint, a known path with another method 405 with `Allow`, in the server's own error
format; a GET route answers HEAD too. A table's `guard` (the bearer token,
bearer_token.py) is asked before every route not marked `public`: the one place the
token is checked for routes.
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
