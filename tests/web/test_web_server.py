"""The web page's server: its JSON views (pure) and the server over real TCP, with the
real feed hub behind its WebSocket. The page itself runs in a browser in
tests/web/test_web_page.py."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from trio_websocket import open_websocket_url

from meshhealth.agent.path_history import PathHistory
from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.serving.feed_server import FeedHub
from meshhealth.agent.serving.web_access import WebAccess
from meshhealth.agent.serving.web_server import (
    ReadCache,
    ReplayStream,
    WebData,
    is_feed_upgrade,
    load_assets,
    serve_web,
)
from meshhealth.agent.serving.web_views import (
    STATE_CODES,
    cell_document,
    compact_matrix_document,
    parse_node_ref,
)
from meshhealth.documents.matrix import Matrix, build_matrix
from meshhealth.documents.status import LocalNode, path_document
from meshhealth.kvstore import EtcdError
from meshhealth.model import (
    HealthReport,
    PathKey,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Target,
    TargetType,
)
from meshhealth.wire.event import FindingEvent
from tests import matrix_stories

LOCAL = ("lab1", "node1")
# The nodes the agent follows (its status lists only node2: its direct target).
NODES = tuple(Target("lab1", f"node{i}", f"10.77.0.{i}") for i in (1, 2, 3))


def story_matrix(name: str) -> Matrix:
    return build_matrix(matrix_stories.STORIES[name](), now=matrix_stories.NOW)


def status_doc() -> dict[str, Any]:
    """A status document with node1's view of node2 (host paths only)."""
    timed_out = path_document(None) | {"status": "timeout", "text": "Connection timed out"}
    return {
        "local": {"cluster": "lab1", "name": "node1", "node_ip": "10.77.0.1", "health_ip": None},
        "summary": {"reachable": 2, "unreachable": 1, "suspect": 0, "unknown": 0, "total": 3},
        "nodes": [
            {
                "cluster": "lab1",
                "name": "node2",
                "host": {
                    "primary_address": {
                        "ip": "10.77.0.2",
                        "icmp": path_document(None) | {"status": "ok", "rtt_p95_s": 0.002},
                        "http": timed_out,
                    }
                },
                "health_endpoint": None,
            }
        ],
    }


# --- pure views ---------------------------------------------------------------------


@pytest.mark.parametrize("story", sorted(matrix_stories.STORIES))
def test_compact_matrix_has_one_code_per_cell(story: str) -> None:
    matrix = story_matrix(story)
    doc = compact_matrix_document(matrix)
    assert [(n["cluster"], n["name"]) for n in doc["nodes"]] == list(matrix.columns)
    assert len(doc["rows"]) == len(matrix.rows)
    for row, compact in zip(matrix.rows, doc["rows"], strict=True):
        assert doc["nodes"][compact["node"]] == {"cluster": row.source[0], "name": row.source[1]}
        assert compact["states"] == "".join(STATE_CODES[c.state] for c in row.cells)
        assert compact["stale"] == row.stale
    assert doc["lines"] == list(matrix.warnings)
    assert doc["notes"] == list(matrix.notes)
    assert set(doc["codes"].values()) >= {"reachable", "unreachable", "stale", "unknown"}
    json.dumps(doc)  # plain types only


@pytest.mark.parametrize(
    ("reports", "below_plan"),
    [(matrix_stories.subset_healthy, False), (matrix_stories.subset, True)],
)
def test_compact_matrix_marks_the_coverage_line_a_warning_only_below_plan(
    reports: Callable[[], list[HealthReport]], below_plan: bool
) -> None:
    """The page draws `lines` with a warning mark and `notes` plain: the coverage line
    is a note while every node has its k observers."""
    doc = compact_matrix_document(build_matrix(reports(), now=matrix_stories.NOW))
    where = "lines" if below_plan else "notes"
    other = "notes" if below_plan else "lines"
    assert any(line.startswith("Coverage:  subset probing") for line in doc[where])
    assert not any(line.startswith("Coverage:") for line in doc[other])


def test_compact_matrix_gives_every_known_node_its_node_ip() -> None:
    """Under subset probing the status lists only the direct targets; the matrix's
    columns carry the NodeIP of every node the agent follows (none when unknown)."""
    matrix = build_matrix(matrix_stories.subset(), now=matrix_stories.NOW)
    known = [Target("lab1", f"node{i}", f"10.77.0.{i}") for i in range(1, 6)]  # not node6
    doc = compact_matrix_document(matrix, known)
    assert doc["nodes"][:2] == [
        {"cluster": "lab1", "name": "node1", "node_ip": "10.77.0.1"},
        {"cluster": "lab1", "name": "node2", "node_ip": "10.77.0.2"},
    ]
    assert [n.get("node_ip") for n in doc["nodes"]] == [
        "10.77.0.1",
        "10.77.0.2",
        "10.77.0.3",
        "10.77.0.4",
        "10.77.0.5",
        None,
    ]


def test_compact_matrix_shows_the_forward_drop_column() -> None:
    doc = compact_matrix_document(story_matrix("endpoint_forward_drop"))
    assert [row["states"] for row in doc["rows"]] == ["RUR", "RRR", "RUR"]


@pytest.mark.parametrize(
    ("text", "ref"),
    [("lab1/node1", ("lab1", "node1")), ("a/b-c.d", ("a", "b-c.d"))],
)
def test_parse_node_ref(text: str, ref: tuple[str, str]) -> None:
    assert parse_node_ref(text) == ref


@pytest.mark.parametrize("text", ["", "node1", "/node1", "lab1/", "a/b/c"])
def test_parse_node_ref_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="CLUSTER/NODE"):
        parse_node_ref(text)


def test_cell_of_another_observer_is_what_etcd_has() -> None:
    doc = cell_document(
        story_matrix("endpoint_forward_drop"),
        ("lab1", "node3"),
        ("lab1", "node2"),
        local=LOCAL,
        status={},
        history={},
        history_minutes=60,
    )
    assert doc is not None
    assert (doc["source"], doc["target"], doc["state"], doc["own"]) == (
        "lab1/node3",
        "lab1/node2",
        "unreachable",
        False,
    )
    by_name = {p["name"]: p for p in doc["paths"]}
    assert by_name["endpoint/icmp"]["status"] == "timeout"
    assert by_name["endpoint/icmp"]["loss"] == 1.0
    assert by_name["node/icmp"]["status"] == "ok"
    assert "history" not in by_name["node/icmp"]


def test_cell_of_this_agent_adds_its_own_view_and_history() -> None:
    history = PathHistory()
    key = PathKey("lab1", "node2", TargetType.NODE, Protocol.ICMP)
    history.record(key, ProbeResult(ProbeStatus.OK, 1_800_000_000.0, (0.001,), 1, 1))
    doc = cell_document(
        story_matrix("healthy"),
        LOCAL,
        ("lab1", "node2"),
        local=LOCAL,
        status=status_doc(),
        history={"node/icmp": history.minutes(key, now=1_800_000_010.0)},
        history_minutes=60,
    )
    assert doc is not None and doc["own"]
    by_name = {p["name"]: p for p in doc["paths"]}
    # the agent's newest view wins over what it last published (all OK in etcd)
    assert by_name["node/http"]["status"] == "timeout"
    assert by_name["node/http"]["text"] == "Connection timed out"
    assert by_name["node/icmp"]["rtt_p95_s"] == 0.002
    assert by_name["node/icmp"]["ip"] == "10.77.0.2"
    assert by_name["node/icmp"]["history"] == [[1_800_000_000 - 0, 1, 0, 0.001, 0.001, 0.001]]
    assert by_name["node/http"]["history"] == []


def test_cell_of_unknown_nodes_is_none() -> None:
    matrix = story_matrix("healthy")
    for source, target in ((("lab1", "nodeX"), LOCAL), (LOCAL, ("lab9", "node1"))):
        assert (
            cell_document(
                matrix, source, target, local=LOCAL, status={}, history={}, history_minutes=60
            )
            is None
        )


# --- the connection's first bytes ----------------------------------------------------

UPGRADE = b"GET /v1/feed HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"


@pytest.mark.parametrize(
    ("head", "feed"),
    [
        (UPGRADE, True),
        (UPGRADE.replace(b"/v1/feed", b"/v1/feed?x=1"), True),
        (UPGRADE.replace(b"Upgrade: websocket", b"upgrade:  WebSocket"), True),
        (UPGRADE.replace(b"/v1/feed", b"/"), False),
        (UPGRADE.replace(b"GET", b"POST"), False),
        (b"GET /v1/feed HTTP/1.1\r\nHost: x\r\n\r\n", False),
        (UPGRADE.replace(b"websocket", b"h2c"), False),
        (b"garbage\r\n\r\n", False),
        (b"", False),
    ],
)
def test_is_feed_upgrade(head: bytes, feed: bool) -> None:
    assert is_feed_upgrade(head) is feed


async def test_replay_stream_gives_the_prefix_first() -> None:
    left, right = trio.testing.memory_stream_pair()
    replay = ReplayStream(right, b"abcdef")
    await left.send_all(b"ghi")
    assert await replay.receive_some(4) == b"abcd"
    assert await replay.receive_some(100) == b"ef"
    assert await replay.receive_some(100) == b"ghi"
    await replay.send_all(b"out")
    assert await left.receive_some(100) == b"out"


async def test_matrix_cache_reads_once_per_max_age() -> None:
    clock = [0.0]
    reads = 0

    async def read() -> Matrix:
        nonlocal reads
        reads += 1
        await trio.lowlevel.checkpoint()
        return story_matrix("healthy")

    cache = ReadCache(read, max_age_s=5.0, clock=lambda: clock[0])
    async with trio.open_nursery() as nursery:
        for _ in range(10):  # ten viewers at once: one read
            nursery.start_soon(cache.get)
    assert reads == 1
    clock[0] = 4.9
    await cache.get()
    assert reads == 1
    clock[0] = 5.0
    await cache.get()
    assert reads == 2


def test_assets_come_from_the_package() -> None:
    assets = load_assets()
    assert set(assets) == {"index.html", "app.js", "style.css"}
    html = assets["index.html"].decode()
    assert 'src="app.js"' in html and 'href="style.css"' in html
    for text in (html, assets["app.js"].decode(), assets["style.css"].decode()):
        assert "http://" not in text.replace("http://${", "") and "https://" not in text
        assert "cdn" not in text.lower()


# --- the server over TCP --------------------------------------------------------------


class Served:
    def __init__(self) -> None:
        self.matrix_reads = 0
        self.event_reads = 0
        self.events_fail = False
        self.fail_status = False
        self.history = PathHistory()
        self.feed = FeedHub(
            ProbeResults(
                LocalNode("lab1", "node1", "10.77.0.1", None),
                window=30,
                verdicts=PathVerdicts(interval_s=10.0, failing_observers=lambda cluster, node: 0),
            ),
            self.status,
        )

    def status(self) -> dict[str, Any]:
        if self.fail_status:
            raise RuntimeError("broken on purpose")
        return status_doc()

    async def read_matrix(self) -> Matrix:
        self.matrix_reads += 1
        return story_matrix("endpoint_forward_drop")

    async def read_events(self) -> list[FindingEvent]:
        self.event_reads += 1
        if self.events_fail:
            raise EtcdError("etcd http://127.0.0.1:9 unreachable: connection refused")
        now = time.time()
        old = FindingEvent("lab1", "1000000000000-000000000001", "path", ("lab1/node3",), 0.5,
                           "x", now - 3 * 86400, now - 2 * 86400)  # fmt: skip
        closed = FindingEvent("lab1", "1000000000000-000000000002", "node-down",
                              ("lab1/node2",), 0.9, "y", now - 600, now - 60)  # fmt: skip
        still = FindingEvent("lab1", "1000000000000-000000000003", "endpoint-down",
                             ("lab1/node2",), 0.75, "<b>z</b>", now - 30)  # fmt: skip
        return [still, old, closed]

    def data(self) -> WebData:
        return WebData(
            local=LOCAL,
            interval_s=60.0,
            status=self.status,
            read_matrix=self.read_matrix,
            read_events=self.read_events,
            history=self.history,
            feed=self.feed,
            nodes=lambda: NODES,
            node_ips=(NODES[0].node_ip,),
        )


def get(
    port: int, path: str, method: str = "GET", conn: http.client.HTTPConnection | None = None
) -> tuple[int, Mapping[str, str], bytes]:
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        if own:
            conn.close()


async def fetch(port: int, path: str, method: str = "GET") -> tuple[int, Mapping[str, str], bytes]:
    return await trio.to_thread.run_sync(get, port, path, method)


async def test_server_answers_the_page_its_json_and_errors() -> None:
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())
        status, headers, body = await fetch(port, "/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in headers["content-security-policy"]
        assert b"<canvas" in body
        for path, kind in (("/app.js", "text/javascript"), ("/style.css", "text/css")):
            status, headers, body = await fetch(port, path)
            assert status == 200 and headers["content-type"].startswith(kind) and body

        status, headers, body = await fetch(port, "/v1/web/matrix")
        assert status == 200 and headers["cache-control"] == "no-store"
        assert [r["states"] for r in json.loads(body)["rows"]] == ["RUR", "RRR", "RUR"]
        assert [n["node_ip"] for n in json.loads(body)["nodes"]] == [t.node_ip for t in NODES]
        await fetch(port, "/v1/web/matrix")
        assert served.matrix_reads == 1  # cached for half an interval

        status, headers, body = await fetch(port, "/v1/web/status")
        assert status == 200 and json.loads(body)["summary"]["total"] == 3

        # The timeline strip: the last day's events, oldest first; read once per 30 s.
        status, headers, body = await fetch(port, "/v1/web/events")
        doc = json.loads(body)
        assert status == 200 and headers["cache-control"] == "no-store"
        assert [e["kind"] for e in doc["events"]] == ["node-down", "endpoint-down"]
        assert doc["events"][1]["closed_at"] is None and doc["since"] is not None
        await fetch(port, "/v1/web/events")
        assert served.event_reads == 1

        status, headers, body = await fetch(
            port, "/v1/web/cell?source=lab1/node3&target=lab1/node2"
        )
        assert status == 200 and json.loads(body)["state"] == "unreachable"
        assert "access-control-allow-origin" not in headers  # never `*`

        for path, want in (
            ("/v1/web/cell?source=node3&target=lab1/node2", 400),
            ("/v1/web/cell?source=lab1/node9&target=lab1/node2", 404),
            ("/nothing", 404),
            ("/v1/feed", 400),  # without the upgrade
        ):
            status, _, body = await fetch(port, path)
            assert status == want, (path, body)
        status, headers, _ = await fetch(port, "/", method="POST")
        assert status == 405 and headers["allow"] == "GET"
        status, headers, body = await fetch(port, "/app.js", method="HEAD")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 0

        served.fail_status = True
        status, _, body = await fetch(port, "/v1/web/status")
        assert status == 500 and b"internal error" in body
        served.fail_status = False
        status, _, _ = await fetch(port, "/v1/web/status")
        assert status == 200  # one failing request does not stop the server
        nursery.cancel_scope.cancel()


async def test_the_timeline_says_when_etcd_cannot_be_read() -> None:
    served = Served()
    served.events_fail = True
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())
        status, _, body = await fetch(port, "/v1/web/events")
        assert status == 503
        assert body == (
            b"the findings timeline cannot be read: etcd http://127.0.0.1:9 unreachable: "
            b"connection refused\n"
        )
        nursery.cancel_scope.cancel()


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())

        def two_requests() -> list[int]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                return [get(port, p, conn=conn)[0] for p in ("/", "/v1/web/status")]
            finally:
                conn.close()

        assert await trio.to_thread.run_sync(two_requests) == [200, 200]
        nursery.cancel_scope.cancel()


async def test_the_feed_websocket_shares_the_port() -> None:
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())
        async with open_websocket_url(f"ws://127.0.0.1:{port}/v1/feed") as ws:
            first = json.loads(await ws.get_message())
            assert first["type"] == "snapshot"
            assert first["status"]["summary"]["total"] == 3
        nursery.cancel_scope.cancel()


async def test_a_port_in_use_is_an_oserror_before_started() -> None:
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())
        with pytest.raises(OSError):
            await nursery.start(serve_web, "127.0.0.1", port, served.data())
        nursery.cancel_scope.cancel()


# --- who may read the page: Host (DNS rebinding), Origin (cross-site WebSocket) ----------


def _get_with(port: int, path: str, headers: Mapping[str, str]) -> tuple[int, Mapping[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.putrequest("GET", path, skip_host=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        resp = conn.getresponse()
        resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


async def test_a_foreign_host_is_refused_and_cells_name_only_peer_pages() -> None:
    """A page on evil.example rebound to this address still says `Host: evil.example`:
    refused (421). `/v1/web/cell` names another agent's page of the mesh in
    Access-Control-Allow-Origin, never `*`, and no foreign origin."""
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())
        cell = "/v1/web/cell?source=lab1/node3&target=lab1/node2"
        for host, want in (
            (f"127.0.0.1:{port}", 200),
            (f"localhost:{port}", 200),
            (f"10.77.0.1:{port}", 200),  # this node's NodeIP
            (f"evil.example:{port}", 421),
            ("127.0.0.1:1", 421),  # another port
        ):
            status, _ = await trio.to_thread.run_sync(
                _get_with, port, "/v1/web/status", {"Host": host}
            )
            assert status == want, host
        own = {"Host": f"127.0.0.1:{port}"}
        for origin, allowed in (
            (f"http://10.77.0.2:{port}", f"http://10.77.0.2:{port}"),  # a peer's page
            ("http://evil.example", None),
            (f"http://10.77.0.2:{port + 1}", None),  # a peer's address, not the page
            ("null", None),
        ):
            status, headers = await trio.to_thread.run_sync(
                _get_with, port, cell, {**own, "Origin": origin}
            )
            assert status == 200
            assert headers.get("access-control-allow-origin") == allowed, origin
            assert headers["vary"] == "Origin"
        nursery.cancel_scope.cancel()


async def test_the_feed_refuses_foreign_pages() -> None:
    """Cross-site WebSocket hijacking: an upgrade from a foreign page's Origin is
    refused (403) before the handshake; without Origin (`meshhealth watch`) or from
    this page it is served."""
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_web, "127.0.0.1", 0, served.data())
        url = f"ws://127.0.0.1:{port}/v1/feed"
        upgrade = (
            f"GET /v1/feed HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\nOrigin: http://evil.example\r\n\r\n"
        ).encode()
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(upgrade)
            answer = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some(4096):
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 403 ")
        assert b"not served to pages of 'http://evil.example'" in answer
        async with open_websocket_url(
            url, extra_headers=[("Origin", f"http://127.0.0.1:{port}")]
        ) as ws:
            assert json.loads(await ws.get_message())["type"] == "snapshot"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("10.77.0.1:9963", True),
        ("10.77.0.1", False),  # port 80 is not the page's
        ("LOCALHOST:9963", True),
        ("[::1]:9963", True),
        ("127.0.0.1:9963", True),
        ("mesh.example:9963", True),  # --web-allowed-hosts
        ("evil.example:9963", False),
        ("10.77.0.2:9963", False),  # a peer's address is not this page
        ("[::1:9963", False),
        ("10.77.0.1:99999", False),
        ("", False),
        (None, False),
    ],
)
def test_host_names_this_page(header: str | None, allowed: bool) -> None:
    access = WebAccess.for_listen(
        "10.77.0.1", 9963, node_ips=["10.77.0.1", None], extra=["mesh.example"]
    )
    assert access.host_allowed(header) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed", "cors"),
    [
        (None, True, None),  # not a browser
        ("http://10.77.0.1:9963", True, None),  # this page: no CORS needed
        ("http://10.77.0.2:9963", True, "http://10.77.0.2:9963"),  # a peer's page
        ("http://10.77.0.2:9964", False, None),
        ("http://evil.example", False, None),
        ("null", False, None),
        ("file://", False, None),
        ("http://10.77.0.2:notaport", False, None),
    ],
)
def test_origins(origin: str | None, allowed: bool, cors: str | None) -> None:
    access = WebAccess.for_listen("0.0.0.0", 9963, node_ips=["10.77.0.1"])
    peers = ["10.77.0.1", "10.77.0.2", None]
    assert access.origin_allowed(origin, peers) is allowed
    assert access.cors_origin(origin, peers) == cors
