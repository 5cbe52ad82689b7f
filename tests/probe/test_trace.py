"""`meshhealth probe --trace`: which received messages answer which hop (table tests,
no root), the trace book, the text output, and real traces through a router namespace
(IPv4 and IPv6) with and without a drop behind the router."""

from __future__ import annotations

import ipaddress
import json
import os
import struct
import subprocess
import sys

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.cli.format_trace import format_trace_text, trace_document
from meshhealth.documents.trace import TraceDocument
from meshhealth.probe.icmp_packet import build_echo_request, checksum
from meshhealth.probe.trace import TraceResult, trace
from meshhealth.probe.trace_match import (
    AnswerKind,
    Hop,
    ProbeOutcome,
    TraceAnswer,
    TraceBook,
    classify,
)
from tests.documents.test_document_types import assert_shape
from tests.plugins.netns import NetnsFactory

COOKIE = bytes(range(16))
IDENT = 0x4242
TARGET = "10.2.0.2"
ROUTER = "10.1.0.254"
TARGET6 = "fd02::2"
ROUTER6 = "fd01::fe"


def _ipv4(src: str, dst: str, payload: bytes, *, ttl: int = 64) -> bytes:
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(payload),
        0,
        0,
        ttl,
        1,
        0,
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    )
    return header + payload


def _icmp4(icmp_type: int, code: int, body: bytes) -> bytes:
    message = struct.pack("!BBHI", icmp_type, code, 0, 0) + body
    csum = checksum(message)
    return message[:2] + struct.pack("!H", csum) + message[4:]


def _request(sequence: int, *, ipv6: bool = False, ident: int = IDENT) -> bytes:
    return build_echo_request(ipv6=ipv6, identifier=ident, sequence=sequence, payload=COOKIE)


def _reply4(src: str, sequence: int, *, ident: int = IDENT, payload: bytes = COOKIE) -> bytes:
    message = struct.pack("!BBHHH", 0, 0, 0, ident, sequence) + payload
    csum = checksum(message)
    return _ipv4(src, "10.1.0.1", message[:2] + struct.pack("!H", csum) + message[4:])


def _error4(
    src: str, icmp_type: int, code: int, quoted_dst: str, sequence: int, **kw: int
) -> bytes:
    request = build_echo_request(
        ipv6=False, identifier=kw.get("ident", IDENT), sequence=sequence, payload=COOKIE
    )
    quoted = _ipv4("10.1.0.1", quoted_dst, request, ttl=1)[:28]  # header + 8 bytes
    return _ipv4(src, "10.1.0.1", _icmp4(icmp_type, code, quoted))


def _error6(icmp_type: int, code: int, quoted_dst: str, sequence: int) -> bytes:
    request = _request(sequence, ipv6=True)
    header = struct.pack("!IHBB", 6 << 28, len(request), 58, 1)
    header += ipaddress.IPv6Address("fd01::1").packed + ipaddress.IPv6Address(quoted_dst).packed
    return struct.pack("!BBHI", icmp_type, code, 0, 0) + header + request


def _reply6(sequence: int, payload: bytes = COOKIE) -> bytes:
    return struct.pack("!BBHHH", 129, 0, 0, IDENT, sequence) + payload


V4_CASES = [
    ("reply", _reply4(TARGET, 7), TARGET, TraceAnswer(AnswerKind.REPLY, 7, TARGET)),
    ("reply, other identifier", _reply4(TARGET, 7, ident=1), TARGET, None),
    ("reply, other cookie", _reply4(TARGET, 7, payload=b"x" * 16), TARGET, None),
    ("reply from another host", _reply4(ROUTER, 7), ROUTER, None),
    (
        "time exceeded from a router",
        _error4(ROUTER, 11, 0, TARGET, 3),
        ROUTER,
        TraceAnswer(AnswerKind.TIME_EXCEEDED, 3, ROUTER),
    ),
    ("time exceeded, request to another host", _error4(ROUTER, 11, 0, "10.9.9.9", 3), ROUTER, None),
    ("time exceeded, other identifier", _error4(ROUTER, 11, 0, TARGET, 3, ident=9), ROUTER, None),
    ("reassembly time exceeded (code 1)", _error4(ROUTER, 11, 1, TARGET, 3), ROUTER, None),
    (
        "host unreachable",
        _error4(ROUTER, 3, 1, TARGET, 4),
        ROUTER,
        TraceAnswer(AnswerKind.UNREACHABLE, 4, ROUTER, "host unreachable"),
    ),
    ("our own request (loopback)", _ipv4("10.1.0.1", TARGET, _request(5)), "10.1.0.1", None),
    ("corrupt checksum", _reply4(TARGET, 7)[:-1] + b"\xff", TARGET, None),
    ("truncated", _reply4(TARGET, 7)[:24], TARGET, None),
]


@pytest.mark.parametrize(
    ("data", "source", "expected"),
    [case[1:] for case in V4_CASES],
    ids=[case[0] for case in V4_CASES],
)
def test_classify_ipv4(data: bytes, source: str, expected: TraceAnswer | None) -> None:
    got = classify(data, source, ipv6=False, identifier=IDENT, target=TARGET, cookie=COOKIE)
    assert got == expected


V6_CASES = [
    ("reply", _reply6(2), TARGET6, TraceAnswer(AnswerKind.REPLY, 2, TARGET6)),
    (
        "reply, scoped source",
        _reply6(2),
        f"{TARGET6}%eth0",
        TraceAnswer(AnswerKind.REPLY, 2, TARGET6),
    ),
    ("reply, other cookie", _reply6(2, b"y" * 16), TARGET6, None),
    (
        "time exceeded",
        _error6(3, 0, TARGET6, 1),
        ROUTER6,
        TraceAnswer(AnswerKind.TIME_EXCEEDED, 1, ROUTER6),
    ),
    ("time exceeded, another destination", _error6(3, 0, "fd09::9", 1), ROUTER6, None),
    (
        "address unreachable",
        _error6(1, 3, TARGET6, 1),
        ROUTER6,
        TraceAnswer(AnswerKind.UNREACHABLE, 1, ROUTER6, "address unreachable"),
    ),
    ("our own request", _request(1, ipv6=True), "fd01::1", None),
]


@pytest.mark.parametrize(
    ("data", "source", "expected"),
    [case[1:] for case in V6_CASES],
    ids=[case[0] for case in V6_CASES],
)
def test_classify_ipv6(data: bytes, source: str, expected: TraceAnswer | None) -> None:
    got = classify(data, source, ipv6=True, identifier=IDENT, target=TARGET6, cookie=COOKIE)
    assert got == expected


@given(st.binary(max_size=200), st.booleans())
def test_classify_never_raises(data: bytes, ipv6: bool) -> None:
    classify(data, "10.0.0.1", ipv6=ipv6, identifier=IDENT, target=TARGET, cookie=COOKIE)


def _answer(kind: AnswerKind, ttl: int, index: int, source: str, count: int = 2) -> TraceAnswer:
    return TraceAnswer(kind, TraceBook.sequence(ttl, index, count), source)


def test_book_records_answers_until_their_deadline_once() -> None:
    book = TraceBook(2)
    for ttl in (1, 2, 3):
        for i in range(2):
            book.mark_sent(ttl, i, 100.0, 1.0)
    window = range(1, 4)
    assert book.record(_answer(AnswerKind.TIME_EXCEEDED, 1, 0, ROUTER), 100.001)
    assert not book.record(_answer(AnswerKind.TIME_EXCEEDED, 1, 0, ROUTER), 100.002)  # dup
    assert not book.record(_answer(AnswerKind.TIME_EXCEEDED, 1, 1, ROUTER), 101.5)  # late
    assert not book.record(TraceAnswer(AnswerKind.REPLY, 999, TARGET), 100.1)  # unknown
    assert book.end_ttl() is None and not book.settled(window)
    assert book.record(_answer(AnswerKind.REPLY, 2, 1, TARGET), 100.003)
    assert book.end_ttl() == 2
    assert not book.settled(window)  # hop 1's second and hop 2's first request still out
    assert book.record(_answer(AnswerKind.REPLY, 3, 0, TARGET), 100.004)  # beyond the end
    hops = book.hops(range(1, 31))
    assert [h.ttl for h in hops] == [1, 2]  # up to the end only
    assert hops[0].probes[0] == ProbeOutcome(ROUTER, pytest.approx(0.001), AnswerKind.TIME_EXCEEDED)
    assert hops[0].probes[1].address is None
    assert hops[1].addresses == (TARGET,)
    assert book.record(_answer(AnswerKind.TIME_EXCEEDED, 1, 1, ROUTER), 100.5)
    assert book.record(_answer(AnswerKind.REPLY, 2, 0, TARGET), 100.5)
    assert book.settled(window)


def _hop(ttl: int, *outcomes: tuple[str | None, AnswerKind | None]) -> Hop:
    return Hop(
        ttl,
        tuple(
            ProbeOutcome(
                a,
                None if a is None else 0.0005,
                k,
                "host unreachable" if k is AnswerKind.UNREACHABLE else "",
            )
            for a, k in outcomes
        ),
    )


_R = (ROUTER, AnswerKind.TIME_EXCEEDED)
_T = (TARGET, AnswerKind.REPLY)
_STAR: tuple[None, None] = (None, None)

TEXT_CASES = [
    (
        "reached in two hops",
        [_hop(1, _R, _R), _hop(2, _T, _STAR)],
        [" 1  10.1.0.254  0.500 ms  0.500 ms", " 2  10.2.0.2  0.500 ms  *"],
    ),
    (
        "stops after the router",
        [_hop(1, _R, _R), *(_hop(t, _STAR, _STAR) for t in range(2, 31))],
        [
            " 1  10.1.0.254  0.500 ms  0.500 ms",
            "2-30  * *",
            "stops after 10.1.0.254 (hop 1): no answer from hop 2 on",
        ],
    ),
    (
        "nobody answers",
        [_hop(t, _STAR, _STAR) for t in range(1, 31)],
        ["1-30  * *", "no answer from any hop"],
    ),
    (
        "the router says unreachable",
        [_hop(1, (ROUTER, AnswerKind.UNREACHABLE), _STAR)],
        [
            " 1  10.1.0.254  0.500 ms !host unreachable  *",
            "stops at 10.1.0.254 (hop 1): unreachable",
        ],
    ),
    (
        "two routers answer one hop, the last hop answers",
        [_hop(1, _R, ("10.1.0.253", AnswerKind.TIME_EXCEEDED))],
        [" 1  10.1.0.254  0.500 ms  10.1.0.253  0.500 ms", "10.2.0.2 not reached in 30 hops"],
    ),
]


@pytest.mark.parametrize(
    ("hops", "lines"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES]
)
def test_text(hops: list[Hop], lines: list[str]) -> None:
    result = TraceResult(TARGET, 30, 2, 0.0, tuple(hops))
    text = format_trace_text(result)
    assert text.splitlines() == ["trace to 10.2.0.2, 30 hops max, 2 probes per hop", *lines]


def test_document_shape_and_last_hop() -> None:
    hops = (_hop(1, _R, _R), _hop(2, _STAR, _STAR))
    doc = trace_document(TraceResult(TARGET, 2, 2, 1.5, hops))
    assert_shape(doc, TraceDocument)
    assert (doc["reached"], doc["last_answering_ttl"], doc["last_answering_address"]) == (
        False,
        1,
        ROUTER,
    )
    assert doc["hops"][1]["probes"][0] == {"address": None, "rtt_s": None, "kind": None, "note": ""}


# --- real traces --------------------------------------------------------------------


def _three_namespaces(netns_factory: NetnsFactory) -> tuple[str, str, str]:
    """client (10.1.0.1, fd01::1) - router (.254 / ::fe on both links) - server
    (10.2.0.2, fd02::2), forwarding on in the router."""
    client, router, server = (netns_factory.create() for _ in range(3))
    netns_factory.veth(
        client,
        router,
        addrs_a=["10.1.0.1/24", "fd01::1/64"],
        addrs_b=[f"{ROUTER}/24", f"{ROUTER6}/64"],
    )
    netns_factory.veth(
        router,
        server,
        addrs_a=["10.2.0.254/24", "fd02::fe/64"],
        addrs_b=[f"{TARGET}/24", f"{TARGET6}/64"],
    )
    netns_factory.sysctl(router, "net.ipv4.ip_forward", "1")
    netns_factory.sysctl(router, "net.ipv6.conf.all.forwarding", "1")
    for ns, v4, v6 in ((client, ROUTER, ROUTER6), (server, "10.2.0.254", "fd02::fe")):
        netns_factory.ip(ns, "route", "add", "default", "via", v4)
        netns_factory.ip(ns, "-6", "route", "add", "default", "via", v6)
    return client, router, server


@pytest.mark.parametrize(("target", "router_ip"), [(TARGET, ROUTER), (TARGET6, ROUTER6)])
def test_trace_through_a_router_then_a_drop_behind_it(
    netns_factory: NetnsFactory, target: str, router_ip: str
) -> None:
    client, router, _ = _three_namespaces(netns_factory)

    async def run() -> TraceResult:
        return await trace(target, max_hops=5, count=3, timeout_s=0.5, netns=client)

    result = trio.run(run)
    assert result.reached
    assert [h.addresses for h in result.hops] == [(router_ip,), (target,)]
    assert all(p.rtt_s is not None and 0 <= p.rtt_s < 0.5 for h in result.hops for p in h.probes)

    netns_factory.nft(
        router,
        """
        table inet tracedrop {
          chain forward_drop {
            type filter hook forward priority 0; policy accept; oifname "veth2a" drop;
          }
        }
        """,
    )
    result = trio.run(run)
    assert not result.reached
    assert [h.addresses for h in result.hops] == [(router_ip,), (), (), (), ()]
    assert f"stops after {router_ip} (hop 1)" in format_trace_text(result)


def test_cli_trace_json_and_exit_status(netns_factory: NetnsFactory) -> None:
    client, _, _ = _three_namespaces(netns_factory)
    argv = [
        sys.executable,
        "-m",
        "meshhealth",
        "probe",
        "--trace",
        TARGET,
        "--max-hops",
        "4",
        "-o",
        "json",
    ]
    done = netns_factory.run(client, *argv, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert_shape(doc, TraceDocument)
    assert [h["addresses"] for h in doc["hops"]] == [[ROUTER], [TARGET]]
    # A target nobody answers for: exit 1, hops up to --max-hops, the last line says where.
    argv_text = [
        sys.executable,
        "-m",
        "meshhealth",
        "probe",
        "--trace",
        "10.2.0.77",
        "--max-hops",
        "3",
        "--count",
        "1",
        "--timeout",
        "0.3",
    ]
    done = netns_factory.run(client, *argv_text, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[1].startswith(" 1  10.1.0.254")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "10.0.0.1", "10.0.0.2"], "--trace takes one TARGET, not TARGET arguments"),
        (["--trace", "10.0.0.1", "--loop"], "--trace takes one TARGET, not --loop"),
        (["--trace", "10.0.0.1", "--max-hops", "65"], "max hops must be 1..64, got 65"),
        (["--trace", "10.0.0.1", "--count", "11"], "requests per hop must be 1..10, got 11"),
        (["--trace", "bad name!"], "invalid target 'bad name!'"),
    ],
)
def test_cli_trace_usage_errors(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "meshhealth", "probe", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 2
    assert message in done.stderr
