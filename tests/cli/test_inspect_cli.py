"""`meshhealth inspect`: formatting (pure) and the command against a real etcd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.cli.inspect_cmd import Row, decode_rows, format_json, format_text
from meshhealth.model import HealthReport, PathHealth, ProbeStatus, TargetHealth
from meshhealth.wire.health import HEALTH
from meshhealth.wire.values import to_jsonable
from tests.etcd_helpers import make_node
from tests.plugins.etcd_server import EtcdServer
from tests.plugins.local_etcd import free_loopback_port
from tests.repo_paths import REPO_ROOT

NODE = make_node("n1", "10.0.0.1", "10.1.0.2")


def inspect_cli(*args: str, env_etcd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    env.pop("MESHHEALTH_ETCD", None)
    if env_etcd is not None:
        env["MESHHEALTH_ETCD"] = env_etcd
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", "inspect", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_decode_and_format() -> None:
    rows = decode_rows(
        [*registration_entries(NODE), ("meshhealth/state/ip/v1/c1/10.0.0.9", b"garbage")]
    )
    assert [r.error is None for r in rows] == [True, True, True, False]
    lines = [json.loads(line) for line in format_json(rows).splitlines()]
    assert lines[0] == {
        "key": "meshhealth/state/nodes/v1/c1/n1",
        "value": to_jsonable(NODE),
    }
    assert lines[3]["key"] == "meshhealth/state/ip/v1/c1/10.0.0.9"
    assert lines[3]["error"].startswith("not valid msgpack")
    assert "value" not in lines[3]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([], ""),
        (
            [
                Row("k/long-key", {"v": 1, "ip": "10.0.0.1", "labels": ["a", "b"], "x": None}),
                Row("k/b", error="bad"),
                Row("k/c", {"v": 1, "cidrs": [], "t": [{"n": 1}]}),
            ],
            "KEY         VALUE\n"
            "k/long-key  ip=10.0.0.1 labels=a,b x=-\n"
            "k/b         ERROR: bad\n"
            "k/c         cidrs=-\n"
            "              t[0]: n=1\n",
        ),
    ],
)
def test_format_text(rows: list[Row], expected: str) -> None:
    assert format_text(rows) == expected


def test_text_of_a_health_report_is_one_line_per_target_and_path() -> None:
    """Times in ISO 8601 (UTC), durations as `status` prints them, no JSON blob."""
    paths = {
        "node/icmp": PathHealth(ProbeStatus.OK, 0.000085, 0.0),
        "node/http": PathHealth(ProbeStatus.TIMEOUT, None, 1.0),
    }
    report = HealthReport("n1", "c1", 1795746433.49, 2.0, (TargetHealth("c1", "n2", paths),))
    key = "meshhealth/state/health/v1/c1/n1"
    [row] = decode_rows([(key, HEALTH.encode(report))])
    assert format_text([row]).splitlines()[1:] == [
        f"{key}  node=n1 cluster=c1 probe_time=2026-11-27T02:27:13Z interval_s=2s",
        f"{' ' * len(key)}    targets[0]: cluster=c1 node=n2",
        f"{' ' * len(key)}      paths:",
        f"{' ' * len(key)}        node/http: status=timeout rtt_s=- loss=1.0",
        f"{' ' * len(key)}        node/icmp: status=ok rtt_s=85µs loss=0.0",
    ]


def test_inspect_prints_json_per_key_with_errors_for_garbage(etcd_server: EtcdServer) -> None:
    for key, value in registration_entries(NODE):
        etcd_server.etcdctl("put", key, input_bytes=value)
    etcd_server.etcdctl("put", "meshhealth/state/ip/v1/c1/10.0.0.9", "garbage")
    etcd_server.etcdctl("put", "other/key", "not ours")

    result = inspect_cli("--etcd", etcd_server.endpoint)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    by_key = {o["key"]: o for o in objects}
    assert sorted(by_key) == [
        "meshhealth/state/ip/v1/c1/10.0.0.1",
        "meshhealth/state/ip/v1/c1/10.0.0.9",
        "meshhealth/state/ip/v1/c1/10.1.0.2",
        "meshhealth/state/nodes/v1/c1/n1",
    ]
    assert by_key["meshhealth/state/nodes/v1/c1/n1"]["value"]["node_ip"] == "10.0.0.1"
    assert by_key["meshhealth/state/ip/v1/c1/10.1.0.2"]["value"]["identity"] == 4
    assert "not valid msgpack" in by_key["meshhealth/state/ip/v1/c1/10.0.0.9"]["error"]

    # PREFIX, MESHHEALTH_ETCD and -o text
    text = inspect_cli("meshhealth/state/nodes/", "-o", "text", env_etcd=etcd_server.endpoint)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["KEY", "VALUE"]
    assert lines[1].startswith("meshhealth/state/nodes/v1/c1/n1  name=n1 cluster=c1")
    assert len(lines) == 2


def test_inspect_unreachable_etcd_is_one_line_exit_2() -> None:
    url = f"http://127.0.0.1:{free_loopback_port()}"
    started = time.monotonic()
    result = inspect_cli("--etcd", url, "--timeout", "2")
    assert time.monotonic() - started < 10
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"meshhealth inspect: etcd {url} unreachable: connection refused\n"


def test_inspect_bad_endpoint_is_one_line_exit_2() -> None:
    result = inspect_cli("--etcd", "ftp://127.0.0.1:2379")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unknown scheme 'ftp'" in result.stderr


def test_text_output_escapes_what_etcd_holds() -> None:
    rows = [
        Row("meshhealth/x/\x1b[2Jkey", {"version": "1.0\u202e", "labels": ["a\x9bb"]}),
        Row("meshhealth/y", error="not valid msgpack: \x1b]0;t\x07"),
    ]
    text = format_text(rows)
    assert "\x1b" not in text and "\u202e" not in text and "\x9b" not in text
    lines = text.splitlines()
    assert lines[1].startswith("meshhealth/x/\\x1b[2Jkey  ")
    assert "version=1.0\\u202e" in lines[1] and "labels=a\\x9bb" in lines[1]
    assert lines[2].endswith("ERROR: not valid msgpack: \\x1b]0;t\\x07")
    # columns stay aligned: the escaped key is what the width counts
    assert lines[2].index("ERROR") == lines[1].index("version")
