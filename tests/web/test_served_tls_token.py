"""TLS and the bearer token of the web page and /metrics (`--web-cert/--web-key/
--web-token-file`, `--metrics-cert/--metrics-key/--metrics-token-file`): the checks of
the files (pure but for reading them), the one guard of the route table, and the
servers over real TLS sockets with a CA made by openssl (meshhealth.lab.certs)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path

import pytest
import trio
from trio_websocket import open_websocket_url

from meshhealth.agent.app import AgentStartError, served_security
from meshhealth.agent.config.agent_config import ConfigError, resolve_config
from meshhealth.agent.serving.bearer_token import (
    COOKIE_NAME,
    BearerToken,
    TokenFileError,
    parse_token,
)
from meshhealth.agent.serving.metrics_server import serve_metrics
from meshhealth.agent.serving.route_table import Route, RouteTable
from meshhealth.agent.serving.server_tls import ServerTlsError, server_ssl_context
from meshhealth.agent.serving.web_access import WebAccess
from meshhealth.agent.serving.web_server import serve_web, text_error
from meshhealth.http_server import HttpRequest, HttpResponse
from meshhealth.lab.certs import KeyPair, make_ca, make_cert
from meshhealth.metrics import Registry
from tests.web.test_web_server import Served

TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, KeyPair]:
    """(CA, server certificate for 127.0.0.1) made by openssl."""
    directory = tmp_path_factory.mktemp("pki")
    ca = make_ca(directory)
    return ca, make_cert(ca, directory, "server")


def token_file(directory: Path, text: str = TOKEN, mode: int = 0o600) -> str:
    path = directory / "token"
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return str(path)


def client_context(ca: KeyPair) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca.cert))


# --- the files, checked at start ---------------------------------------------------------


def test_a_good_pair_makes_a_tls12_server_context(pki: tuple[KeyPair, KeyPair]) -> None:
    context = server_ssl_context(str(pki[1].cert), str(pki[1].key))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_bad_certificates_and_keys_are_one_line_naming_the_file(
    pki: tuple[KeyPair, KeyPair], tmp_path: Path
) -> None:
    ca, server = pki
    loose = tmp_path / "loose.key"
    loose.write_bytes(server.key.read_bytes())
    os.chmod(loose, 0o644)
    not_pem = tmp_path / "cert.txt"
    not_pem.write_text("hello\n")
    other = make_cert(ca, tmp_path, "other")
    cases = [
        ((str(server.cert), str(loose)), f"key {loose}: readable by group or others"),
        ((str(tmp_path / "none.crt"), str(server.key)), "No such file or directory"),
        ((str(not_pem), str(server.key)), f"certificate {not_pem}: not a PEM file"),
        ((str(server.cert), str(other.key)), f"key {other.key} does not match certificate"),
    ]
    for (cert, key), expected in cases:
        with pytest.raises(ServerTlsError) as caught:
            server_ssl_context(cert, key)
        assert expected in str(caught.value)
        assert "\n" not in str(caught.value)


def test_the_agent_refuses_a_key_others_can_read(
    pki: tuple[KeyPair, KeyPair], tmp_path: Path
) -> None:
    loose = tmp_path / "web.key"
    loose.write_bytes(pki[1].key.read_bytes())
    os.chmod(loose, 0o644)
    with pytest.raises(AgentStartError) as caught:
        served_security(str(pki[1].cert), str(loose), None, "web")
    assert str(caught.value) == (
        f"--web: key {loose}: readable by group or others (mode 0644): chmod 600 it"
    )
    with pytest.raises(AgentStartError, match=r"--metrics: token file .*: readable by group"):
        served_security(None, None, token_file(tmp_path, mode=0o640), "metrics")


@pytest.mark.parametrize(
    ("text", "ok"),
    [(TOKEN, True), (f"  {TOKEN}\n", True), ("short", False), (TOKEN + " x", False),
     (TOKEN + ";", False), ("", False)],
)  # fmt: skip
def test_parse_token(text: str, ok: bool) -> None:
    if ok:
        assert parse_token(text) == TOKEN
    else:
        with pytest.raises(ValueError, match="not a token"):
            parse_token(text)


def test_token_files_are_checked(tmp_path: Path) -> None:
    assert BearerToken.from_file(token_file(tmp_path), "web").token == TOKEN
    with pytest.raises(TokenFileError, match="readable by group or others"):
        BearerToken.from_file(token_file(tmp_path, mode=0o644), "web")
    with pytest.raises(TokenFileError, match="not a token"):
        BearerToken.from_file(token_file(tmp_path, "tiny"), "web")
    with pytest.raises(TokenFileError, match="No such file"):
        BearerToken.from_file(str(tmp_path / "absent"), "web")


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ((("authorization", f"Bearer {TOKEN}"),), True),
        ((("authorization", f"bearer  {TOKEN} "),), True),
        ((("authorization", f"Basic {TOKEN}"),), False),
        ((("authorization", f"Bearer {TOKEN}x"),), False),
        ((("authorization", "Bearer"),), False),
        ((("cookie", f"a=b; {COOKIE_NAME}={TOKEN}"),), True),
        ((("cookie", f"{COOKIE_NAME}={TOKEN[:-1]}"),), False),
        ((), False),
    ],
)
def test_who_carries_the_token(headers: tuple[tuple[str, str], ...], allowed: bool) -> None:
    token = BearerToken(TOKEN, "web")
    assert token.allows(headers) is allowed
    refusal = token.refusal(headers)
    if allowed:
        assert refusal is None
    else:
        assert refusal is not None and refusal.status_code == 401
        assert ("WWW-Authenticate", 'Bearer realm="meshhealth web"') in refusal.headers


def test_login_sets_a_strict_http_only_cookie() -> None:
    token = BearerToken(TOKEN, "web")
    assert token.login("", secure=True) is None
    login = token.login(f"token={TOKEN}", secure=True)
    assert login is not None and login.status_code == 303
    headers = dict(login.headers)
    assert headers["Location"] == "/"
    assert headers["Set-Cookie"] == (
        f"{COOKIE_NAME}={TOKEN}; Path=/; HttpOnly; SameSite=Strict; Secure"
    )
    plain = token.login(f"token={TOKEN}", secure=False)
    assert plain is not None and "Secure" not in dict(plain.headers)["Set-Cookie"]
    wrong = token.login("token=nope", secure=True)
    assert wrong is not None and wrong.status_code == 401


def test_config_pairs_files_with_their_port() -> None:
    base = {
        "cluster": "c",
        "node": "n",
        "node_ip": "10.0.0.1",
        "etcd": "http://127.0.0.1:2379",
        "health_mode": "none",
    }
    for flags, message in (
        ({"web_listen": "127.0.0.1:9963", "web_cert": "c.pem"}, "--web-cert: needs --web-key"),
        ({"metrics_listen": "127.0.0.1:9962", "metrics_key": "k"},
         "--metrics-key: needs --metrics-cert"),
        ({"web_token_file": "t"}, "--web-token-file: needs --web-listen"),
        ({"metrics_cert": "c", "metrics_key": "k"}, "--metrics-cert: needs --metrics-listen"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            resolve_config({**base, **flags}, {}, {})
    config = resolve_config(
        {**base, "metrics_listen": "127.0.0.1:9962", "metrics_token_file": "t"}, {}, {}
    )
    assert config.metrics_token_file == "t"


# --- one guard in the route table -------------------------------------------------------


async def test_the_table_asks_its_guard_for_every_route_not_public() -> None:
    async def ok(_: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"ok", "text/plain")

    token = BearerToken(TOKEN, "web")
    table = RouteTable(
        "t",
        [Route("/", "GET", ok, public=True), Route("/data", "GET", ok)],
        error=text_error,
        hint="",
        guard=lambda request: token.refusal(request.headers),
    )

    def request(path: str, *headers: tuple[str, str]) -> HttpRequest:
        return HttpRequest("GET", path, "", headers, b"")

    assert (await table.answer(request("/"))).status_code == 200
    assert (await table.answer(request("/data"))).status_code == 401
    bearer = ("authorization", f"Bearer {TOKEN}")
    assert (await table.answer(request("/data", bearer))).status_code == 200
    assert (await table.answer(HttpRequest("HEAD", "/data", "", (), b""))).status_code == 401


# --- the servers over TLS ---------------------------------------------------------------


def https_get(
    port: int, path: str, context: ssl.SSLContext, headers: Mapping[str, str] = {}
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        conn.request("GET", path, headers=dict(headers))
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def plain_get(port: int) -> bytes:
    """What a plain-HTTP client gets from a TLS port: no HTTP answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        return data


async def test_metrics_over_tls_with_a_token(pki: tuple[KeyPair, KeyPair], tmp_path: Path) -> None:
    ca, server = pki
    tls, token = served_security(str(server.cert), str(server.key), token_file(tmp_path), "metrics")
    registry = Registry()
    registry.counter("meshhealth_test_total", "a test counter").inc()
    context = client_context(ca)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_metrics(
                "127.0.0.1", 0, registry, tls=tls, token=token, task_status=task_status
            )
        )
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        status, _, body = await trio.to_thread.run_sync(
            https_get, port, "/metrics", context, bearer
        )
        assert status == 200
        assert b"meshhealth_test_total 1" in body
        status, headers, body = await trio.to_thread.run_sync(https_get, port, "/metrics", context)
        assert status == 401
        assert headers["www-authenticate"] == 'Bearer realm="meshhealth metrics"'
        wrong = {"Authorization": f"Bearer {TOKEN[::-1]}"}
        status, _, _ = await trio.to_thread.run_sync(https_get, port, "/metrics", context, wrong)
        assert status == 401
        answer = await trio.to_thread.run_sync(plain_get, port)
        assert not answer.startswith(b"HTTP/")
        # A client that does not trust the CA does not get in either.
        with pytest.raises(ssl.SSLCertVerificationError):
            await trio.to_thread.run_sync(
                https_get, port, "/metrics", ssl.create_default_context(), bearer
            )
        # The server kept serving after all of that.
        status, _, _ = await trio.to_thread.run_sync(https_get, port, "/metrics", context, bearer)
        assert status == 200
        nursery.cancel_scope.cancel()


async def test_the_web_page_and_its_feed_over_tls_with_a_token(
    pki: tuple[KeyPair, KeyPair], tmp_path: Path
) -> None:
    ca, server = pki
    tls, token = served_security(str(server.cert), str(server.key), token_file(tmp_path), "web")
    context = client_context(ca)
    served = Served()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_web(
                "127.0.0.1", 0, served.data(), tls=tls, token=token, task_status=task_status
            )
        )

        async def get(path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
            return await trio.to_thread.run_sync(https_get, port, path, context, headers)

        status, headers, body = await get("/")
        assert status == 200 and b"<html" in body.lower()  # the page loads without it
        assert (await get("/app.js"))[0] == 200
        status, headers, body = await get("/v1/web/status")
        assert status == 401
        assert headers["www-authenticate"] == 'Bearer realm="meshhealth web"'
        assert b"/?token=TOKEN" in body
        assert (await get("/v1/web/matrix", Cookie=f"{COOKIE_NAME}=wrong"))[0] == 401
        status, headers, _ = await get(f"/?token={TOKEN}")
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"].split(";")[0]
        assert "HttpOnly" in headers["set-cookie"] and "Secure" in headers["set-cookie"]
        status, _, body = await get("/v1/web/status", Cookie=cookie)
        assert status == 200 and json.loads(body)["summary"]["total"] == 3
        status, _, _ = await get("/v1/web/matrix", Authorization=f"Bearer {TOKEN}")
        assert status == 200
        assert (await get("/?token=wrong"))[0] == 401

        url = f"wss://127.0.0.1:{port}/v1/feed"
        upgrade = (
            f"GET /v1/feed HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        stream = await trio.open_ssl_over_tcp_stream(
            "127.0.0.1", port, ssl_context=context, https_compatible=True
        )
        async with stream:
            await stream.send_all(upgrade)
            answer = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some(4096):
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 401 ")  # no token: no feed
        assert b"WWW-Authenticate: Bearer" in answer
        for credential in (("Authorization", f"Bearer {TOKEN}"), ("Cookie", cookie)):
            async with open_websocket_url(url, context, extra_headers=[credential]) as ws:
                first = json.loads(await ws.get_message())
                assert first["type"] == "snapshot"
        answer = await trio.to_thread.run_sync(plain_get, port)
        assert not answer.startswith(b"HTTP/")
        nursery.cancel_scope.cancel()


async def test_the_connection_cap_applies_before_the_handshake(
    pki: tuple[KeyPair, KeyPair],
) -> None:
    """A client that connects and never says hello holds its slot: with the cap at one,
    the next TLS client is closed at once, without a handshake."""
    ca, server = pki
    tls, _ = served_security(str(server.cert), str(server.key), None, "metrics")
    context = client_context(ca)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_metrics(
                "127.0.0.1", 0, Registry(), max_connections=1, tls=tls, task_status=task_status
            )
        )
        silent = await trio.open_tcp_stream("127.0.0.1", port)
        async with silent:
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                await trio.to_thread.run_sync(https_get, port, "/metrics", context)
        # Once the silent client is gone its slot is free again.
        with trio.fail_after(5):
            while True:
                try:
                    status, _, _ = await trio.to_thread.run_sync(
                        https_get, port, "/metrics", context
                    )
                    break
                except (ssl.SSLError, ConnectionError):
                    await trio.sleep(0.05)
        assert status == 200
        nursery.cancel_scope.cancel()


def test_a_host_without_port_means_443_over_tls() -> None:
    plain = WebAccess.for_listen("10.77.0.1", 443, node_ips=())
    tls = WebAccess.for_listen("10.77.0.1", 443, node_ips=(), https=True)
    assert not plain.host_allowed("10.77.0.1")
    assert tls.host_allowed("10.77.0.1")
    assert tls.host_allowed("10.77.0.1:443")
