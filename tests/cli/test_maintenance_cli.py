"""Planned maintenance: the window's wire value and key, the command's checks and text
(pure), and `meshhealth maintenance start|end|list` against a real etcd, expiry
included (short windows, polled with a deadline)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth import defaults, terminal_text
from meshhealth.agent.membership.registrar import registration_entries
from meshhealth.cli.maintenance_cmd import format_windows_text, lease_ttl_s, new_window
from meshhealth.timefmt import parse_duration
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.maintenance import (
    MaintenanceWindow,
    active_windows,
    decode_maintenance,
    encode_maintenance,
)
from meshhealth.wire.values import decode_value
from tests.etcd_helpers import make_node
from tests.plugins.etcd_server import EtcdServer
from tests.repo_paths import REPO_ROOT

NOW = 1_800_000_000.0
CLEAN = st.characters(
    blacklist_categories=("Cc", "Cf", "Zl", "Zp", "Cs"),
    blacklist_characters=[chr(c) for c in terminal_text.UNSAFE_CODES],
)
WINDOW = MaintenanceWindow("c1", "n2", NOW, NOW + 7200, "kernel upgrade", "alice@host")


# --- the value and its key ------------------------------------------------------------


@given(
    start=st.floats(0, 4e9),
    length=st.floats(0.001, defaults.MAINTENANCE_MAX_S),
    # every string on the wire is clean text (no control or bidi characters)
    reason=st.text(CLEAN, max_size=defaults.MAINTENANCE_REASON_MAX_CHARS),
    by=st.text(CLEAN, max_size=256),
)
def test_window_round_trips(start: float, length: float, reason: str, by: str) -> None:
    window = MaintenanceWindow("c1", "node-2.example", start, start + length, reason, by)
    if window.end <= window.start:  # the sum rounded back to start
        return
    data = encode_maintenance(window)
    assert decode_maintenance(data) == window
    assert decode_value(keys.maintenance_key("c1", "node-2.example"), data) == window


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        ({"end": NOW - 1}, "field 'end': must be after 'start'"),
        ({"end": NOW + defaults.MAINTENANCE_MAX_S + 1}, "longer than the longest allowed"),
        ({"node": "N2"}, "field 'node': invalid node name"),
        ({"reason": "x" * 501}, "field 'reason': longer than 500 characters"),
        ({"start": -1.0}, "field 'start': must not be negative"),
        ({"reason": "a\x1b[2Jb"}, "field 'reason': holds the control or bidi character \\x1b"),
    ],
)
def test_bad_windows_are_refused(wire: dict[str, object], error: str) -> None:
    value = {"v": 1, "cluster": "c1", "node": "n2", "start": NOW, "end": NOW + 60, **wire}
    with pytest.raises(DecodeError, match=re.escape(error)):
        decode_maintenance(msgpack.packb(value))


def test_the_key_sits_next_to_the_node_keys_and_must_agree_with_the_value() -> None:
    key = keys.maintenance_key("c1", "n2")
    assert key == "meshhealth/state/maintenance/v1/c1/n2"
    assert keys.parse_key(key) == keys.ParsedKey(keys.KeyKind.MAINTENANCE, "c1", "n2")
    assert keys.maintenance_prefix("c1") == "meshhealth/state/maintenance/v1/c1/"
    with pytest.raises(DecodeError, match="field 'node': value has 'n2' but the key says 'n3'"):
        decode_value(keys.maintenance_key("c1", "n3"), encode_maintenance(WINDOW))


def test_a_window_is_on_until_its_end() -> None:
    assert WINDOW.active_at(NOW - 5)  # a writer's clock ahead does not delay it
    assert WINDOW.active_at(NOW + 7199.9)
    assert not WINDOW.active_at(NOW + 7200)
    other = MaintenanceWindow("c1", "n1", NOW, NOW + 10)
    assert list(active_windows([WINDOW, other], NOW + 5)) == ["c1/n1", "c1/n2"]
    assert list(active_windows([WINDOW, other], NOW + 60)) == ["c1/n2"]


# --- the command's checks and text (pure) ---------------------------------------------


def test_new_window_checks_its_inputs() -> None:
    window = new_window("c1", "n2", now=NOW, duration="1h30m", reason="r", by="me")
    assert window == MaintenanceWindow("c1", "n2", NOW, NOW + 5400, "r", "me")
    assert lease_ttl_s(window, NOW + 0.5) == 5400 + defaults.MAINTENANCE_LEASE_SLACK_S
    for duration, error in [
        ("8d", "--for 8d: must be more than 0 and at most 168h0m0s"),
        ("0s", "--for 0s: must be more than 0"),
        ("soon", "invalid duration 'soon'"),
    ]:
        with pytest.raises(ValueError, match=error):
            new_window("c1", "n2", now=NOW, duration=duration, reason="", by="")
    with pytest.raises(ValueError, match="invalid node name 'Node_2'"):
        new_window("c1", "Node_2", now=NOW, duration="1h", reason="", by="")
    with pytest.raises(ValueError, match="--reason: 501 characters, at most 500"):
        new_window("c1", "n2", now=NOW, duration="1h", reason="x" * 501, by="")
    with pytest.raises(ValueError, match="field 'reason': holds the control or bidi character"):
        new_window("c1", "n2", now=NOW, duration="1h", reason="\u202egpu", by="")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1.5h", 5400)],
)
def test_durations_users_type(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_list_text_escapes_what_it_read_and_leaves_out_ended_windows() -> None:
    evil = MaintenanceWindow("c1", "n3", NOW, NOW + 60, "swap \x1b]0;pwned\x07 disk", "bob")
    ended = MaintenanceWindow("c1", "n4", NOW - 120, NOW - 60)
    text = format_windows_text([evil, WINDOW, ended], NOW + 1)
    assert text == (
        "c1/n2 in maintenance until 2027-01-15T10:00:00Z (1h59m59s left) by alice@host: "
        "kernel upgrade\n"
        "c1/n3 in maintenance until 2027-01-15T08:01:00Z (59s left) by bob: "
        "swap \\x1b]0;pwned\\x07 disk\n"
    )
    assert format_windows_text([ended], NOW) == "No node is in maintenance.\n"


# --- the command against a real etcd -------------------------------------------------


def maintenance(server: EtcdServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    env.pop("MESHHEALTH_CLUSTER", None)
    env["MESHHEALTH_ETCD"] = server.endpoint
    return subprocess.run(
        [sys.executable, "-m", "meshhealth", "maintenance", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def register(server: EtcdServer, name: str) -> None:
    for key, value in registration_entries(make_node(name, "10.0.0.2", "10.1.0.2")):
        server.etcdctl("put", key, input_bytes=value)


def test_start_list_end_round_trip(etcd_server: EtcdServer) -> None:
    register(etcd_server, "n2")
    started = maintenance(
        etcd_server, "start", "n2", "--cluster", "c1", "--reason", "reboot: ünïcode ok", "--for",
        "2h", "--by", "ops",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("c1/n2 in maintenance until ")
    assert started.stdout.rstrip().endswith("left) by ops: reboot: ünïcode ok")
    listed = maintenance(etcd_server, "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    [doc] = json.loads(listed.stdout)
    assert (doc["node"], doc["reason"], doc["by"]) == ("c1/n2", "reboot: ünïcode ok", "ops")
    assert 7190 < doc["left_s"] <= 7200
    # the key has a lease that ends a little after the window
    value = etcd_server.etcdctl("get", keys.maintenance_key("c1", "n2"), "-w", "json").stdout
    lease = json.loads(value)["kvs"][0]["lease"]
    ttl = json.loads(etcd_server.etcdctl("lease", "timetolive", f"{lease:x}", "-w", "json").stdout)
    assert 7200 < ttl["granted-ttl"] <= 7200 + defaults.MAINTENANCE_LEASE_SLACK_S

    ended = maintenance(etcd_server, "end", "n2", "--cluster", "c1")
    assert (ended.returncode, ended.stdout) == (
        0,
        "c1/n2: maintenance ended (reboot: ünïcode ok)\n",
    )
    assert maintenance(etcd_server, "list").stdout == "No node is in maintenance.\n"
    again = maintenance(etcd_server, "end", "n2", "--cluster", "c1")
    assert (again.returncode, again.stdout) == (0, "c1/n2 was not in maintenance\n")


def test_start_refuses_unknown_and_bad_input(etcd_server: EtcdServer) -> None:
    unknown = maintenance(etcd_server, "start", "n9", "--cluster", "c1")
    assert unknown.returncode == 1
    assert unknown.stderr == (
        "meshhealth maintenance start: no node c1/n9: cluster c1 has no entry of it in etcd "
        "(check the name and --cluster; --force records it anyway)\n"
    )
    forced = maintenance(etcd_server, "start", "n9", "--cluster", "c1", "--force", "--for", "1m")
    assert forced.returncode == 0, forced.stderr
    for args, error in [
        (("start", "N9!"), "invalid node name 'N9!'"),
        (("start", "n9", "--for", "30d"), "--for 30d: must be more than 0 and at most 168h0m0s"),
        (("start", "n9", "--cluster", "C 1"), "invalid cluster name 'C 1'"),
        (("start", "n9", "--reason", "a\x1b[2Jb"), "holds the control or bidi character \\x1b"),
    ]:
        refused = maintenance(etcd_server, *args)
        assert refused.returncode == 2, refused
        assert error in refused.stderr and refused.stderr.count("\n") == 1


def test_a_window_ends_by_itself(etcd_server: EtcdServer) -> None:
    register(etcd_server, "n2")
    # long enough for the next command to start (a second or two on a busy machine)
    started = maintenance(etcd_server, "start", "n2", "--cluster", "c1", "--for", "8s")
    assert started.returncode == 0, started.stderr
    assert "c1/n2 in maintenance" in maintenance(etcd_server, "list").stdout
    # over at its end for every reader ...
    deadline = time.monotonic() + 20
    while maintenance(etcd_server, "list").stdout != "No node is in maintenance.\n":
        assert time.monotonic() < deadline, "the window did not end"
        time.sleep(0.2)
    # ... and etcd deletes the key when its lease runs out
    deadline = time.monotonic() + defaults.MAINTENANCE_LEASE_SLACK_S + 10
    key = keys.maintenance_key("c1", "n2")
    while etcd_server.etcdctl("get", key, "--keys-only").stdout.strip():
        assert time.monotonic() < deadline, "etcd kept the key after its lease"
        time.sleep(0.2)
