"""The live feed over real WebSockets: many clients, stuck and slow clients, real agents."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from meshhealth.agent.path_verdicts import PathVerdicts
from meshhealth.agent.probe_results import ProbeResults
from meshhealth.agent.serving.feed_server import (
    FeedHub,
    FeedLimits,
    serve_feed_tcp,
    serve_feed_unix,
)
from meshhealth.documents.feed import FEED_PATH
from meshhealth.documents.status import (
    EtcdState,
    LocalNode,
    RoundState,
    StatusInputs,
    build_status_document,
)
from meshhealth.documents.status_schema import StatusDocument
from meshhealth.model import (
    REACHABILITY_PROTOCOLS,
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    RoundReport,
    Target,
    TargetType,
)
from tests.agent_cluster import AgentCluster
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import free_loopback_port


class FakeProber:
    """Drives a hub the way the agent object does: each result into the record,
    then to the hub; the round into the record, then to the hub."""

    def __init__(self, nodes: int) -> None:
        self.targets = tuple(
            Target("c1", f"n{i:04d}", f"127.0.0.{i % 250 + 1}") for i in range(nodes)
        )
        self.results = ProbeResults(
            LocalNode("c1", "n0000", "127.0.0.1", None),
            window=5,
            verdicts=PathVerdicts(interval_s=10.0, failing_observers=lambda cluster, node: 0),
        )
        self.completed = 0

    def hub(self, limits: FeedLimits | None = None) -> FeedHub:
        return FeedHub(self.results, self.status, limits=limits)

    def status(self) -> StatusDocument:
        return build_status_document(
            StatusInputs(
                local=LocalNode("c1", "n0000", "127.0.0.1", None),
                targets=self.targets,
                summaries={},
                probe_time=None,
                probe_interval_s=1.0,
                etcd=EtcdState(up=True),
                round=RoundState(running=False, completed=self.completed),
                now=time.time(),
            )
        )

    def round(self, hub: FeedHub, rtt_s: float) -> None:
        now = time.time()
        result = ProbeResult(ProbeStatus.OK, now, rtts_s=(rtt_s,), received=1)
        paths = []
        for target in self.targets:
            for protocol in REACHABILITY_PROTOCOLS:
                key = PathKey("c1", target.node, TargetType.NODE, protocol)
                path = PathReport(key, target.node_ip, result)
                hub.publish_path(path, self.results.add(path))
                paths.append(path)
        self.completed += 1
        report = RoundReport(now, 0.1, self.targets, tuple(paths))
        self.results.finish_round(report)
        hub.publish_round(report)


@asynccontextmanager
async def ws_client(
    *, unix_path: str | None = None, port: int | None = None, resource: str = FEED_PATH
) -> AsyncIterator[WebSocketConnection]:
    async with trio.open_nursery() as nursery:
        if unix_path is not None:
            stream = await trio.open_unix_socket(unix_path)
        else:
            assert port is not None
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        try:
            ws = await wrap_client_stream(nursery, stream, "localhost", resource)
        except BaseException:
            await stream.aclose()
            raise
        try:
            yield ws
        finally:
            with trio.move_on_after(2) as scope:
                scope.shield = True
                await ws.aclose()
                await stream.aclose()  # aclose() leaves it open when the peer cut first
            nursery.cancel_scope.cancel()


async def next_json(ws: WebSocketConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await ws.get_message())
    assert message["v"] == 1
    return message


async def poll(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll-with-deadline for a condition of the hub (it has no event to wait on)."""
    deadline = trio.current_time() + timeout_s
    while trio.current_time() < deadline:
        if check():
            return
        await trio.sleep(0.01)
    raise AssertionError(f"{what}: not within {timeout_s}s")


@asynccontextmanager
async def served_hub(tmp_path: Path, hub: FeedHub) -> AsyncIterator[tuple[str, int]]:
    async with trio.open_nursery() as nursery:
        path = await nursery.start(serve_feed_unix, str(tmp_path / "n.feed.sock"), hub)
        port = await nursery.start(serve_feed_tcp, "127.0.0.1", 0, hub)
        yield path, port
        nursery.cancel_scope.cancel()
    assert not (tmp_path / "n.feed.sock").exists()  # removed on exit


async def test_fifty_clients_get_snapshot_paths_and_rounds(tmp_path: Path) -> None:
    prober = FakeProber(nodes=10)
    hub = prober.hub()
    rounds = 3
    seen: list[dict[tuple[str, str], float]] = []
    async with served_hub(tmp_path, hub) as (path, port), trio.open_nursery() as clients:

        async def client(index: int) -> None:
            where = {"unix_path": path} if index % 2 else {"port": port}
            async with ws_client(**where) as ws:  # type: ignore[arg-type]
                snapshot = await next_json(ws)
                assert snapshot["type"] == "snapshot"
                assert len(snapshot["status"]["nodes"]) == 10
                latest: dict[tuple[str, str], float] = {}
                while True:
                    message = await next_json(ws)
                    if message["type"] == "path":
                        latest[(message["node"], message["protocol"])] = message["path"][
                            "latency_s"
                        ]
                    elif message["type"] == "round" and message["round"]["completed"] == rounds:
                        break
                seen.append(latest)

        for index in range(50):
            clients.start_soon(client, index)
        await poll(lambda: len(hub.clients) == 50, 10, "50 clients connected")
        for number in range(1, rounds + 1):
            prober.round(hub, rtt_s=number * 1e-3)
            await trio.testing.wait_all_tasks_blocked(0.01)  # the clients took it
    assert len(seen) == 50
    for latest in seen:  # every client ends with the newest value of every path
        assert len(latest) == 20
        assert set(latest.values()) == {rounds * 1e-3}
    assert hub.stats.lagging_total == 0
    assert hub.stats.connected_total == 50


async def test_stuck_client_is_cut_off_while_others_keep_receiving(tmp_path: Path) -> None:
    prober = FakeProber(nodes=600)  # 2400 paths: a round is ~1 MB, more than socket buffers
    limits = FeedLimits(max_rounds_behind=2, lagging_grace_s=1.0)
    hub = prober.hub(limits)
    async with served_hub(tmp_path, hub) as (path, _port):
        async with ws_client(unix_path=path) as stuck:
            await poll(lambda: len(hub.clients) == 1, 5, "the stuck client connected")
            (stuck_client,) = hub.clients
            async with ws_client(unix_path=path) as reader:
                await poll(lambda: len(hub.clients) == 2, 5, "the reader connected")
                rounds_read = 0
                publish_s: list[float] = []
                for number in range(1, 6):
                    started = time.perf_counter()
                    prober.round(hub, rtt_s=number * 1e-3)
                    publish_s.append(time.perf_counter() - started)
                    while True:  # the reader gets every round, stuck client or not
                        message = await next_json(reader)
                        if message["type"] == "round" and message["round"]["completed"] == number:
                            rounds_read += 1
                            break
                assert rounds_read == 5
                await poll(lambda: len(hub.clients) == 1, 5, "the stuck client cut off")
                assert hub.stats.lagging_total == 1
                assert stuck_client not in hub.clients
                # The stuck client's socket is closed by the server: reading ends.
                with trio.fail_after(10):
                    with pytest.raises(ConnectionClosed):
                        while True:
                            await stuck.get_message()
        # Publishing never waited for anyone: generous bound for 2400 paths + a round.
        assert max(publish_s) < 2.0


async def test_slow_client_is_told_it_lags_then_closed(tmp_path: Path) -> None:
    prober = FakeProber(nodes=600)
    limits = FeedLimits(max_rounds_behind=1, lagging_grace_s=10.0)
    hub = prober.hub(limits)
    async with served_hub(tmp_path, hub) as (path, _port), ws_client(unix_path=path) as slow:
        await poll(lambda: len(hub.clients) == 1, 5, "connected")
        for _ in range(3):
            prober.round(hub, rtt_s=1e-3)
            await trio.testing.wait_all_tasks_blocked(0.01)  # its queue stopped draining
            if hub.stats.lagging_total:
                break
        assert hub.stats.lagging_total == 1
        kinds = []
        with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
            while True:
                kinds.append((await next_json(slow))["type"])
        assert kinds[0] == "snapshot"
        assert kinds[-1] == "lagging"
        assert closed.value.reason is not None and closed.value.reason.code == 1013


async def test_wrong_resource_is_404(tmp_path: Path) -> None:
    from trio_websocket import ConnectionRejected

    hub = FakeProber(1).hub()
    async with served_hub(tmp_path, hub) as (_path, port):
        with pytest.RaisesGroup(ConnectionRejected, flatten_subgroups=True) as rejected:
            async with ws_client(port=port, resource="/nope"):
                pass
        assert rejected.value.exceptions[0].status_code == 404  # type: ignore[union-attr]


# --- a real agent ---------------------------------------------------------------------


@pytest.mark.slow
async def test_agent_feed_snapshot_then_deltas_and_a_stopped_peer(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    with AgentCluster(tmp_path, etcd_server.endpoint, interval_s=1.0, timeout_s=0.5) as cluster:
        feed_port = free_loopback_port()
        n1 = cluster.make("n1", "--feed-listen", f"127.0.0.1:{feed_port}")
        cluster.spawn(n1)
        n2 = cluster.start("n2")
        await trio.to_thread.run_sync(cluster.wait_admin, n1)
        feed_path = n1.socket.removesuffix(".sock") + ".feed.sock"
        async with ws_client(port=feed_port) as tcp:
            assert (await next_json(tcp))["type"] == "snapshot"
        async with ws_client(unix_path=feed_path) as ws:
            snapshot = await next_json(ws)
            assert snapshot["type"] == "snapshot"
            assert snapshot["status"]["local"]["name"] == "n1"
            ok_paths: set[tuple[str, str]] = set()
            with trio.fail_after(15):
                while len(ok_paths) < 4:  # n2's four paths, each as a delta
                    message = await next_json(ws)
                    if (message["type"], message.get("node")) == ("path", "n2") and message["path"][
                        "status"
                    ] == "ok":
                        ok_paths.add((message["target_type"], message["protocol"]))
            rounds = 0
            with trio.fail_after(5):
                while rounds == 0:
                    message = await next_json(ws)
                    if message["type"] == "round":
                        rounds += 1
                        assert {n["name"] for n in message["nodes"]} == {"n1", "n2"}
            n2.signal(signal.SIGSTOP)
            stopped = time.monotonic()
            # interval + timeout, plus slack for a loaded test host.
            with trio.fail_after(1.0 + 0.5 + 3.0):
                while True:
                    message = await next_json(ws)
                    if (
                        message["type"] == "path"
                        and (message["node"], message["target_type"], message["protocol"])
                        == ("n2", "node", "http")
                        and message["path"]["status"] == "timeout"
                    ):
                        assert "status" in message["changed"]
                        break
            failed_after_s = time.monotonic() - stopped
            n2.signal(signal.SIGCONT)
            with trio.fail_after(10):
                while True:
                    message = await next_json(ws)
                    if (
                        message["type"] == "path"
                        and (message["node"], message["target_type"], message["protocol"])
                        == ("n2", "node", "http")
                        and message["path"]["status"] == "ok"
                    ):
                        break
        print(f"n2 node/http failing on the feed {failed_after_s:.2f}s after SIGSTOP")


async def test_clients_that_vanish_mid_send_do_not_stop_the_feed(tmp_path: Path) -> None:
    """A viewer that goes away while the server writes to it (watch --once exits right
    after its snapshot) ends its own connection only: the feed keeps serving."""
    prober = FakeProber(nodes=600)  # rounds larger than the socket buffers
    hub = prober.hub()
    async with served_hub(tmp_path, hub) as (path, _port):
        for _ in range(20):
            stream = await trio.open_unix_socket(path)
            async with trio.open_nursery() as nursery:
                ws = await wrap_client_stream(nursery, stream, "localhost", FEED_PATH)
                assert (await next_json(ws))["type"] == "snapshot"
                prober.round(hub, rtt_s=1e-3)  # queued for this client, being sent
                await stream.aclose()  # gone without a close frame
                nursery.cancel_scope.cancel()
            await poll(lambda: not hub.clients, 5, "the vanished client detached")
        async with ws_client(unix_path=path) as fresh:
            assert (await next_json(fresh))["type"] == "snapshot"


async def _upgrade_answer(port: int, origin: str | None) -> bytes:
    """The server's answer to a raw WebSocket upgrade (what a browser sends)."""
    upgrade = (
        f"GET {FEED_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n" + (f"Origin: {origin}\r\n" if origin else "") + "\r\n"
    ).encode()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(upgrade)
        answer = b""
        with trio.fail_after(5):
            while b"\r\n\r\n" not in answer and (chunk := await stream.receive_some(4096)):
                answer += chunk
    return answer


async def test_the_tcp_feed_refuses_foreign_pages() -> None:
    """Cross-site WebSocket hijacking on `--feed-listen`: an upgrade from a foreign
    page's Origin gets 403 and no WebSocket; without Origin (`meshhealth watch --url`)
    or from another agent's NodeIP on this port (the web page's rule) it is served."""
    hub = FakeProber(nodes=2).hub()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(serve_feed_tcp, node_ips=("10.77.0.1",), peer_ips=lambda: ["10.77.0.2"]),
            "127.0.0.1",
            0,
            hub,
        )
        refused = await _upgrade_answer(port, "http://evil.example")
        assert refused.startswith(b"HTTP/1.1 403 "), refused
        assert hub.stats.origin_refused_total == 1 and not hub.clients
        assert (await _upgrade_answer(port, "null")).startswith(b"HTTP/1.1 403 ")
        # a page of this node's or a peer's address on the feed's port: served
        for origin in (None, f"http://10.77.0.2:{port}", f"http://127.0.0.1:{port}"):
            answer = await _upgrade_answer(port, origin)
            assert answer.startswith(b"HTTP/1.1 101 "), (origin, answer)
        assert hub.stats.origin_refused_total == 2
        async with ws_client(port=port) as ws:  # meshhealth watch --url: no Origin
            assert (await next_json(ws))["type"] == "snapshot"
        nursery.cancel_scope.cancel()
