"""The one rule for routing the agent's HTTP endpoints, and that every endpoint is
documented where users look for it."""

from __future__ import annotations

import json
import re

import pytest
import trio

from meshhealth.agent.serving.admin_api import admin_routes, json_error
from meshhealth.agent.serving.metrics_server import metrics_routes
from meshhealth.agent.serving.route_table import Route, RouteTable
from meshhealth.agent.serving.web_server import ASSETS, WebApp
from meshhealth.http_server import HttpRequest, HttpResponse
from meshhealth.metrics import Registry
from tests.repo_paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"


async def _said(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, f"{request.method} {request.path}".encode(), "text/plain")


def _request(method: str, path: str) -> HttpRequest:
    return HttpRequest(method, path, "", (), b"")


TABLE = RouteTable(
    "test",
    [Route("/a", "GET", _said), Route("/a", "PUT", _said), Route("/", "GET", _said)],
    error=json_error,
    hint="try GET /a",
)


@pytest.mark.parametrize(
    ("method", "path", "status", "body", "allow"),
    [
        ("GET", "/a", 200, "GET /a", None),
        ("GET", "/a/", 200, "GET /a/", None),  # a trailing slash names the same route
        ("PUT", "/a", 200, "PUT /a", None),
        ("HEAD", "/a", 200, "HEAD /a", None),  # a GET route answers HEAD
        ("GET", "/", 200, "GET /", None),
        ("POST", "/a", 405, "method POST not allowed on /a (allowed: GET, PUT)", "GET, PUT"),
        ("HEAD", "/b", 404, "no such endpoint: /b (try GET /a)", None),
        ("GET", "/b", 404, "no such endpoint: /b (try GET /a)", None),
    ],
)
def test_routing(method: str, path: str, status: int, body: str, allow: str | None) -> None:
    response = trio.run(TABLE.answer, _request(method, path))
    assert response.status_code == status
    text = response.body.decode()
    assert (json.loads(text)["error"] if status >= 400 else text) == body
    assert dict(response.headers).get("Allow") == allow


def test_a_route_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="GET /a is routed twice"):
        RouteTable(
            "t", [Route("/a", "GET", _said), Route("/a", "GET", _said)], error=json_error, hint=""
        )


def _documented(doc: str) -> set[tuple[str, str]]:
    """`| \\`METHOD /path...\\` |` rows of a doc's tables (query strings dropped)."""
    text = (DOCS / doc).read_text()
    return {
        (m[0], m[1].split("?")[0])
        for m in re.findall(r"^\| `(GET|PUT|POST|DELETE) (/[^` ]*)[^`]*`[^|]*\|", text, re.M)
    }


class _Unused:
    """Stands for the data a server answers from: building its routes reads none of it."""

    def __getattr__(self, name: str) -> object:
        def called(*_: object, **__: object) -> object:
            raise AssertionError(f"building the routes called {name}")

        return called


def test_every_admin_endpoint_is_in_agent_md() -> None:
    table = admin_routes(_Unused(), probe_timeout_s=1.0)  # type: ignore[arg-type]
    assert set(table.endpoints) <= _documented("agent.md"), _documented("agent.md")


def test_every_web_endpoint_but_the_page_files_is_in_ui_md() -> None:
    app = WebApp(_Unused(), _Unused(), {}, 1.0)  # type: ignore[arg-type]
    served = {(m, p) for m, p in app.routes.endpoints if p not in ASSETS}
    assert served and served <= _documented("ui.md"), _documented("ui.md")


def test_metrics_answers_at_metrics_and_root() -> None:
    table = metrics_routes(Registry())
    assert set(table.endpoints) == {("GET", "/"), ("GET", "/metrics")}
    assert "/metrics" in (DOCS / "metrics.md").read_text()
