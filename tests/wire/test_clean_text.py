"""Every string field of every etcd value refuses control and bidi characters
(wire/fields.py `clean_text`): such a value does not decode, and readers skip it."""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.agent.membership.peer_nodes import PeerNodes
from meshhealth.kvstore import open_etcd
from meshhealth.metrics import CounterSeries
from meshhealth.model import Node
from meshhealth.terminal_text import UNSAFE_CODES, escape
from meshhealth.wire import fields as f
from meshhealth.wire import keys
from meshhealth.wire.fields import DecodeError
from meshhealth.wire.node import encode_node
from meshhealth.wire.values import decode_cluster_value, decode_value
from tests import matrix_stories as S
from tests.cli.test_diagnose_cli import diagnose_cli, put_reports
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.kv_strategies import clean_chars
from tests.plugins.etcd_server import EtcdServer

ESC = "\x1b"
REFUSED = [ESC, "\x00", "\n", "\t", "\x7f", "\x9b", "\u202a", "\u202e", "\u2066", "\u2069"]
REFUSED += ["\u200f", "\u061c", "\u2028"]
unsafe_chars = st.sampled_from(sorted(map(chr, UNSAFE_CODES)))


@given(st.text())
def test_a_string_is_read_exactly_when_it_holds_no_unsafe_character(text: str) -> None:
    unsafe = [i for i, c in enumerate(text) if ord(c) in UNSAFE_CODES]
    if not unsafe:
        assert f.string(text, "where") == text
        return
    with pytest.raises(DecodeError) as caught:
        f.string(text, "where")
    assert str(caught.value) == (
        f"field 'where': holds the control or bidi character {escape(text[unsafe[0]])} "
        f"at position {unsafe[0]}"
    )


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_the_named_characters_are_refused(char: str) -> None:
    with pytest.raises(DecodeError, match="control or bidi character"):
        f.string(f"a{char}b", "x")


# --- every value, every kind of string field ----------------------------------------------

NODE = Node("node1", "lab1", "10.0.0.1", None, ("10.1.0.0/24",), 4240, "1.0", 1.0)
NODE_WIRE = {
    "v": 1,
    "name": "node1",
    "cluster": "lab1",
    "node_ip": "10.0.0.1",
    "health_ip": None,
    "cidrs": ["10.1.0.0/24"],
    "health_port": 4240,
    "version": "1.0",
    "started_at": 1.0,
}
IP_WIRE = {
    "v": 1,
    "ip": "10.0.0.1",
    "host_ip": "10.0.0.1",
    "node": "node1",
    "identity": 1,
    "labels": ["app=x"],
}
CONFIG_WIRE = {"v": 1, "name": "lab1", "id": 1, "capabilities": ["a"]}
PATH = {"status": "ok", "rtt_s": 0.001, "loss": 0.0}
HEALTH_WIRE = {
    "v": 1,
    "node": "node1",
    "cluster": "lab1",
    "probe_time": 1.0,
    "interval_s": 1.0,
    "targets": [{"cluster": "lab1", "node": "node2", "paths": {"node/icmp": PATH}}],
    "degraded_reasons": ["cpu"],
}
FINDING = {"kind": "node-down", "nodes": ["lab1/node2"], "confidence": 1.0, "since": 1.0}
SUMMARY_WIRE = {
    "v": 1,
    "cluster": "lab1",
    "aggregator": "node1",
    "generated_at": 1.0,
    "nodes": {"reachable": 1, "unreachable": 0, "suspect": 0, "unknown": 0},
    "observers": {"min": 1, "median": 1.0},
    "failing_observers": {"lab1/node2": 1},
    "findings": [{**FINDING, "evidence": "no one reaches it"}],
    "discounted": {
        "lab1/node3": {
            "reason": "degraded",
            "fails": 0,
            "targets": 0,
            "reached_by": 0,
            "observers": 0,
        }
    },
}
CLAIM_WIRE = {"v": 1, "cluster": "lab1", "node": "node1", "since": 1.0}


def _set(path: tuple[Any, ...]) -> Callable[[dict[str, Any], str], None]:
    def put(wire: dict[str, Any], text: str) -> None:
        holder: Any = wire
        for step in path[:-1]:
            holder = holder[step]
        holder[path[-1]] = text

    return put


def _rename(path: tuple[Any, ...], old: str) -> Callable[[dict[str, Any], str], None]:
    """Put the (unsafe) text into a map key instead of a value."""

    def put(wire: dict[str, Any], text: str) -> None:
        holder: Any = wire
        for step in path:
            holder = holder[step]
        holder[text] = holder.pop(old)

    return put


NODE_KEY = keys.node_key("lab1", "node1")
# (key, valid wire map, where the text goes, the field the error names, a valid value)
CASES = [
    (NODE_KEY, NODE_WIRE, _set(("name",)), "name", "node1"),
    (NODE_KEY, NODE_WIRE, _set(("cluster",)), "cluster", "lab1"),
    (NODE_KEY, NODE_WIRE, _set(("node_ip",)), "node_ip", "10.0.0.1"),
    (NODE_KEY, NODE_WIRE, _set(("cidrs", 0)), "cidrs[0]", "10.1.0.0/24"),
    (NODE_KEY, NODE_WIRE, _set(("version",)), "version", "1.0"),
    (keys.ip_key("lab1", "10.0.0.1"), IP_WIRE, _set(("labels", 0)), "labels[0]", "app=x"),
    (keys.ip_key("lab1", "10.0.0.1"), IP_WIRE, _set(("host_ip",)), "host_ip", "10.0.0.1"),
    (
        keys.cluster_config_key("lab1"),
        CONFIG_WIRE,
        _set(("capabilities", 0)),
        "capabilities[0]",
        "a",
    ),
    (
        keys.health_key("lab1", "node1"),
        HEALTH_WIRE,
        _set(("targets", 0, "node")),
        "targets[0].node",
        "node2",
    ),
    (
        keys.health_key("lab1", "node1"),
        HEALTH_WIRE,
        _set(("targets", 0, "paths", "node/icmp", "state")),
        'targets[0].paths["node/icmp"].state',
        "suspect",
    ),
    (
        keys.health_key("lab1", "node1"),
        HEALTH_WIRE,
        _set(("degraded_reasons", 0)),
        "degraded_reasons[0]",
        "cpu",
    ),
    (keys.summary_key("lab1"), SUMMARY_WIRE, _set(("aggregator",)), "aggregator", "node1"),
    (
        keys.summary_key("lab1"),
        SUMMARY_WIRE,
        _set(("findings", 0, "evidence")),
        "findings[0].evidence",
        "no one reaches it",
    ),
    (
        keys.summary_key("lab1"),
        SUMMARY_WIRE,
        _set(("findings", 0, "kind")),
        "findings[0].kind",
        "node-down",
    ),
    (
        keys.summary_key("lab1"),
        SUMMARY_WIRE,
        _set(("findings", 0, "nodes", 0)),
        "findings[0].nodes[0]",
        "lab1/node2",
    ),
    (
        keys.summary_key("lab1"),
        SUMMARY_WIRE,
        _set(("discounted", "lab1/node3", "reason")),
        "discounted.lab1/node3.reason",
        "degraded",
    ),
    (
        keys.summary_key("lab1"),
        SUMMARY_WIRE,
        _rename(("failing_observers",), "lab1/node2"),
        "failing_observers",
        "lab1/node2",
    ),
    (keys.aggregator_key("lab1"), CLAIM_WIRE, _set(("node",)), "node", "node1"),
]


def _decode(key: str, wire: dict[str, Any]) -> object:
    data = msgpack.packb(wire, use_bin_type=True)
    if key in (keys.summary_key("lab1"), keys.aggregator_key("lab1")):
        return decode_cluster_value(key, data)
    return decode_value(key, data)


@pytest.mark.parametrize("case", CASES, ids=[c[3] + "@" + c[0].split("/")[2] for c in CASES])
@given(
    prefix=st.text(clean_chars, max_size=5),
    char=unsafe_chars,
    suffix=st.text(max_size=5),
)
def test_every_string_field_refuses_unsafe_text(
    case: tuple[str, dict[str, Any], Callable[[dict[str, Any], str], None], str, str | None],
    prefix: str,
    char: str,
    suffix: str,
) -> None:
    key, valid, put, field, good = case
    if good is not None:  # the valid map, with the field's good value, decodes
        wire = copy.deepcopy(valid)
        put(wire, good)
        _decode(key, wire)
    wire = copy.deepcopy(valid)
    put(wire, (good or "") + prefix + char + suffix)
    with pytest.raises(DecodeError) as caught:
        _decode(key, wire)
    message = str(caught.value)
    assert f"field '{field}" in message
    assert char not in message  # what the error shows is escaped (printed as it is)


def test_our_own_writer_refuses_unsafe_text() -> None:
    with pytest.raises(ValueError, match=r"field 'version': holds .* \\x1b at position 3"):
        encode_node(dataclasses.replace(NODE, version="1.0\x1b[2J"))


# --- against a real etcd ------------------------------------------------------------------


def _raw_node(name: str, version: str = "1.0", *, cluster: str = "lab1") -> bytes:
    wire = {**NODE_WIRE, "name": name, "cluster": cluster, "version": version}
    data: bytes = msgpack.packb(wire, use_bin_type=True)
    return data


async def test_a_node_entry_with_an_esc_is_skipped_and_the_listing_goes_on(
    etcd_server: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    delivered: list[list[Node]] = []
    metric = CounterSeries()
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await etcd.put(keys.node_key("lab1", "node1"), _raw_node("node1"))
        await etcd.put(keys.node_key("lab1", "node2"), _raw_node("node2\x1b]0;owned\x07"))
        await etcd.put(keys.node_key("lab1", "node3"), _raw_node("node3", "1.0\u202etxt"))
        await etcd.put(keys.node_key("lab1", "node4"), _raw_node("node4"))
        peers = PeerNodes(lambda: [("lab1", etcd)], delivered.append, invalid_metric=metric)
        async with trio.open_nursery() as nursery:
            await nursery.start(peers.run)
            await poll_until(lambda: bool(delivered), 5.0, what="node entries listed")
            nursery.cancel_scope.cancel()
    assert sorted(n.name for n in delivered[-1]) == ["node1", "node4"]
    assert peers.invalid_values == 2 and metric.value == 2
    lines = [r.getMessage() for r in caplog.records if "skipping invalid" in r.getMessage()]
    assert len(lines) == 2
    assert (
        f"{keys.node_key('lab1', 'node2')}: field 'name': holds the control or bidi " in (lines[0])
    )
    assert "\\x1b at position 5" in lines[0]
    assert f"{keys.node_key('lab1', 'node3')}: field 'version': " in lines[1]
    assert "\\u202e at position 3" in lines[1]


def test_meshhealth_matrix_skips_a_health_entry_with_a_bidi_override(
    etcd_server: EtcdServer,
) -> None:
    put_reports(etcd_server, S.healthy)
    report = S.healthy()[0]
    wire = copy.deepcopy(HEALTH_WIRE)
    wire["node"] = "node9"
    wire["probe_time"] = report.probe_time
    wire["targets"][0]["node"] = "node1\u202e"
    key = keys.health_key("lab1", "node9")
    etcd_server.etcdctl("put", key, input_bytes=msgpack.packb(wire, use_bin_type=True))
    result = diagnose_cli("--etcd", etcd_server.endpoint, "--cluster", "lab1", command="matrix")
    assert result.returncode == 0, result.stderr
    assert "Reachable:   9/9 cells" in result.stdout
    assert "skipped 1 health entries that do not decode" in result.stderr
    assert f"{key}: field 'targets[0].node': holds the control or bidi character \\u202e" in (
        result.stderr
    )
    assert "\u202e" not in result.stderr
