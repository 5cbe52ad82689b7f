"""The Prometheus registry and exposition (pure), the agent's families, a real scrape."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import trio

from meshhealth.agent.agent_metrics import LATENCY_BUCKETS_S, agent_metrics
from meshhealth.agent.serving.metrics_server import serve_metrics
from meshhealth.metrics import (
    CONTENT_TYPE,
    Registry,
    escape_label_value,
    exponential_buckets,
    format_value,
)
from meshhealth.model import (
    PATH_STATES,
    REACHABILITY_PROTOCOLS,
    HealthReport,
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    RoundReport,
    Target,
    TargetType,
)
from meshhealth.probe.stats import StatsBook
from meshhealth.wire.summary import ClusterSummary
from tests import status_stories
from tests.repo_paths import REPO_ROOT

# One sample line of the text format 0.0.4: name, optional {labels}, value.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE_RE = re.compile(
    rf"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*)\}})?"
    r" (?P<value>[-+]?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|Inf|NaN))"
)


def parse_exposition(text: str) -> dict[str, float]:
    """Every sample as `name{labels}` -> value; fails on any line not in the format."""
    assert text.endswith("\n")
    samples: dict[str, float] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram")
            assert name not in types, f"duplicate TYPE for {name}"
            types[name] = kind
            continue
        match = SAMPLE_RE.fullmatch(line)
        assert match, f"not a sample line: {line!r}"
        base = re.sub(r"_(bucket|sum|count)$", "", match["name"])
        assert match["name"] in types or base in types, f"sample before its TYPE: {line!r}"
        key = match["name"] + (f"{{{match['labels']}}}" if match["labels"] else "")
        assert key not in samples, f"duplicate series {key}"
        samples[key] = float(match["value"])
    return samples


def test_exposition_golden() -> None:
    registry = Registry()
    rounds = registry.counter("t_rounds_total", "Rounds.\nSecond line with \\ backslash.")
    temp = registry.gauge("t_temp", "Temperature.", ("room", "floor"))
    latency = registry.histogram("t_latency_seconds", "Latency.", ("path",), buckets=(0.1, 1))
    rounds.inc()
    rounds.inc(2)
    temp.labels(room='b"1', floor="2").set(21.5)
    temp.labels(room="a\\b\nc", floor="1").set(-3)
    latency.labels(path="x").observe(0.05)
    latency.labels(path="x").observe(0.1)
    latency.labels(path="x").observe(5)
    assert registry.expose() == (
        "# HELP t_rounds_total Rounds.\\nSecond line with \\\\ backslash.\n"
        "# TYPE t_rounds_total counter\n"
        "t_rounds_total 3\n"
        "# HELP t_temp Temperature.\n"
        "# TYPE t_temp gauge\n"
        't_temp{room="a\\\\b\\nc",floor="1"} -3\n'
        't_temp{room="b\\"1",floor="2"} 21.5\n'
        "# HELP t_latency_seconds Latency.\n"
        "# TYPE t_latency_seconds histogram\n"
        't_latency_seconds_bucket{path="x",le="0.1"} 2\n'
        't_latency_seconds_bucket{path="x",le="1"} 2\n'
        't_latency_seconds_bucket{path="x",le="+Inf"} 3\n'
        't_latency_seconds_sum{path="x"} 5.15\n'
        't_latency_seconds_count{path="x"} 3\n'
    )
    parse_exposition(registry.expose())


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (1.0, "1"), (-3, "-3"), (0.25, "0.25"), (5e-05, "5e-05"), (math.inf, "+Inf"),
     (-math.inf, "-Inf"), (math.nan, "NaN"), (1e20, "1e+20")],
)  # fmt: skip
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("plain", "plain"), ('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb")],
)
def test_escape_label_value(raw: str, escaped: str) -> None:
    assert escape_label_value(raw) == escaped


def test_series_removal() -> None:
    registry = Registry()
    gauge = registry.gauge("t_up", "Up.", ("cluster", "node"))
    for cluster, node in [("c1", "a"), ("c1", "b"), ("c2", "a")]:
        gauge.labels(cluster=cluster, node=node).set(1)
    assert gauge.remove(cluster="c1", node="b") is True
    assert gauge.remove(cluster="c1", node="b") is False
    assert gauge.remove_matching(node="a") == 2
    assert gauge.series() == {}
    assert parse_exposition(registry.expose()) == {}


def test_histogram_buckets_are_cumulative() -> None:
    registry = Registry()
    hist = registry.histogram("t_h", "H.", buckets=(1, 2, 3))
    for value in (0.5, 1, 1.5, 2.5, 3, 10):
        hist.observe(value)
    samples = parse_exposition(registry.expose())
    assert [samples[f't_h_bucket{{le="{le}"}}'] for le in ("1", "2", "3", "+Inf")] == [2, 3, 5, 6]
    assert samples["t_h_count"] == 6
    assert samples["t_h_sum"] == pytest.approx(18.5)


@pytest.mark.parametrize(
    "make",
    [
        lambda r: r.gauge("bad-name", "x"),
        lambda r: r.gauge("ok", "x", ("bad-label",)),
        lambda r: r.gauge("ok", "x", ("__reserved",)),
        lambda r: r.gauge("ok", "x", ("a", "a")),
        lambda r: r.histogram("ok", "x", ("le",), buckets=(1,)),
        lambda r: r.histogram("ok", "x", buckets=()),
    ],
)
def test_invalid_families_are_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make(Registry())  # type: ignore[operator]


def test_misuse_is_refused() -> None:
    registry = Registry()
    counter = registry.counter("t_c", "C.", ("a",))
    with pytest.raises(ValueError, match="already registered"):
        registry.gauge("t_c", "again")
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels(b="1")
    with pytest.raises(ValueError, match="only goes up"):
        counter.labels(a="1").inc(-1)
    with pytest.raises(ValueError, match=r"use \.labels"):
        counter.inc()
    with pytest.raises(ValueError, match="has no labels"):
        counter.remove_matching(zzz="1")


def test_series_read_from_a_function_at_exposition() -> None:
    registry = Registry()
    in_flight = registry.gauge("x_in_flight", "Probes in flight.")
    errors = registry.counter("x_errors_total", "Errors.", ("cluster",))
    held = {"in_flight": 3, "errors": 2}
    in_flight.labels().read_from(lambda: held["in_flight"])
    errors.labels(cluster="c1").read_from(lambda: held["errors"])
    assert 'x_errors_total{cluster="c1"} 2' in registry.expose()
    assert "x_in_flight 3" in registry.expose()
    held.update(in_flight=0, errors=5)
    text = registry.expose()
    assert "x_in_flight 0" in text and 'x_errors_total{cluster="c1"} 5' in text
    held["errors"] = 1  # its owner was replaced and counts from 0 again: never goes down
    assert errors.labels(cluster="c1").value == 5
    with pytest.raises(ValueError, match="read from a function"):
        errors.labels(cluster="c1").inc()


def test_a_reading_without_a_value_leaves_its_series_out_of_that_exposition() -> None:
    registry = Registry()
    refreshes: list[int] = []
    held: dict[str, float | None] = {"rss": None, "cpu": None}
    registry.on_expose(lambda: refreshes.append(len(refreshes)))
    rss = registry.gauge("x_rss_bytes", "Resident memory.")
    cpu = registry.counter("x_cpu_seconds_total", "CPU time.")
    rss.labels().read_from(lambda: held["rss"])
    cpu.labels().read_from(lambda: held["cpu"])
    text = registry.expose()
    assert "# TYPE x_rss_bytes gauge" in text  # the family stays, without its sample
    assert parse_exposition(text) == {}
    held.update(rss=2e6, cpu=1.5)
    assert parse_exposition(registry.expose()) == {"x_rss_bytes": 2e6, "x_cpu_seconds_total": 1.5}
    held.update(cpu=None)  # a failed read: left out, and the counter keeps its last value
    assert parse_exposition(registry.expose()) == {"x_rss_bytes": 2e6}
    assert cpu.value == 1.5
    assert refreshes == [0, 1, 2]  # once per exposition


def test_exponential_buckets() -> None:
    assert exponential_buckets(1, 2, 4) == (1, 2, 4, 8)


def _report(results: dict[PathKey, ProbeResult]) -> RoundReport:
    paths = tuple(PathReport(key, "10.0.0.1", result) for key, result in results.items())
    return RoundReport(started_at=100.0, duration_s=0.7, targets=(), paths=paths)


def _status_samples(text: str, node: str) -> dict[str, float]:
    return {
        key: value
        for key, value in parse_exposition(text).items()
        if key.startswith("meshhealth_node_connectivity_status{") and f'target_node="{node}"' in key
    }


def test_agent_metrics_follow_the_status_rules() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="lab1", source_node="node1")
    inputs = status_stories.endpoint_forward_drop()
    metrics.sync_connectivity(inputs.targets, inputs.summaries)
    text = registry.expose()
    samples = parse_exposition(text)
    assert samples["meshhealth_unreachable_nodes"] == 0
    assert samples["meshhealth_unreachable_health_endpoints"] == 1
    assert samples["meshhealth_probe_targets"] == 3
    node2 = _status_samples(text, "node2")
    assert len(node2) == 4 * 4  # 4 paths x 4 statuses
    # Exactly one status series is 1 per path.
    per_path: dict[str, list[float]] = {}
    for key, value in node2.items():
        per_path.setdefault(re.sub(r',status="\w+"', "", key), []).append(value)
    assert all(sorted(values) == [0, 0, 0, 1] for values in per_path.values())
    prefix = (
        'meshhealth_node_connectivity_status{source_cluster="lab1",source_node="node1",'
        'target_cluster="lab1",target_node="node2",'
    )
    assert (
        node2[prefix + 'target_type="endpoint",protocol="icmp",family="ipv4",status="unreachable"}']
        == 1
    )
    assert (
        node2[prefix + 'target_type="node",protocol="http",family="ipv4",status="reachable"}'] == 1
    )


def test_agent_metrics_remove_series_of_nodes_that_left() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="c", source_node="a")
    targets = [Target("c", "a", "10.0.0.1", "10.1.0.1"), Target("c", "b", "10.0.0.2", "10.1.0.2")]
    key_b = PathKey("c", "b", TargetType.ENDPOINT, Protocol.HTTP)
    ok = ProbeResult(ProbeStatus.OK, 100.0, (0.002,), received=1)
    metrics.observe_round(_report({key_b: ok}))
    metrics.sync_connectivity(targets, {})
    text = registry.expose()
    assert 'target_node="b"' in text
    assert (
        _status_samples(text, "b")[
            'meshhealth_node_connectivity_status{source_cluster="c",source_node="a",'
            'target_cluster="c",target_node="b",target_type="endpoint",protocol="http",'
            'family="ipv4",status="unknown"}'
        ]
        == 1
    )
    # b loses its health endpoint: only its endpoint series go.
    metrics.sync_connectivity([targets[0], Target("c", "b", "10.0.0.2", None)], {})
    text = registry.expose()
    assert 'target_node="b",target_type="node"' in text
    assert 'target_node="b",target_type="endpoint"' not in text
    # b leaves.
    metrics.sync_connectivity(targets[:1], {})
    text = registry.expose()
    assert 'target_node="b"' not in text
    assert 'target_node="a"' in text
    assert parse_exposition(text)["meshhealth_probe_targets"] == 1


def test_agent_metrics_observe_round() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="c", source_node="a")
    key = PathKey("c", "b", TargetType.NODE, Protocol.ICMP)
    ok = ProbeResult(ProbeStatus.OK, 100.0, (300e-6, 500e-6), sent=3, received=2)
    failed = PathKey("c", "b", TargetType.NODE, Protocol.HTTP)
    metrics.observe_round(_report({key: ok, failed: ProbeResult(ProbeStatus.TIMEOUT, 100.0)}))
    samples = parse_exposition(registry.expose())
    labels = (
        'source_cluster="c",source_node="a",target_cluster="c",target_node="b",'
        'target_type="node",protocol="icmp",family="ipv4"'
    )
    assert samples[f"meshhealth_node_connectivity_latency_seconds_count{{{labels}}}"] == 1
    assert (
        samples[f'meshhealth_node_connectivity_latency_seconds_bucket{{{labels},le="0.0005"}}'] == 1
    )
    assert (
        samples[f'meshhealth_node_connectivity_latency_seconds_bucket{{{labels},le="0.00025"}}']
        == 0
    )
    assert not any('protocol="http"' in key for key in samples)  # no RTT, no observation
    assert samples["meshhealth_rounds_total"] == 1
    assert samples["meshhealth_round_duration_seconds_count"] == 1
    assert any(k.startswith("meshhealth_build_info{") and v == 1 for k, v in samples.items())


def test_agent_metrics_of_a_dual_stack_target_have_a_family_each() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="c", source_node="a")
    dual = Target("c", "b", "10.0.0.2", "10.1.0.2", "fd77::2", "fd78::2")
    ok = ProbeResult(ProbeStatus.OK, 100.0, (0.002,), received=1)
    failed = ProbeResult(ProbeStatus.TIMEOUT, 100.0)
    book = StatsBook()
    paths = tuple(
        PathReport(
            PathKey("c", "b", t, p, secondary),
            dual.address(t, secondary) or "",
            failed if secondary else ok,
        )
        for t in TargetType
        for p in REACHABILITY_PROTOCOLS
        for secondary in (False, True)
    )
    book.record(RoundReport(100.0, 0.7, (dual,), paths))
    metrics.sync_connectivity([dual], book.summaries())
    samples = _status_samples(registry.expose(), "b")
    assert len(samples) == 2 * 4 * len(PATH_STATES)  # two families x 4 paths x the states
    prefix = (
        'meshhealth_node_connectivity_status{source_cluster="c",source_node="a",'
        'target_cluster="c",target_node="b",target_type="node",protocol="icmp",'
    )
    assert samples[prefix + 'family="ipv4",status="reachable"}'] == 1
    assert samples[prefix + 'family="ipv6",status="unreachable"}'] == 1
    # One rule for the node: a failing family makes it unreachable.
    assert parse_exposition(registry.expose())["meshhealth_unreachable_nodes"] == 1
    # The node loses its IPv6 addresses: only the ipv6 series go.
    metrics.sync_connectivity([Target("c", "b", "10.0.0.2", "10.1.0.2")], {})
    text = registry.expose()
    assert 'family="ipv6"' not in text
    assert 'target_node="b",target_type="node",protocol="icmp",family="ipv4"' in text


def test_latency_buckets_cover_50us_to_5s() -> None:
    assert LATENCY_BUCKETS_S[0] == 50e-6
    assert LATENCY_BUCKETS_S[-1] == 5.0


def test_every_agent_family_is_documented() -> None:
    registry = Registry()
    agent_metrics(registry, source_cluster="c", source_node="a")
    doc = (REPO_ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    missing = [name for name in registry.names() if f"`{name}`" not in doc]
    assert missing == []


async def _scrape(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data


async def test_real_scrape_over_tcp() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="c", source_node="a")
    metrics.etcd_up.labels(cluster="c").set(1)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_metrics, "127.0.0.1", 0, registry)
        answer = await _scrape(
            port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert f"Content-Type: {CONTENT_TYPE}".encode() in head
        samples = parse_exposition(body.decode())
        assert samples['meshhealth_etcd_up{cluster="c"}'] == 1
        missing = await _scrape(port, b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert missing.startswith(b"HTTP/1.1 404 ")
        post = await _scrape(
            port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert post.startswith(b"HTTP/1.1 405 ")
        nursery.cancel_scope.cancel()


def test_a_suspect_path_is_neither_reachable_nor_unreachable_in_the_metrics() -> None:
    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="lab1", source_node="node1")
    inputs = status_stories.lost_probe()
    metrics.sync_connectivity(inputs.targets, inputs.summaries, inputs.verdicts)
    text = registry.expose()
    samples = parse_exposition(text)
    assert samples["meshhealth_suspect_nodes"] == 1
    assert samples["meshhealth_unreachable_nodes"] == 0
    node3 = _status_samples(text, "node3")
    on = sorted(key for key, value in node3.items() if value == 1)
    assert sum(1 for key in on if 'status="suspect"' in key) == 1
    assert any(
        'target_type="node",protocol="icmp",family="ipv4",status="suspect"' in key for key in on
    )


def test_agent_metrics_follow_the_probe_plan() -> None:
    from meshhealth.model import PlanInfo

    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="c", source_node="a")
    metrics.observe_round(_report({}))  # a round without a plan (meshhealth probe) sets none
    assert parse_exposition(registry.expose()).get("meshhealth_probe_plan_nodes", 0) == 0
    plan = PlanInfo(epoch=29_458_123, k=5, rotation_rounds=6, full_mesh=False,
                    full_mesh_max_nodes=16, nodes=99)  # fmt: skip
    metrics.observe_round(dataclasses.replace(_report({}), plan=plan))
    samples = parse_exposition(registry.expose())
    assert samples["meshhealth_probe_plan_targets"] == 5
    assert samples["meshhealth_probe_plan_nodes"] == 99
    assert samples["meshhealth_probe_plan_epoch"] == 29_458_123
    small = dataclasses.replace(plan, nodes=12, epoch=29_458_124)
    metrics.observe_round(dataclasses.replace(_report({}), plan=small))
    samples = parse_exposition(registry.expose())
    assert samples["meshhealth_probe_plan_targets"] == 11  # a full mesh below 17 nodes
    assert samples["meshhealth_probe_plan_epoch"] == 29_458_124


def test_the_cluster_verdict_per_node_and_the_discounted_observers() -> None:
    """From the summaries the agent follows: one series per node that is not reachable
    and per discounted observer (a healthy cluster has none), gone when they are."""
    from meshhealth.diagnosis.cluster_summary import build_summary
    from meshhealth.diagnosis.diagnose import diagnose
    from meshhealth.diagnosis.view import matrix_view
    from meshhealth.documents.matrix import build_matrix
    from tests import matrix_stories

    def summary_of(reports: list[HealthReport]) -> ClusterSummary:
        matrix = build_matrix(reports, now=matrix_stories.NOW, source_clusters=["lab1"])
        findings = diagnose(matrix_view(matrix))
        return build_summary(matrix, findings, cluster="lab1", aggregator="node1")

    registry = Registry()
    metrics = agent_metrics(registry, source_cluster="lab1", source_node="node1")
    metrics.sync_summaries({"lab1": summary_of(matrix_stories.isolated())})
    samples = parse_exposition(registry.expose())
    state = 'meshhealth_cluster_node_state{cluster="lab1",node="lab1/node4",state="unreachable"}'
    discounted = (
        'meshhealth_discounted_observer{source_cluster="lab1",source_node="node4",'
        'reason="node-isolated"}'
    )
    assert samples[state] == 1 and samples[discounted] == 1
    assert [k for k in samples if k.startswith("meshhealth_cluster_node_state")] == [state]
    assert samples['meshhealth_cluster_nodes{cluster="lab1",state="reachable"}'] == 5
    metrics.sync_summaries({"lab1": summary_of(matrix_stories.egress_blocked())})
    samples = parse_exposition(registry.expose())
    assert not [k for k in samples if k.startswith("meshhealth_cluster_node_state")]
    assert [k for k in samples if k.startswith("meshhealth_discounted_observer")] == [
        'meshhealth_discounted_observer{source_cluster="lab1",source_node="node3",'
        'reason="egress-blocked"}'
    ]
    metrics.sync_summaries({})
    assert "meshhealth_discounted_observer{" not in registry.expose()


async def test_one_address_cannot_hold_every_metrics_connection() -> None:
    """At most METRICS_MAX_PER_SOURCE connections from one address: a host that opens
    more (idle, never scraping) gets the extra ones closed at once, and another
    address still scrapes."""
    from meshhealth import defaults

    async def connect(source: str, port: int) -> trio.SocketStream:
        sock = trio.socket.socket()
        await sock.bind((source, 0))
        await sock.connect(("127.0.0.1", port))
        return trio.SocketStream(sock)

    registry = Registry()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_metrics, "127.0.0.1", 0, registry)
        idle = [await connect("127.0.0.2", port) for _ in range(defaults.METRICS_MAX_PER_SOURCE)]
        extra = await connect("127.0.0.2", port)
        with trio.fail_after(5):
            assert await extra.receive_some(100) == b""  # closed at once, nothing said
        other = await connect("127.0.0.3", port)
        await other.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        with trio.fail_after(5):
            assert (await other.receive_some(100)).startswith(b"HTTP/1.1 200 ")
        for stream in (*idle, extra, other):
            await stream.aclose()
        nursery.cancel_scope.cancel()
